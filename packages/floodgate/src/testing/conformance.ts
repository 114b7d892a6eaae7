import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { isFloodgateError } from '../errors.js';
import { leasedLimiter } from '../limiter/lease.js';
import { type CallOptions, createLimiter } from '../limiter/limiter.js';
import { compilePolicy } from '../model/compile.js';
import type { Decision } from '../model/decision.js';
import {
  fixedWindow,
  gcra,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../model/policy.js';
import { leaseRefusal } from '../model/refund.js';
import { isReservable } from '../model/reservation.js';
import { settleRefusal } from '../model/settle.js';
import type { Store } from '../stores/store.js';
import { type CallStyle, callerOf, GENERAL_CALLS } from './calls.js';
import { EXTREME_COSTS, extremeCostTables, runExtremeCostTable, runRefusedCosts } from './cost-domain.js';
import { type ManualClock, manualClock } from './manual-clock.js';
import { modelStore } from './model-store.js';
import { refundTables, runRefundTable } from './refunds.js';
import { type Expectation, type Scenario, scenarios } from './scenarios.js';
import { runSettleRefusals, runSettleTable, settleTables } from './settles.js';
import { runWaitScenario, waitScenarios } from './waiting.js';

/**
 * What a test function may receive from the runner: Vitest and node:test pass a context whose `skip`
 * marks the test skipped, with a note.
 */
export interface TestContext {
  skip?(note?: string): void;
}

/** The test functions of your runner (Vitest, Jest, node:test): the suite brings its own assertions. */
export interface SuiteApi {
  describe(name: string, fn: () => void): void;
  it(name: string, fn: (context?: TestContext) => Promise<void>, timeoutMs?: number): void;
}

/** Options of {@link runConformanceSuite}. */
export interface ConformanceOptions {
  /** Returns the store under test; called once per test (it may return a shared one). */
  store: () => Store | Promise<Store>;
  /** Runs after each test with the store it got. */
  release?: (store: Store) => Promise<void> | void;
  /** Operations per randomized run. @default 400 */
  randomOperations?: number;
  /** Randomized runs (each its own seed and policies). @default 12 */
  randomRuns?: number;
  /** First seed; runs use seed, seed+1, … A failure names its seed. @default 1 */
  seed?: number;
}

/** Midnight UTC, 1 January 2030: aligned to every window in the tables. */
export const SCENARIO_START_MS = Date.UTC(2030, 0, 1);

let prefixCounter = 0;
/** A prefix no other test in any process uses, so tests can share a server. */
export function uniquePrefix(label = 't'): string {
  prefixCounter++;
  return `${label}-${process.pid}-${Date.now().toString(36)}-${prefixCounter}`;
}

/**
 * Runs `fn` on a store from `source.store()` and hands it to `source.release` after, unless `skipped` gives
 * a reason not to run (the test is then marked skipped with it, where the runner can).
 */
export async function onStore(
  source: Pick<ConformanceOptions, 'store' | 'release'>,
  fn: (store: Store) => Promise<void>,
  skipped?: (store: Store) => string | undefined,
  context?: TestContext,
): Promise<void> {
  const store = await source.store();
  try {
    const reason = skipped?.(store);
    if (reason === undefined) await fn(store);
    else context?.skip?.(reason);
  } finally {
    await source.release?.(store);
  }
}

/**
 * The store contract: every store runs the same tables and the same randomized comparison against the
 * reference model, with an injected manual clock.
 *
 * @example
 * ```ts
 * import { describe, it } from 'vitest';
 * runConformanceSuite({ describe, it }, { store: () => memoryStore() });
 * ```
 */
export function runConformanceSuite(api: SuiteApi, options: ConformanceOptions): void {
  const withStore = (fn: (store: Store) => Promise<void>) => onStore(options, fn);
  /**
   * A test of an optional operation (`cancel`, `refund`): on a store without it, the limiter's typed
   * refusal is checked instead, and the test is marked skipped with the reason when the runner can.
   */
  const withOperation =
    (op: 'cancel' | 'refund' | 'settle', fn: (store: Store) => Promise<void>) => (context?: TestContext) =>
      withStore(async (store) => {
        if (store[op] !== undefined) return fn(store);
        await refusesWithout(store, op);
        context?.skip?.(`the ${store.name} store has no ${op}(), an optional operation: the limiter refuses it`);
      });

  api.describe('algorithm tables', () => {
    for (const scenario of scenarios) {
      const cancels = scenario.steps.some((step) => step.op === 'cancel');
      api.it(
        scenario.name,
        cancels
          ? withOperation('cancel', (store) => runScenario(store, scenario))
          : () => withStore((store) => runScenario(store, scenario)),
      );
    }
  });

  api.describe('contract', () => {
    api.it('check and status change nothing', () =>
      withStore(async (store) => {
        const clock = manualClock({ startMs: SCENARIO_START_MS });
        const policies = [slidingLog({ limit: 2, windowMs: 1000, countDenied: true, blockMs: 500 })];
        const limiter = createLimiter({ store, policies, clock, prefix: uniquePrefix() });
        for (let i = 0; i < 5; i++) strictEqual((await limiter.check('k')).remaining, 1);
        await limiter.limit('k');
        await limiter.limit('k');
        const before = await limiter.status('k');
        for (let i = 0; i < 5; i++) strictEqual((await limiter.check('k')).allowed, false);
        deepStrictEqual(await limiter.status('k'), before);
      }),
    );

    api.it('reset forgets the key under every policy, and only that key', () =>
      withStore(async (store) => {
        const clock = manualClock({ startMs: SCENARIO_START_MS });
        const policies = [gcra({ limit: 1, periodMs: 60_000 }), slidingLog({ limit: 1, windowMs: 60_000 })];
        const limiter = createLimiter({ store, policies, clock, prefix: uniquePrefix() });
        await limiter.limit('a');
        await limiter.limit('b');
        await limiter.reset('a');
        strictEqual((await limiter.limit('a')).allowed, true);
        strictEqual((await limiter.limit('b')).allowed, false);
      }),
    );

    api.it('prefixes and per-call policies keep separate state', () =>
      withStore(async (store) => {
        const clock = manualClock({ startMs: SCENARIO_START_MS });
        const free = [gcra({ limit: 1, periodMs: 60_000, name: 'free' })];
        const pro = [gcra({ limit: 3, periodMs: 60_000, name: 'pro' })];
        const one = createLimiter({ store, policies: free, clock, prefix: uniquePrefix() });
        const two = createLimiter({ store, policies: free, clock, prefix: uniquePrefix() });
        strictEqual((await one.limit('k')).allowed, true);
        strictEqual((await one.limit('k')).allowed, false);
        strictEqual((await two.limit('k')).allowed, true);
        const tiered = await one.limit('k', { policies: pro });
        deepStrictEqual([tiered.allowed, tiered.remaining, tiered.policy], [true, 2, 'pro']);
      }),
    );

    api.it('a decision names every policy, in order, with the binding one on top', () =>
      withStore(async (store) => {
        const clock = manualClock({ startMs: SCENARIO_START_MS });
        const policies = [
          gcra({ limit: 5, periodMs: 1000, name: 'a' }),
          tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 1000, name: 'b' }),
        ];
        const limiter = createLimiter({ store, policies, clock, prefix: uniquePrefix() });
        const first = await limiter.limit('k');
        deepStrictEqual(
          first.policies.map((p) => [p.policy, p.allowed, p.remaining]),
          [
            ['a', true, 4],
            ['b', true, 1],
          ],
        );
        strictEqual(first.policy, 'b');
        await limiter.limit('k');
        const denied = await limiter.limit('k');
        deepStrictEqual(
          [denied.allowed, denied.policy, denied.retryAfterMs, denied.reason],
          [false, 'b', 1000, 'limit'],
        );
        deepStrictEqual(
          denied.policies.map((p) => [p.policy, p.allowed, p.remaining]),
          [
            ['a', true, 3],
            ['b', false, 0],
          ],
        );
      }),
    );
  });

  api.describe('waiting: acquire tables', () => {
    for (const scenario of waitScenarios) {
      const run = (store: Store) => runWaitScenario(store, scenario, uniquePrefix('wait'));
      api.it(scenario.name, scenario.cancels === true ? withOperation('cancel', run) : () => withStore(run));
    }
  });

  api.describe('leases: unused units given back', () => {
    for (const table of refundTables) {
      api.it(
        table.name,
        withOperation('refund', (store) => runRefundTable(store, table, uniquePrefix('refund'))),
      );
    }
  });

  api.describe('settle: a call charged its actual cost after its estimate', () => {
    for (const table of settleTables) {
      api.it(
        table.name,
        withOperation('settle', (store) => runSettleTable(store, table, uniquePrefix('settle'))),
      );
    }
    api.it(
      'a second settle, an altered or foreign settlement, a bad cost are refused before the store',
      withOperation('settle', (store) => runSettleRefusals(store, uniquePrefix('settle'))),
    );
  });

  api.describe('cost domain: every accepted cost decided like the model, every other refused', () => {
    for (const table of extremeCostTables) {
      api.it(table.name, () => withStore((store) => runExtremeCostTable(store, table, uniquePrefix('cost'))), 60_000);
    }
    for (const seed of [7001, 7002, 7003, 7004]) {
      api.it(
        `random calls with extreme costs, seed ${seed}`,
        () => withStore((store) => compareWithModel(store, { seed, operations: 150, costs: EXTREME_COSTS })),
        60_000,
      );
    }
    api.it('refused costs (subnormals, 1e-10, 2^53, NaN…) throw ERR_INVALID_COST and never reach the store', () =>
      withStore((store) => runRefusedCosts(store, uniquePrefix('refused'))),
    );
  });

  api.describe('randomized comparison with the reference model', () => {
    // The policy sets of the newest options, each on every store (a seed alone picks one set of all).
    const everyStore = [
      ...countDeniedSets().map((policies, i) => ({
        what: 'fixed windows counting every call',
        seed: 9001 + i,
        policies,
      })),
      ...bucketedSets().map((policies, i) => ({ what: 'bucketed windows', seed: 9101 + i, policies })),
      ...settleSets().map((policies, i) => ({ what: 'meters settling estimates', seed: 9201 + i, policies })),
    ];
    for (const { what, seed, policies } of everyStore) {
      api.it(
        `seed ${seed}, ${what}: ${policies.map((p) => p.name).join(' + ')}`,
        () => withStore((store) => compareWithModel(store, { seed, operations: 300, policies })),
        120_000,
      );
    }
    const runs = options.randomRuns ?? 12;
    const firstSeed = options.seed ?? 1;
    for (let run = 0; run < runs; run++) {
      const seed = firstSeed + run;
      api.it(
        `seed ${seed}`,
        () => withStore((store) => compareWithModel(store, { seed, operations: options.randomOperations ?? 400 })),
        120_000,
      );
    }
  });
}

