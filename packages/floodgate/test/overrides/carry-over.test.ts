import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  memoryStore,
  type Policy,
  type Store,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { createOverrides, memoryOverrides, withOverrides } from '../../src/overrides/index.js';
import { fromPg, postgresStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT } from '../stores/redis/servers.js';
import { PG_CONFIG, uniqueSchema } from '../stores/sql/postgres-env.js';
import { postgresUp, redisUp } from './backends.js';

/**
 * A limit that shrinks (10 → 4) or grows (10 → 20) after 6 of 10 were consumed, mid-window, on every
 * algorithm and every store. State stays under the base policy's name, so nothing is forgotten:
 * - the counting algorithms (windows, the log, the interval token bucket) keep their count: 6 stays
 *   consumed, so the shrunk limit admits 0 more and the grown one 14;
 * - the meters (GCRA, the continuous token bucket, the leaky bucket) keep their TAT, the time owed:
 *   6 units at 1 s each owe 6 s of a 10 s tolerance. Re-read at the new rate, that is the same share of
 *   the burst: 4 per 10 s (2.5 s each) leaves ⌊4 / 2.5⌋ = 1, 20 per 10 s (0.5 s each) leaves 8.
 */
const ALGORITHMS: Record<string, { make: (limit: number) => Policy; shrunk: number; grown: number }> = {
  gcra: { make: (l) => gcra({ limit: l, periodMs: 10_000 }), shrunk: 1, grown: 8 },
  'token bucket': {
    make: (l) => tokenBucket({ capacity: l, refillAmount: l, refillIntervalMs: 10_000 }),
    shrunk: 1,
    grown: 8,
  },
  'leaky bucket': { make: (l) => leakyBucket({ capacity: l, leakPerSecond: l / 10 }), shrunk: 1, grown: 8 },
  'interval token bucket': {
    make: (l) => tokenBucket({ capacity: l, refillAmount: l, refillIntervalMs: 10_000, refill: 'interval' }),
    shrunk: 0,
    grown: 14,
  },
  'fixed window': { make: (l) => fixedWindow({ limit: l, windowMs: 10_000 }), shrunk: 0, grown: 14 },
  'sliding window': { make: (l) => slidingWindow({ limit: l, windowMs: 10_000 }), shrunk: 0, grown: 14 },
  'bucketed window': {
    make: (l) => slidingWindow({ limit: l, windowMs: 10_000, precisionMs: 1000 }),
    shrunk: 0,
    grown: 14,
  },
  'sliding log': { make: (l) => slidingLog({ limit: l, windowMs: 10_000 }), shrunk: 0, grown: 14 },
};

const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const close of closers) await close();
});

async function stores(): Promise<{ name: string; store: Store }[]> {
  const out: { name: string; store: Store }[] = [{ name: 'memory', store: memoryStore() }];
  const db = new Database(':memory:');
  const sqlite = sqliteStore({ database: db });
  sqlite.migrate();
  out.push({ name: 'sqlite', store: sqlite });
  closers.push(async () => {
    db.close();
  });
  if (redisUp) {
    const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
    out.push({ name: 'redis', store: redisStore({ client: fromIoredis(redis) }) });
    closers.push(async () => void (await redis.quit()));
  }
  if (postgresUp) {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 2 });
    const schema = uniqueSchema('carry');
    const store = postgresStore({ client: fromPg(pool), schema });
    await store.migrate();
    out.push({ name: 'postgres', store });
    closers.push(async () => {
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
      await pool.end();
    });
  }
  return out;
}

for (const { name: storeName, store } of await stores()) {
  describe(`a limit changed mid-window on ${storeName}`, () => {
    for (const [algorithm, { make, shrunk, grown }] of Object.entries(ALGORITHMS)) {
      for (const [change, to, expected] of [
        ['shrinks', 4, shrunk],
        ['grows', 20, grown],
      ] as const) {
        it(`${algorithm}: ${change} 10 → ${to} after 6 consumed: ${expected} more admitted, under the base policy's state`, async () => {
          const clock = manualClock({ startMs: 1_700_000_000_000 });
          const overrides = createOverrides({ backend: memoryOverrides(), clock, refreshMs: 0 });
          const base = make(10);
          const limiter = createLimiter({ store, clock, policies: base, prefix: uniquePrefix('carry') });
          const limited = withOverrides(limiter, overrides);
          for (let i = 0; i < 6; i++) expect((await limited.limit('k')).allowed).toBe(true);
          await overrides.set({ scope: 'key', id: 'k' }, { policies: make(to) });
          const status = await limited.status('k');
          expect([status.policy, status.limit, status.remaining]).toEqual([base.name, to, expected]);
          let admitted = 0;
          for (let i = 0; i < 30; i++) if ((await limited.limit('k')).allowed) admitted++;
          expect(admitted).toBe(expected);
          // Once the window has passed, the new limit is whole.
          clock.advance(20_000);
          expect((await limited.status('k')).remaining).toBe(to);
        });
      }
    }
  });
}
