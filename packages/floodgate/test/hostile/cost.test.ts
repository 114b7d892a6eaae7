// Hostile costs. A client controls the cost of its calls; whatever it sends, the limiter must decide it
// identically on every store or refuse it with ERR_INVALID_COST before any store is called, and nothing
// it sends may count as a store failure (the breaker, the `failure` policy, `storeError` events).
// The full-size attack, before and after: packages/floodgate/bench/hostile-cost.ts.
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  type Decision,
  type FailurePolicy,
  fixedWindow,
  gcra,
  isFloodgateError,
  leakyBucket,
  MAX_COST,
  MIN_COST,
  memoryStore,
  type Store,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { encodeKey, storageKey } from '../../src/keys.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import {
  countingStore,
  EXTREME_COSTS,
  manualClock,
  REFUSED_COSTS,
  SCENARIO_START_MS,
  uniquePrefix,
} from '../../src/testing/index.js';
import { redisAvailable, requireServer } from '../stores/redis/servers.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const postgresUp = await requirePostgres();
const schema = uniqueSchema('hostile_cost');

let redis: Redis | undefined;
const connections: Connection[] = [];
const stores = new Map<string, Store>();

beforeAll(async () => {
  stores.set('memory', memoryStore());
  const sqlite = sqliteStore({ database: new Database(':memory:') });
  sqlite.migrate();
  stores.set('sqlite', sqlite);
  if (redisUp) {
    redis = new Redis({ host: '127.0.0.1', port: 6379 });
    stores.set('redis', redisStore({ client: fromIoredis(redis) }));
  }
  if (postgresUp) {
    for (const driver of ['pg', 'postgres'] as const) {
      const connection = connect(driver, 4);
      connections.push(connection);
      const store = postgresStore({ client: connection.client, schema, table: `state_${driver}` });
      await store.migrate();
      stores.set(`postgres (${driver})`, store);
    }
  }
});

afterAll(async () => {
  await connections[0]?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  for (const connection of connections) await connection.close();
  redis?.disconnect();
});

const STORES = ['memory', 'sqlite', 'redis', 'postgres (pg)', 'postgres (postgres)'] as const;
const up = (name: string) => (name === 'redis' ? redisUp : name.startsWith('postgres') ? postgresUp : true);

/** The attack of the report: refused costs on one key, then 20 calls on another under a limit of 3. */
async function attack(store: Store, failure: FailurePolicy) {
  const counted = countingStore(store);
  const policies = [gcra({ limit: 3, periodMs: 60_000 }), leakyBucket({ capacity: 3, leakPerSecond: 0.05 })];
  const limiter = createLimiter({
    store: counted.store,
    policies,
    prefix: uniquePrefix('hostile-cost'),
    failure,
    breaker: { failureThreshold: 5, cooldownMs: 60_000 },
  });
  const events: string[] = [];
  limiter.on('storeError', ({ error }) => events.push(`storeError ${error.code}`));
  limiter.on('breaker', ({ state }) => events.push(`breaker ${state}`));
  const codes = new Set<unknown>();
  let answered = 0;
  // 5e-324 first (the report's cost), many times over, then every other refused cost, by each entry point.
  const costs = [...Array.from({ length: 20 }, () => 5e-324), ...REFUSED_COSTS];
  for (const cost of costs) {
    for (const call of [
      () => limiter.limit('attacker', { cost: cost as number }),
      () => limiter.check('attacker', { cost: cost as number }),
      () => limiter.acquire('attacker', { cost: cost as number, timeoutMs: 10 }),
    ]) {
      try {
        await call();
        answered++;
      } catch (error) {
        codes.add(isFloodgateError(error) ? `${error.code} ${error.option}` : error);
      }
    }
  }
  const storeCallsByAttacker = counted.calls();
  const victim: Decision[] = [];
  for (let i = 0; i < 20; i++) victim.push(await limiter.limit('victim'));
  await limiter.reset('victim');
  return { answered, codes: [...codes], storeCallsByAttacker, victim, events, breaker: limiter.breakerState };
}