/**
 * On a store without an optional operation, the limiter refuses what needs it with `ERR_INVALID_OPTION`
 * naming the store: a reservation cannot be cancelled, a limiter cannot lease.
 */
async function refusesWithout(store: Store, op: 'cancel' | 'refund' | 'settle'): Promise<void> {
  const clock = manualClock({ startMs: SCENARIO_START_MS });
  const limiter = createLimiter({
    store,
    clock,
    prefix: uniquePrefix(op),
    policies: [gcra({ limit: 1, periodMs: 1000 })],
  });
  let refused: unknown;
  try {
    if (op === 'cancel') {
      await limiter.limit('k');
      await limiter.cancel('k', await limiter.limit('k', { maxDelayMs: 5000 }));
    } else if (op === 'settle') {
      await limiter.settle('k', await limiter.limit('k', { settle: true }), { cost: 2 });
    } else {
      leasedLimiter(limiter, { size: 1 });
    }
  } catch (error) {
    refused = error;
  }
  deepStrictEqual(
    isFloodgateError(refused) && [refused.code, refused.option],
    ['ERR_INVALID_OPTION', 'store'],
    `the ${store.name} store has no ${op}(): the limiter must refuse what needs it`,
  );
}

/**
 * Runs one table against a store and asserts every expectation, its calls made in `style` (by default
 * with an options object, through the promise methods).
 */
