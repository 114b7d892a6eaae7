// No cost lost to rounding. Once a window's count is large, `count + cost === count` in a double: at a
// limit of 4294967295 (Envoy's largest), a window spent to its limit admitted calls of cost 1e-9 or 1e-7
// for ever, on every store, for the fixed window (with and without countDenied), both sliding windows and
// the interval token bucket. A cost below a policy's resolution (the spacing of doubles at its limit) is
// now refused with ERR_INVALID_COST, naming the policy and its resolution, before any store is called.
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  leasedLimiter,
  MAX_LIMIT,
  memoryStore,
  type Policy,
  type Store,
  slidingWindow,
  syncedLimiter,
  tokenBucket,
} from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { countResolution, ulpAt } from '../../src/model/cost.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { countingStore, manualClock, SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { redisAvailable, requireServer } from '../stores/redis/servers.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const postgresUp = await requirePostgres();
const schema = uniqueSchema('hostile_rounding');

/** Envoy's largest `requests_per_unit`. */
const LIMIT = 4294967295;
const HOUR_MS = 3_600_000;

/** The policies of the report, each at a limit of 4294967295. */
const POLICIES: readonly (readonly [string, Policy])[] = [
  ['fixed window', fixedWindow({ limit: LIMIT, windowMs: HOUR_MS })],
  ['fixed window, countDenied', fixedWindow({ limit: LIMIT, windowMs: HOUR_MS, countDenied: true })],
  ['sliding-window counter', slidingWindow({ limit: LIMIT, windowMs: HOUR_MS })],
  ['bucketed window', slidingWindow({ limit: LIMIT, windowMs: HOUR_MS, precisionMs: 60_000 })],
  [
    'interval token bucket',
    tokenBucket({ capacity: LIMIT, refillAmount: 1000, refillIntervalMs: 1000, refill: 'interval' }),
  ],
];

describe('the resolution of a policy that counts', () => {
  it('is a power of two r with count + r > count for every count from 0 to the limit, and half of it is lost at some count', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 1, max: MAX_LIMIT, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (limit, share) => {
          const r = countResolution(limit);
          expect(Math.log2(r)).toBe(Math.round(Math.log2(r)));
          const count = Math.min(limit, share * limit);
          expect(count + r).toBeGreaterThan(count);
          // The limit's own binade starts at a power of two, whose mantissa is even: a tie, kept.
          const binade = 2 ** Math.floor(Math.log2(limit * (1 - 2 ** -52)));
          const start = binade * 2 <= limit ? binade * 2 : binade;
          expect(start + r / 2).toBe(start);
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it('every count up to the limit moves by an admitted cost c ≥ r within r / 2', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 1, max: MAX_LIMIT, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 1, max: 2 ** 20, noNaN: true }),
        (limit, share, multiple) => {
          const r = countResolution(limit);
          const count = Math.min(limit, share * limit);
          const cost = r * multiple;
          const after = count + cost;
          if (after > limit) return; // denied: the count does not move
          expect(Math.abs(after - count - cost)).toBeLessThanOrEqual(r / 2);
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it('at 4294967295 it is 2^-21; meters have none; every limit admits cost 1', () => {
    expect(countResolution(LIMIT)).toBe(2 ** -21);
    expect(ulpAt(2 ** 32)).toBe(2 ** -20);
    expect(ulpAt(2 ** 32 - 1)).toBe(2 ** -21);
    expect(countResolution(MAX_LIMIT)).toBe(2 ** -13);
    expect(compilePolicy(gcra({ limit: MAX_LIMIT, periodMs: 1e9 })).resolution).toBe(0);
    for (const [, policy] of POLICIES) expect(compilePolicy(policy).resolution).toBe(2 ** -21);
  });
});

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
    const connection = connect('pg', 4);
    connections.push(connection);
    const store = postgresStore({ client: connection.client, schema, table: 'state' });
    await store.migrate();
    stores.set('postgres', store);
  }
});

afterAll(async () => {
  await connections[0]?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  for (const connection of connections) await connection.close();
  redis?.disconnect();
});

const STORES = ['memory', 'sqlite', 'redis', 'postgres'] as const;
const up = (name: string) => (name === 'redis' ? redisUp : name === 'postgres' ? postgresUp : true);

/** Calls of each tiny cost after the limit (the report's 2,000). */
const ATTACK_CALLS = 2000;

/**
 * The report's attack on one store and policy: a key spent to its limit of 4294967295, then 2,000 calls
 * of cost 1e-9 and 2,000 of 1e-7. Returns what the limiter answered, and what the store alone (asked as
 * the limiter asked it before) answers to a few such calls: the attack the refusal stops.
 */
