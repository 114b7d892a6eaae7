import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { leasedLimiter } from '../limiter/lease.js';
import { createLimiter } from '../limiter/limiter.js';
import { syncedLimiter } from '../limiter/synced.js';
import { throttle } from '../limiter/throttle.js';
import type { Decision } from '../model/decision.js';
import { fixedWindow, gcra, type Policy, slidingLog, tokenBucket } from '../model/policy.js';
import { isSyncStore, type Store } from '../stores/store.js';
import { onStore, SCENARIO_START_MS, type SuiteApi, type TestContext, uniquePrefix } from './conformance.js';
import { type ManualClock, manualClock } from './manual-clock.js';

/** Settles `work` on a manual clock: whenever it sleeps, the clock moves to the earliest sleeper. */
async function settle<T>(clock: ManualClock, work: Promise<T>): Promise<T> {
  let done = false;
  const settled = work.finally(() => {
    done = true;
  });
  // In real time: a network store's answers take as long as they take on a busy machine, and a call that
  // goes to sleep on the manual clock after a slow answer must still be woken.
  const startedAt = Date.now();
  while (!done) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (clock.pending > 0 && Number.isFinite(clock.nextWakeUs)) clock.advanceUs(clock.nextWakeUs - clock.nowUs());
    if (Date.now() - startedAt > 30_000) throw new Error('the call neither settled nor slept within 30 s');
  }
  return settled;
}

/** Options of {@link runPlainDataSuite}. */
export interface PlainDataOptions {
  /** Returns the store under test; called once per test (it may return a shared one). */
  store: () => Store | Promise<Store>;
  /** Runs after each test with the store it got. */
  release?: (store: Store) => Promise<void> | void;
}

/** One plain meter (the fast paths' case), one list kind, and several policies at once. */
const POLICY_SETS: readonly (readonly Policy[])[] = [
  [gcra({ limit: 2, periodMs: 100_000 })],
  [slidingLog({ limit: 2, windowMs: 100_000 })],
  [gcra({ limit: 3, periodMs: 100_000, name: 'a' }), fixedWindow({ limit: 2, windowMs: 100_000, name: 'b' })],
];

/**
 * Asserts that a decision is plain data: plain objects and arrays with own data fields only, so that a
 * spread, `structuredClone` and `JSON.stringify` keep every field; `policies` has one entry per policy.
 */
export function assertPlainDecision(decision: Decision, policies: number, where: string): void {
  const plainObject = (value: object, what: string) => {
    strictEqual(Object.getPrototypeOf(value), Object.prototype, `${where}: ${what} is a plain object`);
    for (const [field, descriptor] of Object.entries(Object.getOwnPropertyDescriptors(value))) {
      strictEqual(
        'value' in descriptor && descriptor.enumerable,
        true,
        `${where}: ${what}.${field} is an own data field`,
      );
    }
    strictEqual(Object.getOwnPropertySymbols(value).length, 0, `${where}: ${what} has no symbol fields`);
  };
  plainObject(decision, 'the decision');
  strictEqual(Array.isArray(decision.policies), true, `${where}: policies is an array`);
  strictEqual(Object.getPrototypeOf(decision.policies), Array.prototype, `${where}: policies is a plain array`);
  strictEqual(decision.policies.length, policies, `${where}: one entry per policy`);
  decision.policies.forEach((part, i) => {
    plainObject(part, `policies[${i}]`);
  });
  if (decision.reservation !== undefined) plainObject(decision.reservation, 'the reservation');
  deepStrictEqual({ ...decision }, decision, `${where}: a spread keeps every field`);
  deepStrictEqual(structuredClone(decision), decision, `${where}: structuredClone keeps every field`);
  const json = JSON.parse(JSON.stringify(decision)) as Record<string, unknown>;
  deepStrictEqual(Object.keys(json), Object.keys(decision), `${where}: JSON.stringify keeps every field`);
  strictEqual((json.policies as unknown[]).length, policies, `${where}: JSON.stringify keeps every policy`);
}

function limiterOn(store: Store, policies: readonly Policy[], blockedCache = false) {
  const clock = manualClock({ startMs: SCENARIO_START_MS });
  const limiter = createLimiter({ store, policies, clock, prefix: uniquePrefix('plain'), blockedCache });
  return { clock, limiter };
}

/** The plain limiter: promise and sync methods, with and without options, from the store and the cache. */
async function plainLimiter(store: Store, policies: readonly Policy[]): Promise<void> {
  const n = policies.length;
  const { limiter, clock } = limiterOn(store, policies, true);
  for (let i = 0; i < 4; i++) {
    assertPlainDecision(await limiter.limit('k'), n, `limit #${i + 1}`);
    assertPlainDecision(await limiter.limit('j', { cost: 1 }), n, `limit with options #${i + 1}`);
    assertPlainDecision(await limiter.check('k'), n, `check #${i + 1}`);
    assertPlainDecision(await limiter.status('k'), n, `status #${i + 1}`);
  }
  clock.advance(100_000);
  if (!isSyncStore(store)) return;
  for (let i = 0; i < 4; i++) {
    assertPlainDecision(limiter.limitSync('s'), n, `limitSync #${i + 1}`);
    assertPlainDecision(limiter.limitSync('t', {}), n, `limitSync with options #${i + 1}`);
    assertPlainDecision(limiter.checkSync('s'), n, `checkSync #${i + 1}`);
    assertPlainDecision(limiter.statusSync('s'), n, `statusSync #${i + 1}`);
  }
}