export async function runScenario(store: Store, scenario: Scenario, style: CallStyle = GENERAL_CALLS): Promise<void> {
  const clock = manualClock({ startMs: SCENARIO_START_MS });
  const limiter = createLimiter({ store, policies: scenario.policies, clock, prefix: uniquePrefix() });
  const calls = callerOf(limiter, style);
  let index = 0;
  const decisions: (Decision | undefined)[] = [];
  for (const step of scenario.steps) {
    const atUs = SCENARIO_START_MS * 1000 + Math.round(step.at * 1000);
    if (atUs < clock.nowUs()) throw new Error(`${scenario.name}: steps must not go back in time (at ${step.at} ms)`);
    clock.advanceUs(atUs - clock.nowUs());
    const key = step.key ?? 'key';
    const repeat = step.repeat ?? 1;
    for (let i = 0; i < repeat; i++) {
      index++;
      const where = `${scenario.name}, step ${index} (at ${step.at} ms, ${step.op ?? 'limit'}${repeat > 1 ? ` #${i + 1}` : ''})`;
      const callOptions = {
        ...(step.cost === undefined ? {} : { cost: step.cost }),
        ...(step.maxDelayMs === undefined ? {} : { maxDelayMs: step.maxDelayMs }),
      };
      let decision: Decision | undefined;
      switch (step.op ?? 'limit') {
        case 'limit':
          decision = await calls.limit(key, callOptions);
          break;
        case 'check':
          decision = await calls.check(key, callOptions);
          break;
        case 'status':
          decision = await calls.status(key);
          break;
        case 'reset':
          await calls.reset(key);
          break;
        case 'cancel': {
          const booked = decisions[(step.cancels ?? 0) - 1];
          if (booked === undefined) throw new Error(`${where}: step ${step.cancels} made no decision to cancel`);
          const cancelled = await limiter.cancel(key, booked);
          if (step.expect?.cancelled !== undefined) deepStrictEqual(cancelled, step.expect.cancelled, where);
          break;
        }
      }
      decisions[index - 1] = decision;
      const expected = step.expectEach?.[i] ?? step.expect;
      if (decision !== undefined && expected !== undefined) assertMatches(decision, expected, where);
    }
  }
}

