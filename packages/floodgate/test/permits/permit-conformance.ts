import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { isFloodgateError } from '../../src/errors.js';
import { memoryPermitStore } from '../../src/permits/memory-permit-store.js';
import { createPermits, type PermitDecision, type Permits } from '../../src/permits/permits.js';
import { concurrency } from '../../src/permits/policy.js';
import type { PermitStore } from '../../src/permits/store.js';
import { SCENARIO_START_MS, type SuiteApi, seededRandom, uniquePrefix } from '../../src/testing/conformance.js';
import { type ManualClock, manualClock } from '../../src/testing/manual-clock.js';

/** Options of {@link runPermitConformanceSuite}. */
export interface PermitConformanceOptions {
  /** Returns the permit store under test; called once per test (it may return a shared one). */
  store: () => PermitStore | Promise<PermitStore>;
  /** Randomized runs (each its own seed). @default 12 */
  randomRuns?: number;
  /** Operations per randomized run. @default 60 */
  randomOperations?: number;
  /** First seed; runs use seed, seed+1, … A failure names its seed. @default 1 */
  seed?: number;
}

function ok(value: unknown, message?: string): asserts value {
  strictEqual(Boolean(value), true, message);
}

/** Keys that must never share state or break a layout: braces, separators, escapes, NUL, lone surrogates. */
const HOSTILE_KEYS = ['{a}', 'a}:{b', '%7Ba%7D', 'a\0b', '\uD800', "'; DROP TABLE x; --", 'k'.repeat(5000), '#x'];

/** The decision without its permit (a class): what two stores must agree on. */
function data(d: PermitDecision): Omit<PermitDecision, 'permit'> & { fence: number | undefined } {
  const { permit, ...rest } = d;
  return { ...rest, fence: permit?.fence };
}

type On = (limit: number, leaseMs: number) => Promise<{ permits: Permits; clock: ManualClock }>;

/** The manual clock's start, µs. */
const T0 = SCENARIO_START_MS * 1000;

