// Hostile waiting. A client controls the key, the cost, the timeout and the signal of its `acquire`,
// and (on a shared Redis) can publish on a key's channel. Whatever it sends is refused with a typed error
// before any store call, or changes nothing: forged wakes only make waiters ask again (they never pass
// one another or the limit), and one key's flooded queue never holds back another key.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, isFloodgateError, memoryPermitStore, type PermitStore } from '../../src/index.js';
import {
  fromIoredis,
  fromIoredisSubscriber,
  fromNodeRedisSubscriber,
  redisPermitStore,
} from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from '../stores/redis/servers.js';

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

/** The memory permit store, counting the calls that reach it. */
function countedStore(): { store: PermitStore; calls: () => number } {
  const inner = memoryPermitStore();
  let calls = 0;
  const count =
    <A extends unknown[], R>(run: (...args: A) => R) =>
    (...args: A): R => {
      calls++;
      return run(...args);
    };
  return {
    store: {
      name: 'memory',
      acquire: count(inner.acquire),
      refresh: count(inner.refresh),
      release: count(inner.release),
      wait: count(inner.wait),
      leave: count(inner.leave),
      watch: count(inner.watch),
    },
    calls: () => calls,
  };
}

async function errorOf(run: () => unknown): Promise<unknown> {
  try {
    await run();
  } catch (error) {
    return error;
  }
  throw new Error('did not throw');
}

function expectRefused(error: unknown, code: string, option: string): void {
  expect(isFloodgateError(error) && { code: error.code, option: error.option }).toEqual({ code, option });
}

describe('hostile acquire inputs are refused before any store call', () => {
  const { store, calls } = countedStore();
  const permits = createPermits({ store, policy: concurrency({ limit: 2, leaseMs: 1000 }) });

  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '1', 2 ** 53, {}, null, 3])(
    'cost %p: ERR_INVALID_COST',
    async (cost) => {
      expectRefused(await errorOf(() => permits.acquire('k', { cost: cost as number })), 'ERR_INVALID_COST', 'cost');
      expect(calls()).toBe(0);
    },
  );

  it.each([-1, Number.NaN, '10', null, {}, -Number.POSITIVE_INFINITY])(
    'timeoutMs %p: ERR_INVALID_OPTION',
    async (timeoutMs) => {
      expectRefused(
        await errorOf(() => permits.acquire('k', { timeoutMs: timeoutMs as number })),
        'ERR_INVALID_OPTION',
        'timeoutMs',
      );
      expect(calls()).toBe(0);
    },
  );

  it.each([
    {},
    'abort',
    { aborted: 'no', addEventListener() {}, removeEventListener() {} },
    { aborted: false, addEventListener() {} },
  ])('signal %p: ERR_INVALID_OPTION', async (signal) => {
    expectRefused(
      await errorOf(() => permits.acquire('k', { signal: signal as never })),
      'ERR_INVALID_OPTION',
      'signal',
    );
    expect(calls()).toBe(0);
  });

  it('options that are not an object, and keys a store must never see', async () => {
    expectRefused(await errorOf(() => permits.acquire('k', 'fast' as never)), 'ERR_INVALID_OPTION', 'options');
    const tooLong = await errorOf(() => permits.acquire('x'.repeat(100_000)));
    expect(isFloodgateError(tooLong) && tooLong.code).toBe('ERR_INVALID_KEY');
    expect(calls()).toBe(0);
  });

  it.each([-1, 1.5, 10_001, '5', Number.NaN, null])('policy maxQueue %p: ERR_INVALID_POLICY', async (maxQueue) => {
    expectRefused(
      await errorOf(() => concurrency({ limit: 1, leaseMs: 1000, maxQueue: maxQueue as number })),
      'ERR_INVALID_POLICY',
      'maxQueue',
    );
  });

  it.each([0, -1, 1.5, 'x', Number.POSITIVE_INFINITY, 3_600_001])('pollMs %p: ERR_INVALID_OPTION', async (pollMs) => {
    expectRefused(
      await errorOf(() =>
        createPermits({ store, policy: concurrency({ limit: 1, leaseMs: 1000 }), pollMs: pollMs as number }),
      ),
      'ERR_INVALID_OPTION',
      'pollMs',
    );
  });

  it('a subscriber that is not adapted, or adapted with a bad option', async () => {
    const client = fromIoredis(new Redis({ lazyConnect: true }));
    expectRefused(
      await errorOf(() => redisPermitStore({ client, subscriber: {} as never })),
      'ERR_INVALID_OPTION',
      'subscriber',
    );
    expectRefused(
      await errorOf(() => fromIoredisSubscriber(null as never)),
      'ERR_INVALID_OPTION',
      'fromIoredisSubscriber(client)',
    );
    expectRefused(
      await errorOf(() =>
        fromNodeRedisSubscriber(
          { subscribe: async () => {}, unsubscribe: async () => {} },
          { sharded: 'yes' as never },
        ),
      ),
      'ERR_INVALID_OPTION',
      'sharded',
    );
  });
});