function assertMatches(decision: Decision, expected: Expectation, where: string): void {
  const actual: Record<string, unknown> = {};
  const wanted: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(expected)) {
    wanted[field] = value;
    actual[field] = field === 'delayMs' && decision.delayMs === undefined ? null : decision[field as keyof Decision];
  }
  deepStrictEqual(actual, wanted, `${where}: got ${JSON.stringify(decision)}`);
}

/** A small, fast, seeded generator (mulberry32), so a failing run can be replayed from its seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Policy sets the randomized comparison draws from: every algorithm and option, alone and combined. */
export function randomPolicySets(): Policy[][] {
  return [
    [gcra({ limit: 5, periodMs: 1000 })],
    [gcra({ limit: 3, periodMs: 1000, burst: 2, blockMs: 1500 })],
    [gcra({ limit: 7, periodMs: 700 })],
    [tokenBucket({ capacity: 4, refillAmount: 1.5, refillIntervalMs: 300 })],
    [tokenBucket({ capacity: 4, refillAmount: 2, refillIntervalMs: 400, refill: 'interval' })],
    [tokenBucket({ capacity: 3.5, refillAmount: 0.75, refillIntervalMs: 333, refill: 'interval', blockMs: 700 })],
    [leakyBucket({ capacity: 5, leakPerSecond: 3 })],
    [leakyBucket({ capacity: 4, leakPerSecond: 2.5, mode: 'queue' })],
    [fixedWindow({ limit: 4, windowMs: 500 })],
    [fixedWindow({ limit: 4.5, windowMs: 450, align: 'first-request', blockMs: 900 })],
    [slidingWindow({ limit: 6, windowMs: 600 })],
    [slidingWindow({ limit: 3, windowMs: 250, blockMs: 100 })],
    ...bucketedSets(),
    [slidingLog({ limit: 4, windowMs: 500 })],
    [slidingLog({ limit: 3, windowMs: 400, minGapMs: 60 })],
    [slidingLog({ limit: 3, windowMs: 400, countDenied: true })],
    [slidingLog({ limit: 2.5, windowMs: 300, countDenied: true, minGapMs: 20, blockMs: 350 })],
    [gcra({ limit: 4, periodMs: 400, name: 'fast' }), fixedWindow({ limit: 9, windowMs: 2000, name: 'slow' })],
    [
      leakyBucket({ capacity: 3, leakPerSecond: 4, mode: 'queue', name: 'shape' }),
      slidingLog({ limit: 5, windowMs: 900, countDenied: true, name: 'log' }),
      tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 250, refill: 'interval', name: 'tb' }),
    ],
    [
      slidingWindow({ limit: 5, windowMs: 500, name: 'sw', blockMs: 200 }),
      gcra({ limit: 3, periodMs: 300, name: 'g' }),
    ],
    // Costs 2 and 3 exceed `frac` (a fractional burst) but not the others: nothing may change then.
    [
      gcra({ limit: 1.5, periodMs: 400, name: 'frac' }),
      slidingLog({ limit: 4, windowMs: 700, countDenied: true, name: 'log' }),
      fixedWindow({ limit: 3.5, windowMs: 500, blockMs: 400, name: 'fw' }),
    ],
    [tokenBucket({ capacity: 10, refillAmount: 0.1, refillIntervalMs: 100, refill: 'interval' })],
    // Penalty boxes shorter than the policies' own waits: retryAfter is the later of the two.
    [gcra({ limit: 1, periodMs: 2000, blockMs: 300 })],
    [leakyBucket({ capacity: 2, leakPerSecond: 1, mode: 'queue', blockMs: 250 })],
    [tokenBucket({ capacity: 2, refillAmount: 0.5, refillIntervalMs: 700, refill: 'interval', blockMs: 90 })],
    [
      fixedWindow({ limit: 2, windowMs: 1500, blockMs: 200, name: 'fw' }),
      slidingLog({ limit: 3, windowMs: 1200, countDenied: true, blockMs: 150, name: 'log' }),
      slidingWindow({ limit: 2.5, windowMs: 900, blockMs: 50, name: 'sw' }),
    ],
    ...countDeniedSets(),
    // A countDenied log beside a policy that denies first: the log's wait after the logged attempt.
    [
      slidingLog({ limit: 4.5, windowMs: 1194, countDenied: true, name: 'log' }),
      fixedWindow({ limit: 1, windowMs: 1, name: 'fw' }),
    ],
  ];
}