describe('hostile costs: refused before any store, never a store failure', () => {
  for (const name of STORES) {
    describe.skipIf(!up(name))(name, () => {
      it("failure 'open': a different key under a limit of 3 admits exactly 3 of 20; the breaker stays closed", async () => {
        const result = await attack(stores.get(name) as Store, 'open');
        expect(result.answered).toBe(0);
        expect(result.codes).toEqual(['ERR_INVALID_COST cost']);
        expect(result.storeCallsByAttacker).toBe(0);
        expect(result.victim.filter((d) => d.allowed)).toHaveLength(3);
        expect(result.victim.some((d) => d.reason === 'degraded')).toBe(false);
        expect(result.breaker).toBe('closed');
        expect(result.events).toEqual([]);
      });

      it("failure 'throw': the caller reads ERR_INVALID_COST, never a store error", async () => {
        const result = await attack(stores.get(name) as Store, 'throw');
        expect(result.codes).toEqual(['ERR_INVALID_COST cost']);
        expect(result.victim.filter((d) => d.allowed)).toHaveLength(3);
        expect(result.breaker).toBe('closed');
        expect(result.events).toEqual([]);
      });
    });
  }

  it('the error names the option and the value', async () => {
    const limiter = createLimiter({ policies: [gcra({ limit: 3, periodMs: 60_000 })] });
    await expect(limiter.limit('k', { cost: 5e-324 })).rejects.toMatchObject({
      code: 'ERR_INVALID_COST',
      option: 'cost',
      message: 'cost must be 0 or a finite number from 1e-9 to 9007199254740991, got 5e-324',
    });
  });
});

/** Every policy set of the comparison: all algorithms, and the operator's numbers at their extremes. */
const POLICY_SETS = [
  [gcra({ limit: 3, periodMs: 60_000 }), leakyBucket({ capacity: 3, leakPerSecond: 0.05 })],
  [gcra({ limit: 1, periodMs: 2 ** 47 / 1000 })],
  [tokenBucket({ capacity: 5, refillAmount: 0.1, refillIntervalMs: 100, refill: 'interval' })],
  [tokenBucket({ capacity: 1, refillAmount: MIN_COST, refillIntervalMs: 0.001, refill: 'interval' })],
  [fixedWindow({ limit: 1e12, windowMs: 2 ** 47 / 1000 }), slidingWindow({ limit: 2, windowMs: 1000 })],
  [slidingLog({ limit: 3, windowMs: 1000 })],
];

describe('hostile costs: every accepted cost is decided identically on every store', () => {
  it('extreme costs (MIN_COST, just above it, 0.1 + 0.2, 2^52 + 1, MAX_COST…) give the same decisions everywhere', async () => {
    const names = STORES.filter(up);
    expect(names.length).toBeGreaterThanOrEqual(2);
    const results = new Map<string, (Decision | string)[]>();
    for (const name of names) {
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const store = stores.get(name) as Store;
      // A cost below a policy's resolution (1e-9 under a limit of 1e12) is refused alike everywhere.
      const decisions: (Decision | string)[] = [];
      for (const [i, policies] of POLICY_SETS.entries()) {
        const limiter = createLimiter({ store, policies, clock, prefix: uniquePrefix(`extreme-${i}`) });
        for (const cost of EXTREME_COSTS) {
          for (let repeat = 0; repeat < 3; repeat++) {
            clock.advanceUs(333);
            decisions.push(
              await limiter.limit('k', { cost }).catch((error: unknown) => (error as { code: string }).code),
            );
          }
        }
      }
      results.set(name, decisions);
    }
    const reference = results.get('memory') as (Decision | string)[];
    const decided = reference.filter((d): d is Decision => typeof d !== 'string');
    // Some calls are admitted, some denied, some can never fit, some refused: the comparison covers every outcome.
    expect(decided.some((d) => d.allowed)).toBe(true);
    expect(decided.some((d) => d.reason === 'limit')).toBe(true);
    expect(decided.some((d) => d.reason === 'exceeds-capacity')).toBe(true);
    expect(reference.filter((d) => d === 'ERR_INVALID_COST').length).toBeGreaterThan(0);
    for (const name of names) expect({ name, decisions: results.get(name) }).toEqual({ name, decisions: reference });
  });

  it('MAX_COST under the longest emission interval (cost × T = 2^100 µs) changes nothing, on every store', async () => {
    for (const name of STORES.filter(up)) {
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({
        store: stores.get(name) as Store,
        policies: [gcra({ limit: 1, periodMs: 2 ** 47 / 1000 })],
        clock,
        prefix: uniquePrefix('max-cost'),
      });
      expect(await limiter.limit('k', { cost: MAX_COST })).toMatchObject({
        allowed: false,
        reason: 'exceeds-capacity',
        retryAfterMs: Number.POSITIVE_INFINITY,
        remaining: 1,
      });
      expect((await limiter.limit('k')).allowed).toBe(true);
    }
  });
});

