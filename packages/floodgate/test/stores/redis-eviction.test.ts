// A Redis that evicts limiter keys resets other clients' limits: with `maxmemory 8mb` and
// `maxmemory-policy allkeys-lru`, a flood of 200,000 fresh keys evicted the keys of 100 victims at their
// limit of 5, and they got 500 more calls. Every limiter key has a TTL, so the `volatile-*` policies do
// the same. The store reads the server's settings at its first decision and warns (FloodgateWarning
// FLOODGATE_REDIS_EVICTION) when they can evict; under `noeviction` the flood is refused instead (OOM, a
// store error the limiter's failure policy answers) and the victims get nothing more. Each test runs a
// redis-server of its own, on a free port.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow } from '../../src/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { checkServerPolicy, evictionRisk, parseMemoryInfo } from '../../src/stores/redis/server-policy.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { startRedis, type TestRedis } from '../faults/servers.js';
import { collectWarnings } from '../http/warnings.js';
import { redisAvailable, requireServer } from './redis/servers.js';

const redisUp = requireServer(await redisAvailable(), 'redis-server (and Redis at 127.0.0.1:6379)');

const VICTIMS = 100;
const LIMIT = 5;
const FLOOD = 200_000;

/** The report's flood: victims at their limit, fresh keys, then 5 more calls per victim. */
async function flood(redis: Redis) {
  const limiter = createLimiter({
    store: redisStore({ client: fromIoredis(redis) }),
    policies: [fixedWindow({ limit: LIMIT, windowMs: 600_000, align: 'first-request' })],
    prefix: uniquePrefix('eviction'),
    failure: 'throw',
    breaker: false,
  });
  for (let v = 0; v < VICTIMS; v++) {
    for (let i = 0; i < LIMIT; i++) expect((await limiter.limit(`victim-${v}`)).allowed).toBe(true);
  }
  let refused = 0;
  for (let i = 0; i < FLOOD; i += 2000) {
    const batch = await Promise.allSettled(Array.from({ length: 2000 }, (_, j) => limiter.limit(`flood-${i + j}`)));
    refused += batch.filter((r) => r.status === 'rejected').length;
  }
  let extra = 0;
  let victimErrors = 0;
  for (let v = 0; v < VICTIMS; v++) {
    for (let i = 0; i < LIMIT; i++) {
      const decision = await limiter.limit(`victim-${v}`).catch(() => undefined);
      if (decision === undefined) victimErrors++;
      else if (decision.allowed) extra++;
    }
  }
  const evicted = Number(/^evicted_keys:(\d+)/m.exec(await redis.info('stats'))?.[1]);
  return { refused, extra, evicted, victimErrors };
}