/**
 * Bucketed windows: several buckets, fractional limits under a penalty box, one bucket per window (the
 * clock-aligned fixed window), and beside other policies (costs 2 and 3 exceed `g`'s burst of 1.5).
 */
function bucketedSets(): Policy[][] {
  return [
    [slidingWindow({ limit: 5, windowMs: 600, precisionMs: 100 })],
    [slidingWindow({ limit: 2.5, windowMs: 450, precisionMs: 150, blockMs: 200 })],
    [slidingWindow({ limit: 3, windowMs: 300, precisionMs: 300 })],
    [
      slidingWindow({ limit: 4, windowMs: 800, precisionMs: 50, name: 'buckets' }),
      gcra({ limit: 1.5, periodMs: 300, name: 'g' }),
      fixedWindow({ limit: 3, windowMs: 500, countDenied: true, name: 'fw' }),
    ],
  ];
}

/** Meters, alone and together: their calls are admitted with estimates and settled at other costs. */
function settleSets(): Policy[][] {
  return [
    [gcra({ limit: 5, periodMs: 1000 })],
    [tokenBucket({ capacity: 4, refillAmount: 1.5, refillIntervalMs: 300 })],
    [gcra({ limit: 4, periodMs: 400, name: 'fast' }), leakyBucket({ capacity: 5, leakPerSecond: 3, name: 'drip' })],
  ];
}