describe('a store that refuses one call is not a failing store (real servers)', () => {
  it.skipIf(!postgresUp)(
    'PostgreSQL: a data exception (float underflow on a cost the limiter never sends) is ERR_STORE_REJECTED',
    async () => {
      for (const driver of ['pg', 'postgres'] as const) {
        const real = stores.get(`postgres (${driver})`) as Store;
        // The real store, sent a cost outside the domain: as if a port or a validation had a bug.
        const broken: Store = {
          ...real,
          name: real.name,
          hasOwnClock: real.hasOwnClock,
          decide: (r) => real.decide({ ...r, cost: 5e-324 }),
          reset: (p, k, c) => real.reset(p, k, c),
        };
        for (const failure of ['open', 'closed', 'throw'] as const) {
          const limiter = createLimiter({
            store: broken,
            // Two policies: the calls run the decide function, whose GCRA charge multiplies the cost on the
            // server (a lone call under one meter policy sends the server only its charge, whole µs).
            policies: [gcra({ limit: 3, periodMs: 60_000 }), fixedWindow({ limit: 3, windowMs: 60_000 })],
            prefix: uniquePrefix('pg-reject'),
            failure,
            breaker: { failureThreshold: 1, cooldownMs: 60_000 },
          });
          const events: string[] = [];
          limiter.on('storeError', ({ error }) => events.push(error.code));
          limiter.on('breaker', ({ state }) => events.push(state));
          for (let i = 0; i < 5; i++) {
            const error = await limiter.limit('k').then(
              () => undefined,
              (e: unknown) => e,
            );
            expect(error).toMatchObject({ code: 'ERR_STORE_REJECTED' });
            // The server's own SQLSTATE: 22003, numeric value out of range (underflow).
            expect((error as { cause?: { code?: unknown } }).cause?.code).toBe('22003');
          }
          expect(events).toEqual([]);
          expect(limiter.breakerState).toBe('closed');
        }
        // The same store, asked properly, still decides.
        const limiter = createLimiter({
          store: real,
          policies: [gcra({ limit: 3, periodMs: 60_000 })],
          prefix: uniquePrefix('pg-ok'),
        });
        expect((await limiter.limit('k')).allowed).toBe(true);
      }
    },
  );

  it.skipIf(!redisUp)(
    'Redis: a key of another type under the limiter’s name (WRONGTYPE) is ERR_STORE_REJECTED',
    async () => {
      const store = stores.get('redis') as Store;
      const prefix = uniquePrefix('wrongtype');
      const policy = gcra({ limit: 3, periodMs: 60_000, name: 'g' });
      const poisoned = storageKey(prefix, encodeKey('poisoned'), 'g');
      await redis?.hset(poisoned, 'x', '1');
      try {
        for (const failure of ['open', 'closed', 'throw'] as const) {
          const limiter = createLimiter({
            store,
            policies: [policy],
            prefix,
            failure,
            breaker: { failureThreshold: 1 },
          });
          const events: string[] = [];
          limiter.on('storeError', ({ error }) => events.push(error.code));
          limiter.on('breaker', ({ state }) => events.push(state));
          for (let i = 0; i < 5; i++) {
            await expect(limiter.limit('poisoned')).rejects.toMatchObject({ code: 'ERR_STORE_REJECTED' });
          }
          expect(events).toEqual([]);
          expect(limiter.breakerState).toBe('closed');
          // Other keys are decided by the store, exactly.
          const other = [];
          for (let i = 0; i < 5; i++) other.push((await limiter.limit(`other-${failure}`)).allowed);
          expect(other).toEqual([true, true, true, false, false]);
        }
      } finally {
        await redis?.del(poisoned);
      }
    },
  );
});
