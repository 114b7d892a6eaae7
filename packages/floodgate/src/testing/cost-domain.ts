import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { isFloodgateError } from '../errors.js';
import { createLimiter } from '../limiter/limiter.js';
import { compilePolicy } from '../model/compile.js';
import { MAX_COST, MIN_COST } from '../model/cost.js';
import type { Decision } from '../model/decision.js';
import {
  fixedWindow,
  gcra,
  leakyBucket,
  MAX_DURATION_US,
  MAX_LIMIT,
  MAX_SLIDING_LOG_LIMIT,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../model/policy.js';
import type { Store } from '../stores/store.js';
import { manualClock } from './manual-clock.js';
import { modelStore } from './model-store.js';

/** The longest duration a policy takes, ms. */
const MAX_MS = MAX_DURATION_US / 1000;

/** The next double above `x` (x > 0). */
function nextAbove(x: number): number {
  const bits = new BigInt64Array(new Float64Array([x]).buffer);
  bits[0] = (bits[0] as bigint) + 1n;
  return new Float64Array(bits.buffer)[0] as number;
}

/** The smallest accepted cost above `MIN_COST`: 1.0000000000000003e-9. */
const JUST_ABOVE_MIN_COST = nextAbove(MIN_COST);

/**
 * Costs at the edges of the accepted domain (0, and `MIN_COST` to `MAX_COST`): every store must decide
 * them exactly like the model. `0.1 + 0.2` is 0.30000000000000004 in binary; the others are the smallest
 * cost, the doubles just above it, a cost below one µs of any interval, and the largest costs.
 */
export const EXTREME_COSTS: readonly number[] = [
  MIN_COST,
  JUST_ABOVE_MIN_COST,
  1.5e-9,
  3e-9,
  1e-7,
  0.1 + 0.2,
  0.3,
  0.7,
  1,
  1.1,
  2 ** 31 + 0.5,
  MAX_LIMIT,
  MAX_LIMIT + 1,
  2 ** 52 + 1,
  MAX_COST,
  0,
];

/**
 * Costs the limiter refuses with `ERR_INVALID_COST` before any store is called: the smallest positive
 * double and other subnormals, the smallest normal double, numbers just outside the domain, and values
 * that are not finite numbers.
 */
export const REFUSED_COSTS: readonly unknown[] = [
  5e-324,
  4.9e-322,
  2.2250738585072014e-308,
  1e-300,
  1e-10,
  9.999999999999999e-10,
  2 ** 53,
  2 ** 53 + 2,
  1e300,
  Number.MAX_VALUE,
  -MIN_COST,
  -1,
  -0.5,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  '1',
  null,
  true,
  1n,
];

/** A table of extreme costs (and operator numbers at their extremes) run against a store and the model. */
export interface ExtremeCostTable {
  name: string;
  policies: Policy[];
  /** Costs sent in order (with `limit`, and `check` before each), each `repeat` times, time advancing `stepUs`. */
  costs: readonly number[];
  repeat: number;
  stepUs: number;
}

const all = EXTREME_COSTS;
const tiny = [MIN_COST, JUST_ABOVE_MIN_COST, 1.5e-9, 0.1 + 0.2, 1e-7, 0.3];

/** Every algorithm, with ordinary numbers and with the operator's numbers at their extremes. */
export const extremeCostTables: ExtremeCostTable[] = [
  { name: 'GCRA 5 per second', policies: [gcra({ limit: 5, periodMs: 1000 })], costs: all, repeat: 2, stepUs: 7 },
  {
    name: 'GCRA, the longest emission interval (1 per 2^47 µs): cost × T far beyond 2^53',
    policies: [gcra({ limit: 1, periodMs: MAX_MS })],
    costs: all,
    repeat: 2,
    stepUs: 1,
  },
  {
    name: 'GCRA, the shortest emission interval (1e12 per 1e9 ms: T = 1 µs) and the largest burst',
    policies: [gcra({ limit: MAX_LIMIT, periodMs: 1e9 })],
    costs: all,
    repeat: 2,
    stepUs: 3,
  },
  {
    name: 'GCRA, tiny costs accumulate',
    policies: [gcra({ limit: 1, periodMs: 1000, burst: 1 })],
    costs: tiny,
    repeat: 40,
    stepUs: 1,
  },
  {
    name: 'token bucket, continuous refill, blockMs at its longest',
    policies: [tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 1000, blockMs: MAX_MS })],
    costs: all,
    repeat: 2,
    stepUs: 11,
  },
  {
    name: 'token bucket, interval refill',
    policies: [tokenBucket({ capacity: 3, refillAmount: 0.1, refillIntervalMs: 100, refill: 'interval' })],
    costs: all,
    repeat: 3,
    stepUs: 40_000,
  },
  {
    name: 'token bucket, interval refill, the smallest refill (1e-9 per µs)',
    policies: [tokenBucket({ capacity: 1, refillAmount: MIN_COST, refillIntervalMs: 0.001, refill: 'interval' })],
    costs: all,
    repeat: 2,
    stepUs: 5,
  },
  {
    name: 'token bucket, interval refill, the longest interval',
    policies: [tokenBucket({ capacity: 2, refillAmount: 2, refillIntervalMs: MAX_MS, refill: 'interval' })],
    costs: all,
    repeat: 2,
    stepUs: 5,
  },
  {
    name: 'token bucket, interval refill, the slowest refill from empty (2^52 µs: 1e-9 per µs, capacity 4503599)',
    policies: [
      tokenBucket({ capacity: 4_503_599, refillAmount: MIN_COST, refillIntervalMs: 0.001, refill: 'interval' }),
    ],
    costs: all,
    repeat: 2,
    stepUs: 5,
  },
  {
    name: 'token bucket, interval refill, 1 a month for 1000 (82 years from empty)',
    policies: [tokenBucket({ capacity: 1000, refillAmount: 1, refillIntervalMs: 2_592_000_000, refill: 'interval' })],
    costs: all,
    repeat: 2,
    stepUs: 5,
  },
  {
    name: 'token bucket, interval refill, the largest capacity and refill',
    policies: [
      tokenBucket({ capacity: MAX_LIMIT, refillAmount: MAX_LIMIT, refillIntervalMs: 0.001, refill: 'interval' }),
    ],
    costs: all,
    repeat: 2,
    stepUs: 1,
  },
  {
    name: 'leaky bucket meter, the slowest leak',
    policies: [leakyBucket({ capacity: 1, leakPerSecond: 1e6 / MAX_DURATION_US })],
    costs: all,
    repeat: 2,
    stepUs: 13,
  },
  {
    name: 'leaky bucket queue',
    policies: [leakyBucket({ capacity: 4, leakPerSecond: 2.5, mode: 'queue' })],
    costs: all,
    repeat: 2,
    stepUs: 100_000,
  },
  {
    name: 'fixed window, tiny costs accumulate',
    policies: [fixedWindow({ limit: 1, windowMs: 1000 })],
    costs: tiny,
    repeat: 40,
    stepUs: 1,
  },
  {
    name: 'fixed window, the largest limit and longest window',
    policies: [fixedWindow({ limit: MAX_LIMIT, windowMs: MAX_MS, align: 'first-request', blockMs: MAX_MS })],
    costs: all,
    repeat: 2,
    stepUs: 17,
  },
  {
    // Every cost counts, the largest ones too: the count stops at MAX_COST, exactly, in every store.
    name: 'fixed window counting every call, the largest limit and longest window',
    policies: [fixedWindow({ limit: MAX_LIMIT, windowMs: MAX_MS, countDenied: true })],
    costs: all,
    repeat: 3,
    stepUs: 17,
  },
  {
    name: 'sliding-window counter',
    policies: [slidingWindow({ limit: 2, windowMs: 1000 })],
    costs: all,
    repeat: 3,
    stepUs: 350_000,
  },
  {
    name: 'sliding-window counter, the largest limit, the shortest window',
    policies: [slidingWindow({ limit: MAX_LIMIT, windowMs: 0.001 })],
    costs: all,
    repeat: 2,
    stepUs: 1,
  },
  {
    name: 'bucketed window',
    policies: [slidingWindow({ limit: 2, windowMs: 1000, precisionMs: 250 })],
    costs: all,
    repeat: 3,
    stepUs: 200_000,
  },
  {
    // The longest window of whole ms under MAX_DURATION_US, in 1000 buckets of 140 737 488 355 µs.
    name: 'bucketed window, the largest limit, the longest window in its most buckets',
    policies: [
      slidingWindow({ limit: MAX_LIMIT, windowMs: 140_737_488_355, precisionMs: 140_737_488.355, blockMs: MAX_MS }),
    ],
    costs: all,
    repeat: 2,
    stepUs: 17,
  },
  {
    name: 'sliding log',
    policies: [slidingLog({ limit: 2, windowMs: 1000 })],
    costs: all,
    repeat: 2,
    stepUs: 100_000,
  },
  {
    name: 'sliding log counting denied attempts, the largest limit and the longest window',
    policies: [slidingLog({ limit: MAX_SLIDING_LOG_LIMIT, windowMs: MAX_MS, countDenied: true })],
    costs: all,
    repeat: 1,
    stepUs: 1,
  },
  {
    name: 'every algorithm at once, all-or-nothing',
    policies: [
      gcra({ limit: 10, periodMs: 1000, name: 'g' }),
      tokenBucket({ capacity: 10, refillAmount: 1, refillIntervalMs: 100, refill: 'interval', name: 'ti' }),
      fixedWindow({ limit: 10, windowMs: 1000, name: 'fw' }),
      slidingWindow({ limit: 10, windowMs: 1000, name: 'sw' }),
      slidingLog({ limit: 10, windowMs: 1000, name: 'log' }),
    ],
    costs: all,
    repeat: 2,
    stepUs: 1000,
  },
];