/**
 * Fixed windows that count every call (Envoy's reference service): denied calls and costs above the limit
 * count; alone, with a penalty box, and beside policies that deny first or can never admit costs 2 and 3.
 */
function countDeniedSets(): Policy[][] {
  return [
    [fixedWindow({ limit: 3, windowMs: 400, countDenied: true })],
    [fixedWindow({ limit: 2.5, windowMs: 350, align: 'first-request', countDenied: true, blockMs: 300 })],
    [
      gcra({ limit: 1.5, periodMs: 400, name: 'frac' }),
      fixedWindow({ limit: 4, windowMs: 600, countDenied: true, name: 'fw' }),
      slidingLog({ limit: 3, windowMs: 500, countDenied: true, name: 'log' }),
    ],
  ];
}

/** Costs of the randomized comparison; calls with no options object draw cost 1 more often. */
const COSTS = [0, 1, 1, 1, 2, 0.5, 1.25, 3, 100, 0.1, 1e-7, 0.3];
const BARE_COSTS = [...COSTS, 1, 1, 1, 1, 1, 1];

/** A decision without its settlement's id and signature (which are its limiter's own). */
function unsigned(decision: Decision): Decision {
  if (decision.settlement === undefined) return decision;
  // Each limiter signs with a secret of its own and tags its ids with random characters of its own.
  return { ...decision, settlement: { ...decision.settlement, id: '', signature: '' } };
}

/**
 * Feeds one random sequence of calls (time steps down to 1 µs, several keys, fractional and
 * impossible costs, limit/check/status/reset, reservations) through the store and through the
 * reference model, and asserts that every decision is identical. The store's calls are made in `style`
 * (by default with an options object, through the promise methods); the model's always so.
 */