async function attack(store: Store, policy: Policy) {
  const clock = manualClock({ startMs: SCENARIO_START_MS });
  const counted = countingStore(store);
  const prefix = uniquePrefix('rounding');
  const limiter = createLimiter({ store: counted.store, policies: [policy], clock, prefix, failure: 'open' });
  const fresh = await limiter.limit('fresh');
  const spent = await limiter.limit('k', { cost: LIMIT });
  const callsBefore = counted.calls();
  let admitted = 0;
  const errors = new Map<string, number>();
  for (const cost of [1e-9, 1e-7]) {
    for (let i = 0; i < ATTACK_CALLS; i++) {
      clock.advanceUs(1);
      try {
        if ((await limiter.limit('k', { cost })).allowed) admitted++;
      } catch (error) {
        const { code, option } = error as { code: string; option: string };
        errors.set(`${code} ${option}`, (errors.get(`${code} ${option}`) ?? 0) + 1);
      }
    }
  }
  const storeCalls = counted.calls() - callsBefore;
  // The same call, as the limiter sent it to the store before: admitted, the count unmoved.
  let storeAlone = 0;
  for (let i = 0; i < 10; i++) {
    clock.advanceUs(1);
    const result = await store.decide({
      prefix,
      key: 'k',
      policies: [compilePolicy(policy)],
      cost: 1e-9,
      commit: true,
      nowUs: clock.nowUs(),
      maxDelayUs: 0,
    });
    if (result.allowed) storeAlone++;
  }
  const after = await limiter.limit('k');
  const atResolution = await limiter.limit('k', { cost: 2 ** -21 });
  return { fresh, spent, admitted, errors: Object.fromEntries(errors), storeCalls, storeAlone, after, atResolution };
}

describe('hostile costs: a cost below the resolution is refused before any store', () => {
  for (const name of STORES) {
    describe.skipIf(!up(name))(name, () => {
      for (const [label, policy] of POLICIES) {
        it(`${label} at 4294967295: 4,000 tiny costs after the limit all refused, none admitted; cost 1 works`, async () => {
          const result = await attack(stores.get(name) as Store, policy);
          // A 4294967295 limit loads and works with cost 1.
          expect(result.fresh).toMatchObject({ allowed: true, remaining: LIMIT - 1 });
          expect(result.spent.allowed).toBe(true);
          expect(result.admitted).toBe(0);
          expect(result.errors).toEqual({ 'ERR_INVALID_COST cost': 2 * ATTACK_CALLS });
          expect(result.storeCalls).toBe(0);
          // Before: the store, asked directly, admits 1e-9 at the limit every time (the count unmoved).
          expect(result.storeAlone).toBe(10);
          expect(result.after.allowed).toBe(false);
          expect(result.atResolution.allowed).toBe(false);
        });
      }
    });
  }

  it('the error names the policy, its limit and its resolution', async () => {
    const limiter = createLimiter({ policies: [fixedWindow({ limit: LIMIT, windowMs: HOUR_MS, name: 'envoy' })] });
    await expect(limiter.limit('k', { cost: 1e-9 })).rejects.toMatchObject({
      code: 'ERR_INVALID_COST',
      option: 'cost',
      message:
        'cost 1e-9 is below the resolution of policy "envoy" (limit 4294967295): its smallest cost is 4.76837158203125e-7, since a smaller one can be lost in rounding once the count is large',
    });
    // Checks (cost 0) and meters are never refused for it.
    expect((await limiter.check('k', { cost: 0 })).allowed).toBe(true);
    const meter = createLimiter({ policies: [gcra({ limit: LIMIT, periodMs: 30 * 86_400_000 })] });
    expect((await meter.limit('k', { cost: 1e-9 })).allowed).toBe(true);
  });

  it('leased and synced limiters refuse it too, whatever the kind (their local counts hold up to the limit)', async () => {
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({
      store: memoryStore(),
      policies: [gcra({ limit: LIMIT, periodMs: 30 * 86_400_000 })],
      clock,
    });
    const leased = leasedLimiter(limiter, { size: 1000, clock });
    const synced = syncedLimiter(limiter, { clock, autoSync: false });
    for (const local of [leased, synced]) {
      await expect(local.limit('k', { cost: 1e-9 })).rejects.toMatchObject({ code: 'ERR_INVALID_COST' });
      expect((await local.limit('k', { cost: 2 ** -21 })).allowed).toBe(true);
      await local.close();
    }
  });
});