/** Midnight UTC, 1 January 2030 (as the algorithm tables). */
const START_MS = Date.UTC(2030, 0, 1);

/**
 * Runs a table through the store and through the reference model, asserting every decision identical:
 * for each cost, a `check`, then `repeat` × `limit`, then a `status`, time advancing `stepUs` between calls.
 */
export async function runExtremeCostTable(store: Store, table: ExtremeCostTable, prefix: string): Promise<void> {
  const clock = manualClock({ startMs: START_MS });
  const subject = createLimiter({ store, policies: table.policies, clock, prefix });
  const reference = createLimiter({ store: modelStore(), policies: table.policies, clock, prefix });
  let call = 0;
  const compare = (got: Decision, want: Decision, what: string) =>
    deepStrictEqual(got, want, `${table.name}: call ${call} (${what}) at ${clock.nowUs()} µs`);
  const resolution = Math.max(...table.policies.map((p) => compilePolicy(p).resolution));
  for (const cost of table.costs) {
    call++;
    if (cost > 0 && cost < resolution) {
      // Below a policy's resolution: refused before any store, by the limiter over either store.
      for (const limiter of [subject, reference]) {
        const refusal = await limiter.limit('k', { cost }).then(
          () => undefined,
          (error: unknown) => (isFloodgateError(error) ? error.code : error),
        );
        strictEqual(refusal, 'ERR_INVALID_COST', `${table.name}: cost ${cost} below the resolution ${resolution}`);
      }
      continue;
    }
    compare(await subject.check('k', { cost }), await reference.check('k', { cost }), `check cost ${cost}`);
    for (let i = 0; i < table.repeat; i++) {
      call++;
      clock.advanceUs(table.stepUs);
      compare(await subject.limit('k', { cost }), await reference.limit('k', { cost }), `limit cost ${cost}`);
    }
    call++;
    compare(await subject.status('k'), await reference.status('k'), `status after cost ${cost}`);
  }
}

