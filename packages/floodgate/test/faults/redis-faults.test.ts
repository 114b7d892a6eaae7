import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { describe, expect, it } from 'vitest';
import { fromIoredis, fromNodeRedis, type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { sleep } from './load.js';
import { type FaultRun, faultScenario, now } from './scenario.js';
import { type StallingProxy, stallingProxy, startRedis, type TestRedis } from './servers.js';

type Driver = 'ioredis' | 'node-redis';
const DRIVERS: readonly Driver[] = ['ioredis', 'node-redis'];

/**
 * A client configured as the failure-modes guide advises: reconnect every 50 ms, so service returns
 * soon after the server does. The error listener is the application's job (node-redis and ioredis
 * report connection errors as events).
 */
async function connect(driver: Driver, port: number): Promise<{ client: RedisScriptClient; close(): void }> {
  if (driver === 'ioredis') {
    const redis = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 50 });
    redis.on('error', () => {});
    return { client: fromIoredis(redis), close: () => redis.disconnect() };
  }
  const redis = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 } });
  redis.on('error', () => {});
  await redis.connect();
  return { client: fromNodeRedis(redis), close: () => redis.destroy() };
}

/**
 * Runs the fault scenario on a redis-server of its own (reached through a stalling proxy when asked),
 * and stops everything it started, also when the scenario fails.
 */
async function onOwnRedis(
  driver: Driver,
  options: { durable?: boolean; proxy?: boolean; label: string },
  fault: (redis: TestRedis, proxy: StallingProxy | undefined) => Promise<FaultRun>,
): Promise<void> {
  const redis = await startRedis({ durable: options.durable ?? false });
  const proxy = options.proxy ? await stallingProxy(redis.port) : undefined;
  try {
    const connection = await connect(driver, proxy?.port ?? redis.port);
    try {
      await faultScenario(redisStore({ client: connection.client }), () => fault(redis, proxy), {
        label: options.label,
      });
    } finally {
      connection.close();
    }
  } finally {
    await proxy?.close();
    await redis.stop();
  }
}

describe('Redis faults, on redis-server processes this test starts on ports the OS picks', () => {
  for (const driver of DRIVERS) {
    it(`${driver}: Redis killed (SIGKILL) mid-load and restarted`, async () => {
      // Durable: acknowledged writes survive the kill, so admissions count exactly across it.
      await onOwnRedis(driver, { durable: true, label: `${driver}, Redis killed` }, async (redis) => {
        const faultAt = now();
        await redis.kill();
        await sleep(1000);
        await redis.start();
        return { faultAt, backAt: now() };
      });
    }, 30_000);

    it(`${driver}: a server that accepts connections and never answers, then thaws`, async () => {
      await onOwnRedis(driver, { proxy: true, label: `${driver}, stalled then thawed` }, async (_, proxy) => {
        const faultAt = now();
        proxy?.stall();
        await sleep(1500);
        proxy?.resume();
        return { faultAt, backAt: now() };
      });
    }, 30_000);

    it(`${driver}: a server that never answers, then its connections are reset`, async () => {
      await onOwnRedis(driver, { proxy: true, label: `${driver}, stalled then reset` }, async (_, proxy) => {
        const faultAt = now();
        proxy?.stall();
        await sleep(1500);
        proxy?.cut();
        return { faultAt, backAt: now() };
      });
    }, 30_000);
  }

  it('the proxy really stalls: a bare client waits past the timeout', async () => {
    const redis = await startRedis();
    const proxy = await stallingProxy(redis.port);
    const client = new Redis({ host: '127.0.0.1', port: proxy.port });
    client.on('error', () => {});
    try {
      expect(await client.ping()).toBe('PONG');
      proxy.stall();
      const reply = await Promise.race([client.ping(), sleep(400).then(() => 'no answer')]);
      expect(reply).toBe('no answer');
      proxy.resume();
      expect(await client.ping()).toBe('PONG');
    } finally {
      client.disconnect();
      await proxy.close();
      await redis.stop();
    }
  });
});