/** The leased limiter: leases taken, spent, and denials remembered. */
async function leased(store: Store, policies: readonly Policy[]): Promise<void> {
  const { limiter, clock } = limiterOn(store, policies);
  const leasing = leasedLimiter(limiter, { size: 2, clock });
  try {
    for (let i = 0; i < 6; i++) {
      assertPlainDecision(await leasing.limit('k'), policies.length, `leased limit #${i + 1}`);
    }
  } finally {
    await leasing.close();
  }
}

/** The synced limiter: local admissions and the store's decisions, around a sync. */
async function synced(store: Store, policies: readonly Policy[]): Promise<void> {
  const { limiter, clock } = limiterOn(store, policies);
  const syncing = syncedLimiter(limiter, { syncMs: 1000, clock, autoSync: false, localBudget: 1 });
  try {
    for (let i = 0; i < 5; i++) {
      assertPlainDecision(await syncing.limit('k'), policies.length, `synced limit #${i + 1}`);
      if (i === 1) await syncing.sync();
    }
  } finally {
    await syncing.close();
  }
}

/** `acquire` (at once and after a wait), and a reservation with its `reservation`. */
async function acquired(store: Store): Promise<void> {
  const { limiter, clock } = limiterOn(store, [
    gcra({ limit: 2, periodMs: 1000, name: 'a' }),
    tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 500, name: 'b' }),
  ]);
  // The first calls pass at once, the later ones wait for capacity.
  for (let i = 0; i < 4; i++) {
    assertPlainDecision(await settle(clock, limiter.acquire('k', { timeoutMs: 10_000 })), 2, `acquire #${i + 1}`);
  }
  const booked = await limiter.limit('r', { maxDelayMs: 60_000, cost: 2 });
  const ahead = await limiter.limit('r', { maxDelayMs: 60_000 });
  strictEqual(ahead.reservation !== undefined, true, 'a reservation was booked');
  assertPlainDecision(booked, 2, 'a decision admitted at once');
  assertPlainDecision(ahead, 2, 'a reservation');
}

/** `throttle`: the decisions its limiter reports, at once and after a wait. */
async function throttled(store: Store): Promise<void> {
  const { limiter, clock } = limiterOn(store, [gcra({ limit: 2, periodMs: 1000 })]);
  const reported: Decision[] = [];
  const off = limiter.on('decision', (event) => reported.push(event.decision));
  const double = throttle(async (x: number) => x * 2, { limiter, key: 'k' });
  try {
    // Two pass at once, the third waits for capacity.
    deepStrictEqual(await settle(clock, Promise.all([1, 2, 3].map((x) => double(x)))), [2, 4, 6]);
  } finally {
    off();
  }
  strictEqual(reported.length >= 3, true, 'throttle asked its limiter');
  reported.forEach((decision, i) => {
    assertPlainDecision(decision, 1, `throttle decision #${i + 1}`);
  });
}

/** Issue 25's case: a leased limiter over GCRA, limit 2, size 2, lost `policies` on every other call. */
async function issueCase(store: Store): Promise<void> {
  const { limiter, clock } = limiterOn(store, [gcra({ limit: 2, periodMs: 100_000 })]);
  const leasing = leasedLimiter(limiter, { size: 2, clock });
  const arrays: boolean[] = [];
  try {
    for (let i = 0; i < 5; i++) arrays.push(Array.isArray((await leasing.limit('k')).policies));
  } finally {
    await leasing.close();
  }
  deepStrictEqual(arrays, [true, true, true, true, true]);
}

/**
 * Every limiter of this package returns decisions as plain data over the store under test: the plain
 * limiter (promise and sync methods, with and without options, from the store, the blocked-key cache and
 * a reservation), the leased and synced limiters, `throttle` (the decisions its limiter reports) and
 * `acquire`; under one policy and under several.
 *
 * @example
 * ```ts
 * import { describe, it } from 'vitest';
 * runPlainDataSuite({ describe, it }, { store: () => memoryStore() });
 * ```
 */
export function runPlainDataSuite(api: SuiteApi, options: PlainDataOptions): void {
  const withStore =
    (fn: (store: Store) => Promise<void>, needsRefund = false) =>
    (context?: TestContext) =>
      onStore(
        options,
        fn,
        (store) =>
          needsRefund && store.refund === undefined
            ? `the ${store.name} store has no refund(): it cannot lease`
            : undefined,
        context,
      );
  api.describe('decisions are plain data', () => {
    for (const policies of POLICY_SETS) {
      const names = policies.map((p) => p.name).join(' + ');
      api.it(
        `createLimiter, ${names}: limit, check and status, with and without options, and from the blocked-key cache`,
        withStore((store) => plainLimiter(store, policies)),
      );
      api.it(
        `leasedLimiter, ${names}: every call`,
        withStore((store) => leased(store, policies), true),
      );
      api.it(
        `syncedLimiter, ${names}: local and store decisions`,
        withStore((store) => synced(store, policies)),
      );
    }
    api.it('acquire, and a reservation: the decision and its reservation', withStore(acquired));
    api.it('throttle: the decisions its limiter reports', withStore(throttled));
    api.it(
      'the issue: a leased limiter over gcra, limit 2, size 2, has its policies on every call',
      withStore(issueCase, true),
    );
  });
}