/** Counts the calls that reach a store (a pass-through wrapper: the store itself answers them). */
export function countingStore(store: Store): { store: Store; calls: () => number } {
  let calls = 0;
  const counted: Store = {
    name: store.name,
    hasOwnClock: store.hasOwnClock,
    decide: (request) => {
      calls++;
      return store.decide(request);
    },
    reset: (prefix, key, policies) => {
      calls++;
      return store.reset(prefix, key, policies);
    },
  };
  return { store: counted, calls: () => calls };
}

/**
 * Sends every refused cost through `limit`, `check` and `acquire`, and asserts each is refused with
 * `ERR_INVALID_COST` naming the option, and that the store was never called.
 */
export async function runRefusedCosts(store: Store, prefix: string): Promise<void> {
  const counted = countingStore(store);
  const clock = manualClock({ startMs: START_MS });
  const limiter = createLimiter({
    store: counted.store,
    policies: [gcra({ limit: 3, periodMs: 60_000 })],
    clock,
    prefix,
    failure: 'open',
  });
  for (const cost of REFUSED_COSTS) {
    for (const method of ['limit', 'check', 'acquire'] as const) {
      let code: unknown;
      let option: unknown;
      try {
        await limiter[method]('k', { cost: cost as number });
      } catch (error) {
        code = isFloodgateError(error) ? error.code : error;
        option = isFloodgateError(error) ? error.option : undefined;
      }
      deepStrictEqual([code, option], ['ERR_INVALID_COST', 'cost'], `${method} with cost ${String(cost)}`);
    }
  }
  strictEqual(counted.calls(), 0, 'no refused cost reaches the store');
  strictEqual(limiter.breakerState, 'closed');
}
