import { meterCharge } from './meter.js';
import type { Policy } from './policy.js';

/**
 * The numeric form every store runs. `kind` picks the algorithm; `a`, `b`, `c` are its parameters,
 * already in integer microseconds (or µs per unit of cost), so Lua and SQL receive exactly the
 * doubles the TypeScript model uses and never divide on their own.
 *
 * | kind | algorithm                            | a                  | b                      | c                    |
 * |------|--------------------------------------|--------------------|------------------------|----------------------|
 * | 1    | meter: GCRA, continuous token bucket, leaky bucket | T: whole µs per unit of cost | τ: tolerance, whole µs (the charge of `burst`) | 1 = queue mode |
 * | 2    | token bucket, interval refill        | refill amount      | interval, µs           | –                    |
 * | 3    | fixed window                         | window, µs         | 1 = count denied       | 1 = first-request aligned |
 * | 4    | sliding-window counter               | window, µs         | –                      | –                    |
 * | 5    | sliding log                          | window, µs         | minimum gap, µs (0 off)| 1 = count denied     |
 */
export interface CompiledPolicy {
  readonly policy: Policy;
  readonly name: string;
  readonly kind: Kind;
  /** Largest cost admitted at once: GCRA's burst, a bucket's capacity, a window's limit. */
  readonly limit: number;
  /** Penalty once denied, µs; 0 when off. */
  readonly blockUs: number;
  readonly a: number;
  readonly b: number;
  readonly c: number;
}

export const KIND_METER = 1;
export const KIND_TOKEN_INTERVAL = 2;
export const KIND_FIXED_WINDOW = 3;
export const KIND_SLIDING_WINDOW = 4;
export const KIND_SLIDING_LOG = 5;
export type Kind = 1 | 2 | 3 | 4 | 5;

const cache = new WeakMap<Policy, CompiledPolicy>();

/** Microseconds in a duration given in milliseconds, rounded to the nearest microsecond. */
export function toUs(ms: number): number {
  return Math.round(ms * 1000);
}

/**
 * The meter's emission interval in whole µs. Time is integer µs everywhere, so a rate whose interval is
 * not a whole number of µs (3 per second: 333 333.3 µs) is rounded *up* (333 334 µs): never more than
 * the policy allows, at most 1 µs per interval less. Results within 1e-9 of a whole number (1e6 / (1000 /
 * 2 592 000)) are taken as that number, so decimal inputs do not lose a µs to binary rounding.
 */
export function wholeUsUp(x: number): number {
  const nearest = Math.round(x);
  return Math.abs(x - nearest) <= 1e-9 * Math.max(1, x) ? nearest : Math.ceil(x);
}

function meter(
  base: Omit<CompiledPolicy, 'kind' | 'limit' | 'a' | 'b' | 'c'>,
  intervalUs: number,
  burst: number,
  queue: boolean,
): CompiledPolicy {
  const t = wholeUsUp(intervalUs);
  // τ is what a call of cost `burst` is charged, rounded as every charge is (meterCharge): a cost equal to
  // the burst always fits a fresh key, even when burst · T is not a whole number of µs (1.5 per second:
  // T = 666 667 µs, burst · T = 1 000 000.5 µs, τ = 1 000 001 µs). That is at most 1 µs more tolerance.
  return { ...base, kind: KIND_METER, limit: burst, a: t, b: meterCharge(burst, t), c: queue ? 1 : 0 };
}

/** Compiles a policy into its numeric form (memoized per policy object). */
export function compilePolicy(policy: Policy): CompiledPolicy {
  let compiled = cache.get(policy);
  if (compiled === undefined) {
    compiled = build(policy);
    cache.set(policy, compiled);
  }
  return compiled;
}

function build(policy: Policy): CompiledPolicy {
  const base = { policy, name: policy.name, blockUs: toUs(policy.blockMs) };
  switch (policy.algorithm) {
    case 'gcra':
      // Emission interval T: one unit of cost every T µs; up to `burst` units may be owed at once.
      return meter(base, toUs(policy.periodMs) / policy.limit, policy.burst, false);
    case 'token-bucket': {
      const intervalUs = toUs(policy.refillIntervalMs);
      if (policy.refill === 'interval') {
        return {
          ...base,
          kind: KIND_TOKEN_INTERVAL,
          limit: policy.capacity,
          a: policy.refillAmount,
          b: intervalUs,
          c: 0,
        };
      }
      // A continuously refilled token bucket is the same machine as GCRA: the tokens missing from a
      // full bucket are the time owed, divided by T.
      return meter(base, intervalUs / policy.refillAmount, policy.capacity, false);
    }
    case 'leaky-bucket':
      // The level of a drip-free leaky bucket, divided by the leak rate, is again the time owed.
      return meter(base, 1e6 / policy.leakPerSecond, policy.capacity, policy.mode === 'queue');
    case 'fixed-window':
      return {
        ...base,
        kind: KIND_FIXED_WINDOW,
        limit: policy.limit,
        a: toUs(policy.windowMs),
        b: policy.countDenied ? 1 : 0,
        c: policy.align === 'first-request' ? 1 : 0,
      };
    case 'sliding-window':
      return { ...base, kind: KIND_SLIDING_WINDOW, limit: policy.limit, a: toUs(policy.windowMs), b: 0, c: 0 };
    case 'sliding-log':
      return {
        ...base,
        kind: KIND_SLIDING_LOG,
        limit: policy.limit,
        a: toUs(policy.windowMs),
        b: toUs(policy.minGapMs),
        c: policy.countDenied ? 1 : 0,
      };
  }
}
