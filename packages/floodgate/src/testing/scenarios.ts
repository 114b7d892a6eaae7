import { MAX_COST, MIN_COST } from '../model/cost.js';
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

/** What a step expects of the decision; fields left out are not checked. */
export type Expectation = Partial<
  Pick<Decision, 'allowed' | 'remaining' | 'retryAfterMs' | 'resetAfterMs' | 'reason'>
> & {
  /** `null` expects no `delayMs` at all. */
  delayMs?: number | null;
  /** Name of the binding policy. */
  policy?: string;
  /** `cancel` steps: whether the whole cost came back under every policy. */
  cancelled?: boolean;
};

/** One call at an explicit time (ms after the scenario's start, which is aligned to the hour). */
export interface Step {
  at: number;
  op?: 'limit' | 'check' | 'status' | 'reset' | 'cancel';
  /** `cancel` steps: the (1-based) step whose reservation to cancel. */
  cancels?: number;
  key?: string;
  cost?: number;
  maxDelayMs?: number;
  /** Runs the same call this many times (every one must meet `expect`, unless `expectEach` is given). */
  repeat?: number;
  expect?: Expectation;
  /** One expectation per repetition. */
  expectEach?: Expectation[];
}

/** A table of calls with explicit times, written from the semantics in DESIGN.md. */
export interface Scenario {
  name: string;
  policies: Policy[];
  steps: Step[];
}

const deny = (retryAfterMs: number, extra: Expectation = {}): Expectation => ({
  allowed: false,
  reason: 'limit',
  retryAfterMs,
  ...extra,
});

/** A clock-aligned window of 3 per second: the fixed window's table, and the bucketed window's with one bucket. */
function clockWindowSteps(): Step[] {
  return [
    {
      at: 0,
      repeat: 3,
      expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 1000 })),
    },
    { at: 999, expect: deny(1, { resetAfterMs: 1 }) },
    { at: 1000, repeat: 3, expect: { allowed: true } },
    { at: 1999, op: 'status', expect: { remaining: 0, resetAfterMs: 1 } },
    { at: 2000, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    { at: 2000, cost: 2.5, expect: { allowed: true, remaining: 0 } },
    { at: 2000, cost: 0.5, expect: { allowed: true, remaining: 0 } },
    { at: 2000, cost: 0.5, expect: deny(1000) },
  ];
}