export async function compareWithModel(
  store: Store,
  options: { seed: number; operations?: number; costs?: readonly number[]; policies?: Policy[]; style?: CallStyle },
): Promise<void> {
  const style = options.style ?? GENERAL_CALLS;
  const random = seededRandom(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const sets = randomPolicySets();
  const drawn = pick(sets);
  const policies = options.policies ?? drawn;
  const clock: ManualClock = manualClock({ startMs: SCENARIO_START_MS + Math.floor(random() * 10_000) });
  const prefix = uniquePrefix('cmp');
  const subject = createLimiter({ store, policies, clock, prefix });
  const calls = callerOf(subject, style);
  const model = modelStore();
  const reference = createLimiter({ store: model, policies, clock, prefix });
  const keys = ['a', 'b', 'key:{c}', 'ключ'];
  // Tiny and fractional costs make sliding logs longer than their bound, so the ports' coalescing is compared.
  const costs = options.costs ?? (style.bare ? BARE_COSTS : COSTS);
  const operations = options.operations ?? 400;
  // Reservations (maxDelayMs) only where every policy can book ahead; queue mode books on its own.
  const reservable = policies.every((p) => isReservable(compilePolicy(p)));
  const booked: { key: string; decision: Decision }[] = [];
  // Leases (any admitted call can be given back in part) where every policy can lease.
  const compiled = policies.map(compilePolicy);
  const leasable = store.refund !== undefined && compiled.every((c) => leaseRefusal(c) === undefined);
  const granted: { key: string; atUs: number; cost: number }[] = [];
  // Settles (calls admitted with an estimate, charged another cost later) where every policy settles.
  const settleable = store.settle !== undefined && compiled.every((c) => settleRefusal(c) === undefined);
  const estimated: { key: string; got: Decision; want: Decision }[] = [];
  const log: string[] = [];
  for (let i = 0; i < operations; i++) {
    const step = random();
    if (step < 0.35) clock.advanceUs(1 + Math.floor(random() * 3));
    else if (step < 0.7) clock.advance(Math.floor(random() * 120));
    else if (step < 0.8) clock.advance(Math.floor(random() * 1500));
    let key = pick(keys);
    const cost = pick(costs);
    const r = random();
    let op = r < 0.64 ? 'limit' : r < 0.7 ? 'cancel' : r < 0.82 ? 'check' : r < 0.95 ? 'status' : 'reset';
    if (op === 'limit' && leasable && granted.length > 0 && random() < 0.12) op = 'refund';
    if (op === 'limit' && settleable && estimated.length > 0 && random() < 0.2) op = 'settle';
    const callOptions: CallOptions =
      random() < (reservable ? 0.3 : 0) ? { cost, maxDelayMs: Math.floor(random() * 600) } : { cost };
    if (settleable && op === 'limit' && random() < 0.4) callOptions.settle = true;
    const where = () =>
      `seed ${options.seed}, policies ${policies.map((p) => p.name).join(' + ')}, operation ${i}:\n${log.slice(-12).join('\n')}`;
    if (op === 'cancel') {
      if (booked.length === 0 || store.cancel === undefined) continue;
      // Mostly the latest booking (which can give back), sometimes an older one (which may not).
      const chosen = random() < 0.6 ? (booked.at(-1) as (typeof booked)[0]) : pick(booked);
      key = chosen.key;
      log.push(`${clock.nowUs()} cancel ${JSON.stringify(key)} ${JSON.stringify(chosen.decision.reservation)}`);
      const got = await subject.cancel(key, chosen.decision);
      const want = await reference.cancel(key, chosen.decision);
      deepStrictEqual(got, want, where());
      continue;
    }
    if (op === 'refund') {
      const lease = granted.splice(Math.floor(random() * granted.length), 1)[0] as (typeof granted)[0];
      const unused = pick([lease.cost, lease.cost / 2, Math.min(1, lease.cost), lease.cost * 0.75]);
      const request = {
        prefix,
        key: lease.key,
        policies: compiled,
        leased: lease.cost,
        leasedAtUs: lease.atUs,
        unused,
        nowUs: clock.nowUs(),
      };
      log.push(
        `${clock.nowUs()} refund ${JSON.stringify(lease.key)} ${JSON.stringify({ ...request, policies: undefined })}`,
      );
      await store.refund?.(request);
      await model.refund?.(request);
      continue;
    }
    if (op === 'settle') {
      const call = estimated.splice(Math.floor(random() * estimated.length), 1)[0] as (typeof estimated)[0];
      const estimate = call.want.settlement?.cost ?? 1;
      const actual = pick([0, estimate / 2, estimate, estimate * 2, estimate + 3, 0.3, 100]);
      log.push(`${clock.nowUs()} settle ${JSON.stringify(call.key)} ${estimate} at ${actual}`);
      const got = await subject.settle(call.key, call.got, { cost: actual });
      const want = await reference.settle(call.key, call.want, { cost: actual });
      deepStrictEqual(got, want, where());
      continue;
    }
    log.push(`${clock.nowUs()} ${op} ${JSON.stringify(key)} ${JSON.stringify(callOptions)}`);
    if (op === 'reset') {
      await calls.reset(key);
      await reference.reset(key);
      continue;
    }
    const [got, want] =
      op === 'limit'
        ? [await calls.limit(key, callOptions), await reference.limit(key, callOptions)]
        : op === 'check'
          ? [await calls.check(key, callOptions), await reference.check(key, callOptions)]
          : [await calls.status(key), await reference.status(key)];
    // Each limiter signs its own settlements: the rest of a settlement is the same.
    deepStrictEqual(unsigned(got), unsigned(want), where());
    if (got.settlement !== undefined) {
      estimated.push({ key, got, want });
      if (estimated.length > 8) estimated.shift();
    }
    if (op === 'limit' && leasable && want.allowed && cost > 0) {
      granted.push({ key, atUs: clock.nowUs(), cost });
      if (granted.length > 8) granted.shift();
    }
    if (want.reservation !== undefined) {
      booked.push({ key, decision: want });
      if (booked.length > 8) booked.shift();
    }
  }
}
