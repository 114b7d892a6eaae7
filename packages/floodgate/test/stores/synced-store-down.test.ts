import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, syncedLimiter } from '../../src/index.js';
import { fromIoredis, type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

const HOUR = 3_600_000;

describe.skipIf(!available)('synced limiter while its Redis is unreachable', () => {
  const clients: Redis[] = [];
  afterAll(() => {
    for (const redis of clients) redis.disconnect();
  });

  /** A Redis store whose connection the test cuts and restores; `calls` counts the scripts it was sent. */
  async function cuttable() {
    const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    clients.push(redis);
    await new Promise((resolve) => redis.once('ready', resolve));
    const base = fromIoredis(redis);
    const counted = { calls: 0 };
    const client: RedisScriptClient = {
      cluster: false,
      // One macrotask per call, as a network round trip takes: a loop of failing calls cannot starve timers.
      evalsha: async (sha, keys, args) => {
        counted.calls++;
        // A run-away loop of calls parks here, so that its test fails on its timeout rather than spinning.
        if (counted.calls > 100) return new Promise<never>(() => {});
        await new Promise((resolve) => setImmediate(resolve));
        return base.evalsha(sha, keys, args);
      },
      eval: base.eval,
    };
    return { redis, counted, store: redisStore({ client }) };
  }

  for (const failure of ['throw', 'closed'] as const) {
    it(`close() ends after one failed push when the store fails (failure: '${failure}')`, {
      timeout: 5000,
    }, async () => {
      const { redis, counted, store } = await cuttable();
      const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
      const policies = [fixedWindow({ limit: 100, windowMs: HOUR })];
      const limiter = createLimiter({
        store,
        clock,
        policies,
        prefix: uniquePrefix('syncdown'),
        failure,
        breaker: false,
      });
      const synced = syncedLimiter(limiter, { clock, autoSync: false, localBudget: 10 });
      expect((await synced.limit('k')).allowed).toBe(true);
      expect((await synced.limit('k')).allowed).toBe(true);
      expect(synced.stats.localDecisions).toBe(1);
      redis.disconnect();
      counted.calls = 0;
      await synced.close();
      expect(counted.calls).toBe(1);
      expect(synced.stats.syncErrors).toBe(1);
    });
  }

  it("units admitted locally are pushed once the store is back, also under failure: 'open'", async () => {
    const { redis, store } = await cuttable();
    const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const policies = [fixedWindow({ limit: 100, windowMs: HOUR })];
    const prefix = uniquePrefix('syncdown');
    const limiter = createLimiter({ store, clock, policies, prefix, failure: 'open', breaker: false });
    const synced = syncedLimiter(limiter, { clock, autoSync: false, localBudget: 10 });
    for (let i = 0; i < 6; i++) expect((await synced.limit('k')).allowed).toBe(true);
    expect(synced.stats.localDecisions).toBe(5);
    redis.disconnect();
    // The store cannot count the five: the push is answered by the failure policy, and they stay pending.
    await synced.sync();
    expect(synced.stats.syncErrors).toBe(1);
    if (redis.status !== 'end') await new Promise((resolve) => redis.once('end', resolve));
    await redis.connect();
    await synced.close();
    const checker = createLimiter({ store, clock, policies, prefix });
    expect((await checker.status('k')).remaining).toBe(94);
    await checker.reset('k');
  });
});
