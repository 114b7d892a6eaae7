import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer, startCluster } from '../../floodgate/test/stores/redis/servers.js';
import { PG_CONFIG, requirePostgres, uniqueSchema } from '../../floodgate/test/stores/sql/postgres-env.js';
import type { Service } from '../src/service.js';
import { descriptor, get, grpcClient, post, startTestService, waitFor } from './helpers.js';
import { PERMIT_CONFIG } from './permit-config.js';

const dir = mkdtempSync(join(tmpdir(), 'floodgate-stores-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const runPostgres = await requirePostgres();

function configFor(prefix: string): string {
  return `prefix: ${prefix}
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: sliding-window, name: per-user, limit: 3, windowMs: 3600000 }
          - { algorithm: token-bucket, name: per-user-bucket, capacity: 10, refillAmount: 1, refillIntervalMs: 60000 }
`;
}

/** Runs the same scenario through a service on `url`: three admitted, one denied, reset, admitted. */
async function scenario(url: string): Promise<void> {
  const prefix = `svc-${randomBytes(6).toString('hex')}`;
  const service = await startTestService(configFor(prefix), { store: url });
  const client = grpcClient(service.grpcPort);
  try {
    await waitFor(async () => (await get(service, '/readyz')).status === 200, 10_000);
    const request = { domain: 'api', descriptors: [descriptor(['user', 'ada'])] };
    const codes: unknown[] = [];
    for (let i = 0; i < 4; i++) codes.push((await client.shouldRateLimit(request)).overall_code);
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect((await post(service, '/v1/reset', request)).status).toBe(200);
    expect((await client.shouldRateLimit(request)).overall_code).toBe('OK');
  } finally {
    client.close();
    await service.close();
  }
}

/**
 * Concurrency permits through a service on `url`: two held, the third refused, a release lets one in; the
 * same through Envoy's protocol (a lease descriptor taken, released by the stream-done call).
 */
async function permitScenario(url: string): Promise<void> {
  const service = await startTestService(PERMIT_CONFIG, { store: url });
  const client = grpcClient(service.grpcPort);
  try {
    await waitFor(async () => (await get(service, '/readyz')).status === 200, 10_000);
    const tenant = `t-${randomBytes(6).toString('hex')}`;
    const body = { domain: 'llm', entries: [{ key: 'tenant', value: tenant }] };
    const a = await post(service, '/v1/permits/acquire', body);
    const b = await post(service, '/v1/permits/acquire', body);
    expect([a.body.allowed, b.body.allowed]).toEqual([true, true]);
    expect(b.body.fence as number).toBeGreaterThan(a.body.fence as number);
    const refused = await post(service, '/v1/permits/acquire', body);
    expect(refused.body).toMatchObject({ allowed: false, reason: 'limit', inFlight: 2 });
    expect((await post(service, '/v1/permits/release', { ...body, leaseId: a.body.leaseId })).body.released).toBe(true);
    expect((await post(service, '/v1/permits/acquire', body)).body.allowed).toBe(true);
    // Envoy: the big model takes one permit per request id, given back by the stream-done call.
    const lease = (id: string, done = false) => ({
      entries: [
        { key: 'model', value: 'big' },
        { key: 'floodgate_lease', value: `${tenant}-${id}` },
        ...(done ? [{ key: 'floodgate_release', value: '1' }] : []),
      ],
    });
    const call = async (id: string, done = false) =>
      (await client.shouldRateLimit({ domain: 'llm', descriptors: [lease(id, done)] })).overall_code;
    expect([await call('r1'), await call('r2')]).toEqual(['OK', 'OVER_LIMIT']);
    expect(await call('r1', true)).toBe('OK');
    expect(await call('r3')).toBe('OK');
    await call('r3', true);
  } finally {
    client.close();
    await service.close();
  }
}

describe('stores by URL', () => {
  it('memory', () => scenario('memory:?maxKeys=1000'));

  it('sqlite', () => scenario(`sqlite:${join(dir, 'floodgate.db')}?table=service_state`));

  it.skipIf(!runRedis)('redis', () => scenario('redis://127.0.0.1:6379'));

  it('sqlite: concurrency permits', () => permitScenario(`sqlite:${join(dir, 'permits.db')}?table=service_state`));

  it.skipIf(!runPostgres)('postgres: concurrency permits (their tables migrated on start)', async () => {
    const schema = uniqueSchema('service_permits');
    try {
      await permitScenario(`postgres://postgres@127.0.0.1:5432/test?schema=${schema}`);
    } finally {
      const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pool.end();
    }
  });

  it.skipIf(!runPostgres)('postgres (migrated on start)', async () => {
    const schema = uniqueSchema('service');
    try {
      await scenario(`postgres://postgres@127.0.0.1:5432/test?schema=${schema}&unlogged=true`);
    } finally {
      const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pool.end();
    }
  });

  it.skipIf(!runRedis)('redis+cluster (a real 6-node cluster)', { timeout: 120_000 }, async () => {
    // Ports 7200–7299: the library's cluster tests, which may run at the same time, use 7000–7099.
    const cluster = await startCluster();
    try {
      await scenario(
        `redis+cluster://${cluster.ports
          .slice(0, 2)
          .map((p) => `127.0.0.1:${p}`)
          .join(',')}`,
      );
    } finally {
      await cluster.stop();
    }
  });
});

/** A free port on loopback. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** A redis-server of this test, on a spare port, that the test stops and starts again. */
function redisServer(port: number): { stop(): Promise<void>; start(): void } {
  let child: ChildProcess | undefined;
  const start = () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
  };
  const stop = () =>
    new Promise<void>((resolve) => {
      const current = child;
      if (current === undefined || current.exitCode !== null || current.signalCode !== null) return resolve();
      current.once('exit', () => resolve());
      current.kill('SIGKILL');
    });
  start();
  return { stop, start };
}

describe.skipIf(!runRedis)('Redis stopped and started under a running service', () => {
  const servers: { stop(): Promise<void> }[] = [];
  const services: Service[] = [];
  afterAll(async () => {
    await Promise.all(services.map((s) => s.close()));
    await Promise.all(servers.map((s) => s.stop()));
  });

  it('answers UNAVAILABLE (never UNKNOWN) while Redis is down, turns unready, and recovers', {
    timeout: 30_000,
  }, async () => {
    const port = await freePort();
    const redis = redisServer(port);
    servers.push(redis);
    const service = await startTestService(configFor(`down-${randomBytes(4).toString('hex')}`), {
      store: `redis://127.0.0.1:${port}`,
    });
    services.push(service);
    const client = grpcClient(service.grpcPort);
    const request = { domain: 'api', descriptors: [descriptor(['user', 'grace'])] };
    try {
      await waitFor(async () => (await get(service, '/readyz')).status === 200, 10_000);
      expect((await client.shouldRateLimit(request)).overall_code).toBe('OK');

      await redis.stop();
      const failure = await client.shouldRateLimit(request).then(
        () => undefined,
        (error: { code: number; details: string }) => error,
      );
      expect(failure?.code).toBe(status.UNAVAILABLE);
      expect(failure?.details).toMatch(/redis store/);
      const http = await post(service, '/v1/decide', request);
      expect(http.status).toBe(503);
      await waitFor(async () => (await get(service, '/readyz')).status === 503, 5000);

      redis.start();
      await waitFor(async () => (await get(service, '/readyz')).status === 200, 15_000);
      // A fresh server: the key starts over.
      expect((await client.shouldRateLimit(request)).overall_code).toBe('OK');
    } finally {
      client.close();
    }
  });

  it('with --failure open, admits while Redis is down and counts the decisions as degraded', {
    timeout: 30_000,
  }, async () => {
    const port = await freePort();
    const redis = redisServer(port);
    servers.push(redis);
    const { startService } = await import('../src/service.js');
    const { pino } = await import('pino');
    const lines: { msg: string; failure?: string; code?: string }[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const service = await startService({
      config: configFor(`open-${randomBytes(4).toString('hex')}`),
      store: `redis://127.0.0.1:${port}`,
      httpPort: 0,
      grpcPort: 0,
      logger,
      failure: 'open',
    });
    services.push(service);
    const client = grpcClient(service.grpcPort);
    try {
      await waitFor(async () => (await get(service, '/readyz')).status === 200, 10_000);
      await redis.stop();
      const request = { domain: 'api', descriptors: [descriptor(['user', 'hopper'])] };
      for (let i = 0; i < 5; i++) expect((await client.shouldRateLimit(request)).overall_code).toBe('OK');
      const decided = await post(service, '/v1/decide', request);
      expect((decided.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ reason: 'degraded' });
      const metrics = (await get(service, '/metrics')).text;
      expect(metrics).toMatch(/floodgate_degraded_decisions_total 6/);
      // The breaker opened once: one log line, however many calls it answered, and the metrics say so.
      expect(metrics).toMatch(/floodgate_store_breaker_open\{store="redis"\} 1/);
      expect(metrics).toMatch(/floodgate_store_breaker_openings_total\{store="redis"\} 1/);
      const opened = lines.filter((line) => line.msg.startsWith('the redis store is failing'));
      expect(opened.map((line) => [line.msg, line.failure])).toEqual([
        [
          "the redis store is failing: until it answers again, calls are admitted without limiting (failure 'open')",
          'open',
        ],
      ]);
    } finally {
      client.close();
    }
  });
});

describe.skipIf(!runPostgres)('a PostgreSQL URL naming a missing database', () => {
  it('stays unready and says at error level that retrying will not help', async () => {
    const { startService } = await import('../src/service.js');
    const { pino } = await import('pino');
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const { host, port, user } = PG_CONFIG;
    const service = await startService({
      config: configFor(`missing-${randomBytes(4).toString('hex')}`),
      store: `postgres://${user}@${host}:${port}/floodgate_no_such_database`,
      httpPort: 0,
      grpcPort: false,
      logger,
    });
    try {
      await waitFor(() => lines.some((line) => line.msg.startsWith('the store cannot work as configured')), 10_000);
      expect((await get(service, '/readyz')).status).not.toBe(200);
      const said = lines.find((line) => line.msg.startsWith('the store cannot work as configured'));
      expect(said?.level).toBe(50);
    } finally {
      await service.close();
    }
  });
});