describe.skipIf(!redisUp)('hostile waiting on Redis', () => {
  let redis: Redis;
  let subscriber: Redis;
  let attacker: Redis;
  beforeAll(() => {
    redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
    subscriber = redis.duplicate();
    attacker = redis.duplicate();
  });
  afterAll(async () => {
    await Promise.all([redis.quit(), subscriber.quit(), attacker.quit()]);
  });

  function permitsOn(prefix: string, limit: number, maxQueue = 1000) {
    return createPermits({
      store: redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(subscriber) }),
      policy: concurrency({ limit, leaseMs: 30_000, maxQueue }),
      prefix,
      pollMs: 5000,
    });
  }
  async function untilQueued(key: string, n: number): Promise<void> {
    for (let i = 0; i < 500 && (await attacker.zcard(`${key}:q`)) < n; i++) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(await attacker.zcard(`${key}:q`)).toBe(n);
  }

  it('forged wakes on a key channel grant nothing out of turn or beyond the limit', async () => {
    const prefix = uniquePrefix('hostile-wake');
    const permits = permitsOn(prefix, 1);
    const base = `${prefix}:{k}:concurrency`;
    const holder = await permits.acquire('k');
    const order: string[] = [];
    const waiting = ['a', 'b', 'c'].map(async (label, i) => {
      await new Promise((resolve) => setTimeout(resolve, 30 * i));
      const d = await permits.acquire('k');
      order.push(label);
      return d;
    });
    await untilQueued(base, 3);
    for (const message of ['999999999', '1', '3', 'garbage', '-1', '1e308', '', 'x'.repeat(10_000)]) {
      await attacker.publish(`${base}:n`, message);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    // Woken for nothing: still all queued, nobody granted beside the holder.
    expect(order).toEqual([]);
    expect(await attacker.zcard(`${base}:q`)).toBe(3);
    await holder.permit.release();
    for (const d of waiting) await (await d).permit.release();
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it('a key whose queue is flooded to maxQueue refuses more, and never holds back another key', async () => {
    const prefix = uniquePrefix('hostile-flood');
    const permits = permitsOn(prefix, 1, 20);
    const mallory = await permits.acquire('mallory');
    const controller = new AbortController();
    const flood = Array.from({ length: 20 }, () =>
      permits.acquire('mallory', { signal: controller.signal }).catch((error: unknown) => error),
    );
    await untilQueued(`${prefix}:{mallory}:concurrency`, 20);
    const refused = await errorOf(() => permits.acquire('mallory'));
    expect(isFloodgateError(refused) && refused.code).toBe('ERR_QUEUE_FULL');
    const victim = await permits.acquire('victim', { timeoutMs: 1000 });
    expect(victim.allowed).toBe(true);
    await victim.permit.release();
    controller.abort();
    for (const error of await Promise.all(flood)) expect(isFloodgateError(error) && error.code).toBe('ERR_ABORTED');
    expect(await attacker.zcard(`${prefix}:{mallory}:concurrency:q`)).toBe(0);
    await mallory.permit.release();
  });
});