describe.skipIf(!redisUp)('Redis eviction settings', () => {
  let server: TestRedis | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    server = await startRedis({ args: ['--maxmemory', '8mb', '--maxmemory-policy', 'allkeys-lru'] });
    redis = new Redis({ host: '127.0.0.1', port: server.port });
  }, 30_000);
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('reads them at the first decision and warns once when they can evict limiter keys', async () => {
    const warnings = collectWarnings();
    try {
      const store = redisStore({ client: fromIoredis(redis as Redis) });
      const limiter = createLimiter({ store, policies: [fixedWindow({ limit: 5, windowMs: 1000 })] });
      for (let i = 0; i < 3; i++) await limiter.limit('k');
      const check = await (store as unknown as { serverPolicy: { result: Promise<unknown> } }).serverPolicy.result;
      expect(check).toMatchObject({ settings: { maxmemory: 8 * 1024 * 1024, policy: 'allkeys-lru' } });
      await warnings.flush();
      expect(warnings.codes()).toEqual(['FLOODGATE_REDIS_EVICTION']);
      expect(warnings.warnings[0]?.message).toMatch(/maxmemory-policy allkeys-lru: once it is full it evicts any key/);
    } finally {
      warnings.stop();
    }
  });

  it('volatile-* policies are a risk too (every limiter key has a TTL); noeviction and no maxmemory are not', () => {
    expect(evictionRisk({ maxmemory: 1, policy: 'volatile-lru' })).toMatch(
      /keys with a TTL, which every limiter key has/,
    );
    expect(evictionRisk({ maxmemory: 1, policy: 'volatile-ttl' })).toBeDefined();
    expect(evictionRisk({ maxmemory: 1, policy: 'allkeys-random' })).toBeDefined();
    expect(evictionRisk({ maxmemory: 1, policy: 'noeviction' })).toBeUndefined();
    expect(evictionRisk({ maxmemory: 0, policy: 'allkeys-lru' })).toBeUndefined();
    expect(parseMemoryInfo('# Memory\r\nmaxmemory:8388608\r\nmaxmemory_policy:volatile-lfu\r\n')).toEqual({
      maxmemory: 8388608,
      policy: 'volatile-lfu',
    });
  });

  it('the flood: 200,000 fresh keys evict victims at their limit (allkeys-lru); noeviction keeps them exact', {
    timeout: 600_000,
  }, async () => {
    const r = redis as Redis;
    const before = await flood(r);
    // The victims' keys were evicted: each starts its limit over.
    expect(before.evicted).toBeGreaterThan(0);
    expect(before.extra).toBeGreaterThan(0);
    await r.flushall();
    await r.config('RESETSTAT');
    await r.config('SET', 'maxmemory-policy', 'noeviction');
    try {
      const after = await flood(r);
      // Full, Redis refuses the flood's writes (OOM), and evicts nothing: not one call more for a victim.
      expect(after.evicted).toBe(0);
      expect(after.refused).toBeGreaterThan(0);
      expect(after.extra).toBe(0);
      // Full under noeviction, Redis refuses every script that may write (OOM): the victims' calls are store
      // errors, answered by the limiter's failure policy (here 'throw'), until memory frees up.
      expect(before.victimErrors).toBe(0);
      console.log(
        `Redis maxmemory 8mb, ${VICTIMS} victims at ${LIMIT}, ${FLOOD} fresh keys: allkeys-lru evicted ${before.evicted} keys, victims got ${before.extra} more (exact: 0); noeviction evicted ${after.evicted}, refused ${after.refused} flood calls (OOM), victims got ${after.extra} more and ${after.victimErrors} of ${VICTIMS * LIMIT} calls failed (OOM)`,
      );
    } finally {
      await r.config('SET', 'maxmemory-policy', 'allkeys-lru');
    }
  });

  it('the default server (noeviction) draws no warning', async () => {
    const local = new Redis({ host: '127.0.0.1', port: 6379 });
    try {
      const warnings = collectWarnings();
      const check = await checkServerPolicy(fromIoredis(local));
      await warnings.flush();
      warnings.stop();
      expect(check).toMatchObject({ risk: undefined });
      expect(warnings.codes()).toEqual([]);
    } finally {
      local.disconnect();
    }
  });
});

describe.skipIf(!redisUp)('Redis whose INFO is disabled', () => {
  it('warns once that the settings could not be read; decisions go on', { timeout: 30_000 }, async () => {
    const server = await startRedis({ args: ['--rename-command', 'INFO', ''] });
    const redis = new Redis({ host: '127.0.0.1', port: server.port, enableReadyCheck: false });
    const warnings = collectWarnings();
    try {
      const store = redisStore({ client: fromIoredis(redis) });
      const limiter = createLimiter({ store, policies: [fixedWindow({ limit: 2, windowMs: 60_000 })] });
      const allowed = [];
      for (let i = 0; i < 3; i++) allowed.push((await limiter.limit('k')).allowed);
      expect(allowed).toEqual([true, true, false]);
      const check = await (store as unknown as { serverPolicy: { result: Promise<unknown> } }).serverPolicy.result;
      expect(check).toMatchObject({ unreadable: expect.stringMatching(/^ERR /) });
      await warnings.flush();
      expect(warnings.codes()).toEqual(['FLOODGATE_REDIS_POLICY_UNKNOWN']);
    } finally {
      warnings.stop();
      redis.disconnect();
      await server.stop();
    }
  });
});