/** The tables: explicit times on a manual clock (`on`), or the store's own clock (`storeOf`). */
const CASES: readonly [string, (on: On, storeOf: () => PermitStore | Promise<PermitStore>) => Promise<void>][] = [
  [
    'grants up to the limit and refuses beyond it, counting the costs of the live leases',
    async (on) => {
      const { permits, clock } = await on(3, 1000);
      const a = await permits.limit('k');
      deepStrictEqual(data(a), {
        allowed: true,
        limit: 3,
        inFlight: 1,
        remaining: 2,
        retryAfterMs: 0,
        resetAfterMs: 1000,
        policy: 'concurrency',
        fence: T0,
      });
      clock.advance(100);
      const b = await permits.limit('k', { cost: 2 });
      deepStrictEqual(
        [b.allowed, b.inFlight, b.remaining, b.resetAfterMs, b.permit?.fence],
        [true, 3, 0, 1000, T0 + 100_000],
      );
      clock.advance(100);
      const c = await permits.limit('k');
      // Refused: the first lease runs out in 800 ms and frees room for a cost of 1.
      deepStrictEqual(data(c), {
        allowed: false,
        limit: 3,
        inFlight: 3,
        remaining: 0,
        retryAfterMs: 800,
        resetAfterMs: 900,
        policy: 'concurrency',
        reason: 'limit',
        fence: undefined,
      });
      // A cost of 3 waits for both leases.
      const d = await permits.limit('k', { cost: 3 });
      deepStrictEqual([d.allowed, d.retryAfterMs], [false, 900]);
      const e = await permits.limit('k', { cost: 4 });
      deepStrictEqual([e.allowed, e.reason, e.retryAfterMs], [false, 'exceeds-capacity', Number.POSITIVE_INFINITY]);
      // Other keys are untouched.
      strictEqual((await permits.limit('other', { cost: 3 })).allowed, true);
    },
  ],
  [
    'a lease is live until leaseMs after its grant, and swept in the same call that finds it expired',
    async (on) => {
      const { permits, clock } = await on(1, 1000);
      const a = await permits.limit('k');
      ok(a.permit);
      clock.advanceUs(999_999);
      strictEqual((await permits.limit('k')).allowed, false);
      strictEqual((await permits.limit('k')).retryAfterMs, 1);
      clock.advanceUs(1);
      const b = await permits.limit('k');
      deepStrictEqual([b.allowed, b.inFlight], [true, 1]);
      // The swept lease is gone for good: releasing or refreshing it changes nothing.
      strictEqual(await permits.release('k', a.permit.leaseId), false);
      strictEqual(await permits.refresh('k', a.permit.leaseId), false);
      strictEqual((await permits.limit('k')).allowed, false);
      await b.permit?.release();
    },
  ],
  [
    'release frees the permit at once, is idempotent, and a forged lease id changes nothing',
    async (on) => {
      const { permits } = await on(1, 60_000);
      const a = await permits.limit('k');
      ok(a.permit);
      strictEqual(await permits.release('k', 'AAAAAAAAAAAAAAAAAAAAAA'), false);
      strictEqual(await permits.refresh('k', 'AAAAAAAAAAAAAAAAAAAAAA'), false);
      strictEqual(await permits.release('other', a.permit.leaseId), false);
      strictEqual((await permits.limit('k')).allowed, false);
      strictEqual(await a.permit.release(), true);
      strictEqual(await a.permit.release(), true);
      strictEqual(await permits.release('k', a.permit.leaseId), false);
      const b = await permits.limit('k');
      deepStrictEqual([b.allowed, b.inFlight], [true, 1]);
      await b.permit?.release();
    },
  ],
  [
    'refresh extends a live lease from now, never shortens it, and never takes back an expired one',
    async (on) => {
      const { permits, clock } = await on(1, 1000);
      const a = await permits.limit('k');
      ok(a.permit);
      clock.advance(600);
      strictEqual(await permits.refresh('k', a.permit.leaseId), true);
      clock.advance(999);
      // 1599 ms after the grant, 999 ms after the refresh: still held.
      const b = await permits.limit('k');
      deepStrictEqual([b.allowed, b.retryAfterMs], [false, 1]);
      clock.advance(1);
      strictEqual(await permits.refresh('k', a.permit.leaseId), false);
      const c = await permits.limit('k');
      strictEqual(c.allowed, true);
      strictEqual(await permits.refresh('k', a.permit.leaseId), false);
      strictEqual((await permits.limit('k')).allowed, false);
    },
  ],
  [
    'fences strictly increase per key, and survive the sweep of every lease and a long idle time',
    async (on) => {
      const { permits, clock } = await on(2, 1000);
      const fences: number[] = [];
      const take = async (key = 'k') => {
        const d = await permits.limit(key);
        ok(d.permit, 'granted');
        fences.push(d.permit.fence);
        return d.permit;
      };
      // Two grants in one µs: the second is the first + 1.
      await take();
      await take();
      deepStrictEqual(fences, [T0, T0 + 1]);
      clock.advance(1000);
      // Both leases swept by this call: the fence still rises.
      await take();
      clock.advance(50);
      const p = await take();
      await p.release();
      // An hour idle: the state may be forgotten, yet the next fence is larger than every earlier one.
      clock.advance(3_600_000);
      await take();
      for (let i = 1; i < fences.length; i++) ok((fences[i] as number) > (fences[i - 1] as number), String(fences));
      deepStrictEqual(fences.slice(2), [T0 + 1_000_000, T0 + 1_050_000, T0 + 3_601_050_000]);
      // Another key has its own sequence.
      await take('other');
      strictEqual(fences.at(-1), T0 + 3_601_050_000);
    },
  ],
  [
    'keys are data: hostile keys each get their own permits',
    async (on) => {
      const { permits } = await on(1, 60_000);
      const first = await Promise.all(HOSTILE_KEYS.map((key) => permits.limit(key)));
      deepStrictEqual(
        first.map((d) => d.allowed),
        HOSTILE_KEYS.map(() => true),
      );
      const second = await Promise.all(HOSTILE_KEYS.map((key) => permits.limit(key)));
      deepStrictEqual(
        second.map((d) => d.allowed),
        HOSTILE_KEYS.map(() => false),
      );
      for (const [i, d] of first.entries()) strictEqual(await d.permit?.release(), true, HOSTILE_KEYS[i]);
    },
  ],
  [
    'refuses malformed lease ids before calling the store',
    async (on) => {
      const { permits } = await on(1, 1000);
      for (const leaseId of ["x' OR 1=1 --", '', 'A'.repeat(23), 7 as unknown as string]) {
        try {
          await permits.release('k', leaseId);
          ok(false, 'refused');
        } catch (error) {
          ok(isFloodgateError(error) && error.code === 'ERR_INVALID_OPTION', String(error));
        }
      }
    },
  ],
  [
    "on the store's own clock: a held permit refuses others until released",
    async (_on, storeOf) => {
      const store = await storeOf();
      const permits = createPermits({
        store,
        policy: concurrency({ limit: 1, leaseMs: 60_000 }),
        prefix: uniquePrefix('permits'),
      });
      const a = await permits.limit('k');
      ok(a.permit);
      const b = await permits.limit('k');
      strictEqual(b.allowed, false);
      ok(b.retryAfterMs > 0 && b.retryAfterMs <= 60_000, String(b.retryAfterMs));
      strictEqual(await permits.refresh('k', a.permit.leaseId), true);
      strictEqual(await a.permit.release(), true);
      const c = await permits.limit('k');
      ok(c.permit);
      ok(c.permit.fence > a.permit.fence);
      // A fence is at least the store's time in µs: within a day of this process's clock.
      ok(Math.abs(c.permit.fence / 1000 - Date.now()) < 86_400_000, String(c.permit.fence));
      await c.permit.release();
    },
  ],
];