/** The algorithm tables every store must reproduce exactly. */
export const scenarios: Scenario[] = [
  {
    // T = 1 s: the smallest cost is charged ceil(1e-9 · 1e6 µs) = 1 µs, never nothing.
    name: 'cost domain: the smallest cost is charged a whole µs of a meter, the largest can never fit',
    policies: [gcra({ limit: 1, periodMs: 1000 })],
    steps: [
      { at: 0, cost: MIN_COST, expect: { allowed: true, remaining: 0, resetAfterMs: 1 } },
      { at: 0, cost: 1, expect: deny(1, { remaining: 0 }) },
      { at: 0.001, cost: 1, expect: { allowed: true, remaining: 0, resetAfterMs: 1000 } },
      { at: 0.001, cost: MAX_COST, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
    ],
  },
  {
    // Window counts are doubles summed in call order, the same in every store: 0.1 + 0.2 + 0.7 is exactly
    // 1, and 0.7 + 0.2 + 0.1 is 0.9999999999999999; either way nothing more fits, not even the smallest cost.
    name: 'cost domain: decimal costs add up in binary under a fixed window',
    policies: [fixedWindow({ limit: 1, windowMs: 1000 })],
    steps: [
      { at: 0, cost: 0.1, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.2, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.7, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: MIN_COST, expect: deny(1000, { remaining: 0 }) },
      { at: 1000, cost: 0.7, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: 0.2, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: 0.1, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: MIN_COST, expect: deny(1000) },
      { at: 2000, cost: MIN_COST, repeat: 3, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    // The GCRA article's case: 5 per minute admits a burst of 5, then the next must wait 12 s.
    name: 'GCRA: 5 per minute admits a burst of 5, then one every 12 s',
    policies: [gcra({ limit: 5, periodMs: 60_000 })],
    steps: [
      {
        at: 0,
        repeat: 5,
        expectEach: [4, 3, 2, 1, 0].map((remaining, i) => ({
          allowed: true,
          remaining,
          retryAfterMs: 0,
          resetAfterMs: 12_000 * (i + 1),
        })),
      },
      { at: 0, expect: deny(12_000, { remaining: 0, resetAfterMs: 60_000, policy: 'gcra-5-per-60000ms' }) },
      { at: 11_999, expect: deny(1) },
      { at: 11_999.999, expect: deny(1) },
      { at: 12_000, expect: { allowed: true, remaining: 0, resetAfterMs: 60_000 } },
      { at: 12_000, expect: deny(12_000) },
      { at: 36_000, op: 'status', expect: { allowed: true, remaining: 2, resetAfterMs: 36_000 } },
      { at: 36_000, cost: 2, op: 'check', expect: { allowed: true, remaining: 0 } },
      { at: 36_000, cost: 3, expect: deny(12_000, { remaining: 2 }) },
      { at: 36_000, cost: 6, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 36_000, cost: 0, expect: { allowed: true, remaining: 2 } },
      { at: 72_000, op: 'status', expect: { allowed: true, remaining: 5, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'GCRA: burst 1 spaces calls by the emission interval',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0, resetAfterMs: 100 } },
      { at: 0, expect: deny(100, { remaining: 0 }) },
      { at: 50, expect: deny(50) },
      { at: 100, expect: { allowed: true } },
      { at: 150, expect: deny(50) },
      { at: 1000, cost: 2, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
    ],
  },
  {
    // T = 333 333.3 µs is rounded up to 333 334 µs: never more than 3 per second.
    name: 'GCRA: rates that are not whole microseconds (3 per second)',
    policies: [gcra({ limit: 3, periodMs: 1000 })],
    steps: [
      { at: 0, repeat: 3, expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining })) },
      { at: 0, expect: deny(334) },
      { at: 333.333, expect: deny(1) },
      { at: 333.334, expect: { allowed: true, remaining: 0 } },
      { at: 1333.335, op: 'status', expect: { remaining: 2, resetAfterMs: 1 } },
      { at: 1333.336, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'token bucket, continuous refill: 10 at once, then 2 per second',
    policies: [tokenBucket({ capacity: 10, refillAmount: 2, refillIntervalMs: 1000 })],
    steps: [
      { at: 0, repeat: 10, expect: { allowed: true } },
      { at: 0, expect: deny(500, { remaining: 0, resetAfterMs: 5000 }) },
      { at: 500, expect: { allowed: true, remaining: 0 } },
      { at: 2000, op: 'status', expect: { remaining: 3, resetAfterMs: 3500 } },
      { at: 2000, cost: 3.5, expect: deny(250, { remaining: 3 }) },
      { at: 2250, cost: 3.5, expect: { allowed: true, remaining: 0 } },
      { at: 8000, op: 'status', expect: { remaining: 10, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'token bucket, interval refill: tokens come back at each interval boundary',
    policies: [tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 1000, refill: 'interval' })],
    steps: [
      { at: 0, repeat: 3, expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining })) },
      { at: 0, expect: deny(1000, { resetAfterMs: 3000 }) },
      { at: 999, expect: deny(1) },
      { at: 1000, expect: { allowed: true, remaining: 0, resetAfterMs: 3000 } },
      { at: 1500, expect: deny(500) },
      { at: 2000, cost: 2, expect: deny(1000, { remaining: 1 }) },
      { at: 3999, expect: { allowed: true, remaining: 1 } },
      { at: 10_000, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
      { at: 10_500, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      { at: 11_499, op: 'status', expect: { remaining: 2, resetAfterMs: 1 } },
      { at: 11_500, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'leaky bucket meter: fractional costs against a level that leaks',
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 1 })],
    steps: [
      { at: 0, repeat: 3, expect: { allowed: true } },
      { at: 0, expect: deny(1000, { remaining: 0, resetAfterMs: 3000 }) },
      { at: 500, expect: deny(500) },
      { at: 500, cost: 0.5, expect: { allowed: true, remaining: 0, resetAfterMs: 3000 } },
      { at: 1500, cost: 1.25, expect: deny(250) },
      { at: 1750, cost: 1.25, expect: { allowed: true, remaining: 0 } },
      { at: 4750, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'leaky bucket: a spend budget of 1000.00 per 30 days',
    policies: [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / (30 * 86_400), name: 'budget' })],
    steps: [
      { at: 0, cost: 30, expect: { allowed: true, remaining: 970 } },
      // 20 over: 20 units leak in 20 × 2592 s.
      { at: 0, cost: 990, expect: deny(51_840_000, { remaining: 970 }) },
      { at: 0, cost: 969.99, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.01, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.01, expect: deny(25_920) },
      { at: 0, cost: 1000.01, op: 'check', expect: { allowed: false, reason: 'exceeds-capacity' } },
      { at: 25_919, cost: 0.01, expect: deny(1) },
      { at: 25_920, cost: 0.01, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    // Decimal amounts that add up to the budget exactly must fit it, whatever binary rounding says.
    name: 'leaky bucket: decimal amounts that add up to the budget fit it exactly',
    policies: [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / (30 * 86_400), name: 'budget' })],
    steps: [
      ...[184.58, 207.21, 226.7, 322].map((cost) => ({ at: 0, cost, expect: { allowed: true } })),
      { at: 0, cost: 59.51, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.01, expect: deny(25_920) },
    ],
  },
  {
    name: 'leaky bucket queue: admitted calls are spaced by delayMs, constant outflow',
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 1, mode: 'queue' })],
    steps: [
      {
        at: 0,
        repeat: 3,
        expectEach: [null, 1000, 2000].map((delayMs) => ({ allowed: true, delayMs })),
      },
      { at: 0, expect: deny(1000) },
      { at: 1000, expect: { allowed: true, delayMs: 2000 } },
      { at: 4000, expect: { allowed: true, delayMs: null } },
    ],
  },
  {
    name: 'fixed window aligned to the clock: everyone resets together',
    policies: [fixedWindow({ limit: 3, windowMs: 1000 })],
    steps: clockWindowSteps(),
  },
  {
    name: 'fixed window aligned to the first request',
    policies: [fixedWindow({ limit: 3, windowMs: 1000, align: 'first-request' })],
    steps: [
      { at: 500, repeat: 3, expect: { allowed: true, resetAfterMs: 1000 } },
      { at: 1000, expect: deny(500) },
      { at: 1499, expect: deny(1) },
      { at: 1500, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      { at: 3000, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
    ],
  },
  {
    // Envoy's reference service adds every hit to the window before comparing: calls over the limit
    // count too, so a client that keeps calling stays denied, and a check (cost 0) of a window pushed past
    // its limit is denied until the window ends. A cost above the limit can never pass, and still counts.
    name: 'fixed window that counts denied calls (countDenied)',
    policies: [fixedWindow({ limit: 3, windowMs: 1000, countDenied: true })],
    steps: [
      {
        at: 0,
        repeat: 3,
        expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 1000 })),
      },
      { at: 100, expect: deny(900, { remaining: 0, resetAfterMs: 900 }) },
      { at: 200, op: 'check', expect: deny(800, { remaining: 0 }) },
      { at: 200, cost: 0, expect: deny(800, { remaining: 0 }) },
      { at: 999, op: 'status', expect: { remaining: 0, resetAfterMs: 1 } },
      { at: 1000, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      {
        at: 1000,
        cost: 5,
        expect: {
          allowed: false,
          reason: 'exceeds-capacity',
          retryAfterMs: Infinity,
          remaining: 0,
          resetAfterMs: 1000,
        },
      },
      { at: 1500, cost: 0, expect: deny(500, { remaining: 0 }) },
      { at: 2000, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
      { at: 2000, cost: 2, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    // A call another policy denies, or whose cost another policy can never admit, counts in the window
    // all the same; nothing else changes.
    name: 'fixed window that counts denied calls, beside a policy that denies first',
    policies: [
      gcra({ limit: 1, periodMs: 1000, name: 'g' }),
      fixedWindow({ limit: 5, windowMs: 10_000, countDenied: true, name: 'fw' }),
    ],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0, policy: 'g' } },
      { at: 0, expect: deny(1000, { policy: 'g' }) },
      { at: 0, cost: 2.5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 1000, expect: deny(9000, { policy: 'fw', remaining: 0 }) },
      { at: 10_000, expect: { allowed: true, remaining: 0, policy: 'g' } },
    ],
  },
  {
    name: 'sliding-window counter: the previous window counts by its overlap',
    policies: [slidingWindow({ limit: 10, windowMs: 1000 })],
    steps: [
      { at: 0, repeat: 10, expect: { allowed: true } },
      { at: 500, expect: deny(600, { remaining: 0, resetAfterMs: 1500 }) },
      { at: 1099, expect: deny(1) },
      { at: 1100, expect: { allowed: true, remaining: 0, resetAfterMs: 1900 } },
      { at: 1500, op: 'status', expect: { remaining: 4 } },
      { at: 1500, cost: 4, expect: { allowed: true, remaining: 0 } },
      { at: 1500, expect: deny(100) },
      { at: 3000, op: 'status', expect: { remaining: 10, resetAfterMs: 0 } },
    ],
  },
  {
    // Buckets of a second, summed over five: a bucket counts whole until it leaves the window, at once.
    name: 'bucketed window: per-second buckets summed over five seconds, each leaving whole',
    policies: [slidingWindow({ limit: 5, windowMs: 5000, precisionMs: 1000 })],
    steps: [
      { at: 0, repeat: 2, expectEach: [4, 3].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 5000 })) },
      {
        at: 1500,
        repeat: 2,
        expectEach: [2, 1].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 4500 })),
      },
      { at: 2999, expect: { allowed: true, remaining: 0, resetAfterMs: 4001 } },
      // 2 + 2 + 1: the call fits once the bucket of 0 (2 calls) leaves, at 5000.
      { at: 3000, expect: deny(2000, { remaining: 0, resetAfterMs: 4000 }) },
      { at: 4999, expect: deny(1, { resetAfterMs: 2001 }) },
      { at: 5000, expect: { allowed: true, remaining: 1, resetAfterMs: 5000 } },
      // Cost 2 beside 1 + 1 + 2: the bucket of 1000 must leave first.
      { at: 5000, cost: 2, expect: deny(1000, { remaining: 1 }) },
      { at: 6000, cost: 2, expect: { allowed: true, remaining: 1, resetAfterMs: 5000 } },
      { at: 10_999, op: 'status', expect: { remaining: 3, resetAfterMs: 1 } },
      { at: 11_000, op: 'status', expect: { remaining: 5, resetAfterMs: 0 } },
    ],
  },
  {
    // With one bucket per window, the bucketed window is the clock-aligned fixed window, step for step.
    name: 'bucketed window with one bucket per window: the fixed window aligned to the clock',
    policies: [slidingWindow({ limit: 3, windowMs: 1000, precisionMs: 1000 })],
    steps: clockWindowSteps(),
  },
  {
    name: 'bucketed window: fractional costs and a penalty box; the wait is exact',
    policies: [slidingWindow({ limit: 1, windowMs: 300, precisionMs: 100, blockMs: 150, name: 'bw' })],
    steps: [
      { at: 0, cost: 0.1, expect: { allowed: true, remaining: 0 } },
      { at: 100, cost: 0.2, expect: { allowed: true, remaining: 0 } },
      { at: 200, cost: 0.7, expect: { allowed: true, remaining: 0, resetAfterMs: 300 } },
      // The window holds 0.1 + 0.2 + 0.7: cost 0.2 waits for the 0.1 and the 0.2 to leave (at 400), and
      // the denial starts a block of 150 ms, which ends with that wait.
      { at: 250, cost: 0.2, expect: deny(150, { remaining: 0, resetAfterMs: 250 }) },
      { at: 300, cost: 0.2, expect: { allowed: false, reason: 'blocked', retryAfterMs: 100 } },
      { at: 400, cost: 0.2, expect: { allowed: true, remaining: 0, resetAfterMs: 300 } },
    ],
  },
  {
    name: 'sliding log: exact over any window',
    policies: [slidingLog({ limit: 3, windowMs: 1000 })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      { at: 100, expect: { allowed: true, remaining: 1 } },
      { at: 200, expect: { allowed: true, remaining: 0, resetAfterMs: 1000 } },
      { at: 300, expect: deny(700, { resetAfterMs: 900 }) },
      { at: 300, cost: 2, expect: deny(800) },
      { at: 1000, expect: { allowed: true, remaining: 0 } },
      { at: 2200, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'sliding log: minimum gap between events',
    policies: [slidingLog({ limit: 10, windowMs: 1000, minGapMs: 100 })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 9 } },
      { at: 50, expect: deny(50, { remaining: 9 }) },
      { at: 100, expect: { allowed: true, remaining: 8 } },
      { at: 100, cost: 0, expect: { allowed: true } },
    ],
  },
  {
    name: 'sliding log counting denied attempts: a client that keeps trying stays out',
    policies: [slidingLog({ limit: 2, windowMs: 1000, countDenied: true })],
    steps: [
      { at: 0, expect: { allowed: true } },
      { at: 100, expect: { allowed: true } },
      { at: 500, expect: deny(600) },
      { at: 1050, expect: deny(450) },
      { at: 1499, expect: deny(551) },
      { at: 2499, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'penalty box: once denied, blocked for blockMs',
    policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 5000, name: 'login' })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, expect: deny(5000, { remaining: 0, resetAfterMs: 5000, policy: 'login' }) },
      { at: 1000, expect: { allowed: false, reason: 'blocked', retryAfterMs: 4000, remaining: 0 } },
      { at: 1000, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 4000 } },
      { at: 1000, op: 'status', expect: { allowed: false, reason: 'blocked', remaining: 0, resetAfterMs: 4000 } },
      { at: 4999, expect: { allowed: false, reason: 'blocked', retryAfterMs: 1 } },
      { at: 5000, expect: { allowed: true, remaining: 1 } },
      { at: 5000, op: 'reset' },
      { at: 5000, op: 'status', expect: { allowed: true, remaining: 2, resetAfterMs: 0 } },
    ],
  },
  {
    // retryAfter is a promise: the later of the block's end and the policy's own wait for the same call.
    // A retry the policy itself still denies would start a new block: a client that honours Retry-After
    // is never punished again, one that comes back early is.
    name: 'penalty box shorter than the wait: retryAfter is the policy own wait (gcra 1 per minute, block 5 s)',
    policies: [gcra({ limit: 1, periodMs: 60_000, blockMs: 5000, name: 'slow' })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0, resetAfterMs: 60_000 } },
      { at: 0, expect: deny(60_000, { remaining: 0, resetAfterMs: 60_000, policy: 'slow' }) },
      { at: 1000, expect: { allowed: false, reason: 'blocked', retryAfterMs: 59_000, resetAfterMs: 59_000 } },
      { at: 1000, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 59_000 } },
      // A status is a cost-0 call: only the block stands in its way.
      { at: 1000, op: 'status', expect: { allowed: false, reason: 'blocked', remaining: 0, resetAfterMs: 59_000 } },
      { at: 4999, expect: { allowed: false, reason: 'blocked', retryAfterMs: 55_001 } },
      { at: 5000, op: 'check', expect: deny(55_000) },
      // Back early, after the block: denied on the limit, and blocked again until 10 s.
      { at: 5000, expect: deny(55_000, { resetAfterMs: 55_000 }) },
      { at: 9999, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 50_001 } },
      { at: 59_999.999, op: 'check', expect: deny(1) },
      { at: 60_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'penalty box shorter than the wait: while blocked, the wait is for the same cost',
    policies: [fixedWindow({ limit: 3, windowMs: 1000, blockMs: 300, name: 'fw' })],
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 1 } },
      { at: 100, cost: 2, expect: deny(900, { remaining: 0, resetAfterMs: 900 }) },
      // Blocked until 400: cost 1 fits the window then, cost 2 only in the next window.
      { at: 200, cost: 1, expect: { allowed: false, reason: 'blocked', retryAfterMs: 200, resetAfterMs: 800 } },
      { at: 200, cost: 2, expect: { allowed: false, reason: 'blocked', retryAfterMs: 800, resetAfterMs: 800 } },
      { at: 399.999, cost: 1, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 1 } },
      { at: 400, cost: 1, expect: { allowed: true, remaining: 0 } },
      { at: 400, cost: 1, expect: deny(600) },
      { at: 1000, cost: 2, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    // The logged attempt counts in the wait: the events of 0 ms must leave the window.
    name: 'penalty box shorter than the wait, denied attempts counted: the retry passes the log too',
    policies: [slidingLog({ limit: 2, windowMs: 1000, countDenied: true, blockMs: 100, name: 'log' })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 100, expect: deny(900, { remaining: 0, resetAfterMs: 1000 }) },
      { at: 150, expect: { allowed: false, reason: 'blocked', retryAfterMs: 850 } },
      { at: 999.999, op: 'check', expect: deny(1) },
      { at: 1000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    // Several policies: the decision waits for the longest of them, blocks included.
    name: 'penalty box shorter than the wait under two policies: retryAfter is the longest wait',
    policies: [
      gcra({ limit: 2, periodMs: 1000, blockMs: 100, name: 'g' }),
      fixedWindow({ limit: 3, windowMs: 1000, name: 'fw' }),
    ],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, expect: deny(500, { policy: 'g', remaining: 0, resetAfterMs: 1000 }) },
      { at: 50, expect: { allowed: false, reason: 'blocked', retryAfterMs: 450, policy: 'g' } },
      { at: 500, expect: { allowed: true, remaining: 0 } },
      { at: 600, expect: deny(400, { policy: 'g' }) },
      { at: 650, expect: { allowed: false, reason: 'blocked', retryAfterMs: 350, policy: 'g' } },
      { at: 1000, expect: { allowed: true } },
    ],
  },
  {
    // Cost 0 is a check: even on a key that owes more than its burst (a reservation), it starts no penalty.
    name: 'penalty box: a cost-0 call never starts a block',
    policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 60_000 })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, maxDelayMs: 500, expect: { allowed: true, delayMs: 500 } },
      { at: 0, cost: 0, expect: { allowed: false, reason: 'limit', retryAfterMs: 500 } },
      { at: 1000, op: 'status', expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'two policies, all-or-nothing: a denial consumes nothing from either',
    policies: [
      gcra({ limit: 10, periodMs: 1000, name: 'per-second' }),
      fixedWindow({ limit: 15, windowMs: 60_000, name: 'per-minute' }),
    ],
    steps: [
      { at: 0, repeat: 10, expect: { allowed: true } },
      { at: 0, expect: deny(100, { policy: 'per-second', remaining: 0 }) },
      { at: 1000, op: 'status', expect: { remaining: 5, policy: 'per-minute' } },
      { at: 1000, repeat: 5, expect: { allowed: true } },
      { at: 1000, expect: deny(59_000, { policy: 'per-minute' }) },
      { at: 1000, op: 'check', cost: 0, expect: { allowed: true, remaining: 0 } },
      { at: 60_000, expect: { allowed: true, remaining: 9, policy: 'per-second' } },
    ],
  },
  {
    // DESIGN §4: a cost some policy can never admit changes nothing, under any policy.
    name: 'exceeds-capacity under one policy starts no penalty under another',
    policies: [
      fixedWindow({ limit: 5, windowMs: 1000, blockMs: 60_000, name: 'fw' }),
      gcra({ limit: 2, periodMs: 1000, name: 'a' }),
    ],
    steps: [
      { at: 0, expect: { allowed: true } },
      // `fw` alone would deny this on its limit (1 + 5 > 5) and start its 60 s block.
      { at: 0, cost: 5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 0, op: 'status', expect: { allowed: true, remaining: 1 } },
      { at: 1500, expect: { allowed: true } },
    ],
  },
  {
    name: 'exceeds-capacity under one policy logs no attempt under a countDenied log',
    policies: [
      gcra({ limit: 2, periodMs: 1000, name: 'a' }),
      slidingLog({ limit: 6, windowMs: 60_000, countDenied: true, name: 'log' }),
    ],
    steps: [
      { at: 0, op: 'status', expect: { remaining: 2 } },
      { at: 0, cost: 5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 0, op: 'status', expect: { remaining: 2 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0 } },
      // A denial on a limit is still logged: 2 + 2 counted, 4 of 6.
      { at: 0, cost: 2, expect: deny(1000, { policy: 'a' }) },
      { at: 1000, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: 1, expect: { allowed: false, reason: 'limit' } },
    ],
  },
  {
    // retryAfter is a promise under several policies too: when another policy denies, a countDenied log
    // that would have admitted the call still logs the attempt, and its own wait for the same call, after
    // that, is part of the decision's retryAfter (it used to promise 1 ms, and the log denied then).
    name: 'countDenied log beside a policy that denies: retryAfter covers the attempt the log counted',
    policies: [
      slidingLog({ limit: 4.5, windowMs: 1194, countDenied: true, name: 'log' }),
      fixedWindow({ limit: 1, windowMs: 1, name: 'fw' }),
    ],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0 } },
      // Denied by the window; the log counts the attempts: 2, then 3 of 4.5, room for one more.
      { at: 0, repeat: 2, expect: deny(1, { policy: 'fw' }) },
      // Counted: 4 of 4.5, so the same call fits the log only once the events of 0 ms have left it.
      { at: 0, expect: deny(1194, { policy: 'fw' }) },
      { at: 1, op: 'check', expect: deny(1193, { policy: 'log' }) },
      { at: 1193.999, op: 'check', expect: deny(1, { policy: 'log' }) },
      { at: 1194, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    // τ is rounded like a charge, so a cost equal to a fractional burst fits (T = 666 667 µs).
    name: 'GCRA: a fractional limit admits a cost equal to it',
    policies: [gcra({ limit: 1.5, periodMs: 1000 })],
    steps: [
      { at: 0, cost: 1.5, op: 'check', expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 1.5, expect: { allowed: true, remaining: 0, resetAfterMs: 1001 } },
      { at: 0, cost: 1.6, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 0, cost: 1, expect: deny(667) },
      { at: 1000.001, cost: 1.5, expect: { allowed: true } },
    ],
  },
  {
    // Float dust: the bucket holds 2.25 as 2.2500000000000004, so one refill of 0.75 leaves a hair over
    // 1.5 and cost 2 needs two. The wait is found with the bucket's own test, not by dividing (which
    // promised 33 ms, and the call was denied then): admitted exactly when promised, not 1 ms earlier.
    name: 'token bucket, interval refill, fractional amounts: the promised retry is admitted',
    policies: [tokenBucket({ capacity: 3.5, refillAmount: 0.75, refillIntervalMs: 333, refill: 'interval' })],
    steps: [
      { at: 333, cost: 2, expect: { allowed: true } },
      { at: 666, cost: 0.1, expect: { allowed: true } },
      { at: 766, cost: 0.3, expect: { allowed: true } },
      { at: 866, cost: 1.25, expect: { allowed: true } },
      { at: 1199, cost: 0.1, expect: { allowed: true } },
      { at: 1299, cost: 2, expect: deny(366) },
      { at: 1664, cost: 2, op: 'check', expect: { allowed: false } },
      { at: 1665, cost: 2, expect: { allowed: true } },
    ],
  },
  {
    // 2.6 − 0.3 − 0.3 is 2.0000000000000004 while 2 alone is 2: the wait is summed the way the
    // evaluation sums, so it does not skip the event at 100 ms (it used to promise 390 ms).
    name: 'sliding log, fractional costs: the call fits exactly when promised',
    policies: [slidingLog({ limit: 3, windowMs: 400 })],
    steps: [
      { at: 0, cost: 0.3, expect: { allowed: true } },
      { at: 100, cost: 0.3, expect: { allowed: true } },
      { at: 200, cost: 2, expect: { allowed: true } },
      { at: 210, cost: 1, expect: deny(290) },
      { at: 499.999, cost: 1, op: 'check', expect: { allowed: false } },
      { at: 500, cost: 1, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'reservations: maxDelayMs books capacity ahead and says when to proceed',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, maxDelayMs: 250, expect: { allowed: true, delayMs: null } },
      { at: 0, maxDelayMs: 250, expect: { allowed: true, delayMs: 100, remaining: 0 } },
      { at: 0, maxDelayMs: 250, expect: { allowed: true, delayMs: 200 } },
      { at: 0, maxDelayMs: 250, expect: deny(50) },
      { at: 0, expect: deny(300) },
      { at: 300, expect: { allowed: true, delayMs: null } },
    ],
  },
  {
    name: 'cancelling a reservation gives its slot back while nothing was booked behind it',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, maxDelayMs: 1000, expect: { allowed: true, delayMs: null } },
      { at: 0, maxDelayMs: 1000, expect: { allowed: true, delayMs: 100 } },
      { at: 0, maxDelayMs: 1000, expect: { allowed: true, delayMs: 200, resetAfterMs: 300 } },
      // Step 3 was booked behind step 2: giving step 2's slot back would let a caller run beside step 3.
      { at: 50, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 50, op: 'status', expect: { remaining: 0, resetAfterMs: 250 } },
      { at: 50, op: 'cancel', cancels: 3, expect: { cancelled: true } },
      { at: 50, op: 'status', expect: { remaining: 0, resetAfterMs: 150 } },
      // In reverse order everything comes back.
      { at: 50, op: 'cancel', cancels: 2, expect: { cancelled: true } },
      { at: 50, op: 'status', expect: { remaining: 0, resetAfterMs: 50 } },
      { at: 50, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 50, maxDelayMs: 1000, expect: { allowed: true, delayMs: 50, resetAfterMs: 150 } },
      // Admitted at once: nothing was booked ahead, nothing to give back.
      { at: 50, op: 'cancel', cancels: 1, expect: { cancelled: false } },
    ],
  },
  {
    name: 'cancelling a reservation that has come due gives nothing back',
    policies: [tokenBucket({ capacity: 1, refillAmount: 10, refillIntervalMs: 1000 })],
    steps: [
      { at: 0, expect: { allowed: true } },
      { at: 0, maxDelayMs: 500, expect: { allowed: true, delayMs: 100 } },
      { at: 99.999, op: 'cancel', cancels: 2, expect: { cancelled: true } },
      { at: 99.999, maxDelayMs: 500, expect: { allowed: true, delayMs: 1 } },
      { at: 100, op: 'cancel', cancels: 4, expect: { cancelled: false } },
      { at: 100, op: 'status', expect: { remaining: 0, resetAfterMs: 100 } },
    ],
  },
  {
    name: 'cancelling a queued call of a leaky bucket in queue mode frees its place in the queue',
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 1, mode: 'queue' })],
    steps: [
      { at: 0, repeat: 3, expectEach: [null, 1000, 2000].map((delayMs) => ({ allowed: true, delayMs })) },
      { at: 0, expect: deny(1000) },
      { at: 500, op: 'cancel', cancels: 3, expect: { cancelled: true } },
      { at: 500, expect: { allowed: true, delayMs: 1500 } },
      { at: 500, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 1000, op: 'cancel', cancels: 6, expect: { cancelled: true } },
      { at: 1000, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 1000, expect: { allowed: true, delayMs: 1000 } },
    ],
  },
  {
    name: 'keys are data: similar-looking keys never share state',
    policies: [fixedWindow({ limit: 1, windowMs: 1000 })],
    steps: [
      ...[
        'a',
        'a:b',
        'a}:b',
        '{a}',
        '%7B',
        '#',
        '#a',
        '\u0000',
        '\ud800',
        '\udc00',
        'ключ 🔑',
        'a'.repeat(201),
        'a'.repeat(202),
      ].map((key) => ({ at: 0, key, expect: { allowed: true } })),
      { at: 0, key: 'a}:b', expect: deny(1000) },
      { at: 0, key: '\ud800', expect: deny(1000) },
      { at: 0, key: 'a'.repeat(202), expect: deny(1000) },
    ],
  },
];