/**
 * The permit store contract: every permit store (memory, Redis, PostgreSQL, SQLite) runs the same tables
 * with explicit times on a manual clock, the same randomized comparison against the permit model (the
 * memory store), and a check on the store's own clock.
 *
 * It lives with the tests, not in floodgate/testing: the published package stays within its 1 MB.
 */
export function runPermitConformanceSuite(api: SuiteApi, options: PermitConformanceOptions): void {
  const { describe, it } = api;
  /** Permits on the store under test, on a manual clock at SCENARIO_START_MS. */
  const on: On = async (limit, leaseMs) => {
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const store = await options.store();
    const permits = createPermits({
      store,
      policy: concurrency({ limit, leaseMs }),
      clock,
      prefix: uniquePrefix('permits'),
    });
    return { permits, clock };
  };

  describe('permit store conformance', () => {
    for (const [name, run] of CASES) it(name, () => run(on, options.store));
    const runs = options.randomRuns ?? 12;
    for (let run = 0; run < runs; run++) {
      const seed = (options.seed ?? 1) + run;
      it(`decides a random sequence exactly like the permit model (seed ${seed})`, async () => {
        await randomRun(seed, options.randomOperations ?? 60, await options.store());
      });
    }
  });
}

/** Random acquires, releases, refreshes and clock steps on two keys, through the store and the model. */
async function randomRun(seed: number, operations: number, store: PermitStore): Promise<void> {
  const random = seededRandom(seed);
  const pick = (n: number) => Math.floor(random() * n);
  const clock = manualClock({ startMs: SCENARIO_START_MS });
  const policy = concurrency({ limit: 1 + pick(5), leaseMs: 200 + pick(1000) });
  const prefix = uniquePrefix('permits');
  const model = createPermits({ store: memoryPermitStore(), policy, clock, prefix });
  const tested = createPermits({ store, policy, clock, prefix });
  const held: { key: string; m: string; t: string }[] = [];
  for (let i = 0; i < operations; i++) {
    const where = `seed ${seed}, operation ${i}`;
    const roll = random();
    if (roll < 0.25) {
      clock.advanceUs(pick(400_000));
    } else if (roll < 0.65) {
      const key = `k${pick(2)}`;
      const cost = 1 + pick(policy.limit + 1);
      const m = await model.limit(key, { cost });
      const t = await tested.limit(key, { cost });
      deepStrictEqual(data(t), data(m), where);
      if (m.permit && t.permit) held.push({ key, m: m.permit.leaseId, t: t.permit.leaseId });
    } else if (held.length > 0) {
      const lease = held[pick(held.length)] as { key: string; m: string; t: string };
      const op = roll < 0.85 ? 'release' : 'refresh';
      strictEqual(await tested[op](lease.key, lease.t), await model[op](lease.key, lease.m), `${where}: ${op}`);
    }
  }
}
