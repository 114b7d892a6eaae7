import { describeValue, FloodgateError } from '../errors.js';

/**
 * The smallest positive cost: 1e-9. Below it a cost is refused (`ERR_INVALID_COST`): the stores would
 * no longer agree. A product such as `cost · T` of a subnormal cost underflows in PostgreSQL (an error
 * there, a zero in JavaScript and Lua), and a sum of such costs is lost in rounding. Count in smaller
 * units instead (cost 1 per nanounit, a limit 1e9 times larger).
 */
export const MIN_COST = 1e-9;

/**
 * The largest cost: 2^53 − 1 (`Number.MAX_SAFE_INTEGER`), the largest integer every store's arithmetic
 * (JavaScript, Lua, PostgreSQL `float8`) holds exactly.
 */
export const MAX_COST = Number.MAX_SAFE_INTEGER;

/**
 * Validates a cost: 0 (a check), or a finite number from {@link MIN_COST} to {@link MAX_COST}. Anything
 * else (NaN, ±Infinity, a negative, a subnormal or other number below `MIN_COST`, a number above
 * `MAX_COST`, a non-number) is refused with `ERR_INVALID_COST` naming `option` and the value, so that
 * every cost that reaches a store is decided identically by all of them. The one validator of costs:
 * the limiter, leases, `acquire`, `throttle`, the HTTP middleware and the service all use it.
 */
export function validateCost(cost: unknown, option = 'cost'): number {
  if (typeof cost !== 'number' || !(cost === 0 || (cost >= MIN_COST && cost <= MAX_COST))) {
    throw new FloodgateError(
      'ERR_INVALID_COST',
      `${option} must be 0 or a finite number from ${MIN_COST} to ${MAX_COST}, got ${describeValue(cost)}`,
      { option },
    );
  }
  return cost;
}

/**
 * The spacing of doubles at `x` (x ≥ 1): `2^(e − 52)` for `x` in `[2^e, 2^(e+1))`. Every double from 0 to
 * `x` plus this much is larger than itself; half of it is lost at `x` (ties go to even).
 */
export function ulpAt(x: number): number {
  let e = Math.floor(Math.log2(x));
  // log2 may round across a power of two: settle the binade exactly.
  if (2 ** e > x) e--;
  else if (2 ** (e + 1) <= x) e++;
  return 2 ** (e - 52);
}

/**
 * The resolution of a policy that counts (`limit` the largest count it admits to): the smallest power of
 * two `r` such that `count + r > count` in a double for every count from 0 to `limit`. A cost below it
 * could be absorbed by rounding once the count is large (at a limit of 4294967295, `count + 1e-9 ===
 * count`), and admitted for ever; a cost `c ≥ r` moves every count by `c` within `r / 2` (by at least
 * half itself, and exactly when it is a multiple of `r`). Meters (GCRA, leaky and continuous token
 * buckets) charge whole µs and have none: 0.
 */
export function countResolution(limit: number): number {
  return ulpAt(limit);
}

/** What {@link checkResolution} reads of a compiled policy. */
export interface Resolved {
  readonly name: string;
  readonly limit: number;
  /** The smallest cost the policy represents ({@link countResolution}); 0: every cost. */
  readonly resolution: number;
}

/**
 * Refuses a positive cost below the resolution of any of `policies` with `ERR_INVALID_COST` naming
 * `option`, the value, the policy and its resolution: such a cost would be lost in the policy's count on
 * some store, and every store must decide a cost identically. A cost of 0 (a check) is never refused here.
 * Called by the limiter with every call's policies, before any store is called.
 */
export function checkResolution(policies: readonly Resolved[], cost: number, option = 'cost'): void {
  if (cost === 0 || cost >= 1) return; // every resolution is below 1 (MAX_LIMIT's is 2^-13)
  for (let i = 0; i < policies.length; i++) {
    const p = policies[i] as Resolved;
    if (cost < p.resolution) {
      throw new FloodgateError(
        'ERR_INVALID_COST',
        `${option} ${describeValue(cost)} is below the resolution of policy ${JSON.stringify(p.name)} (limit ${describeValue(p.limit)}): its smallest cost is ${describeValue(p.resolution)}, since a smaller one can be lost in rounding once the count is large`,
        { option },
      );
    }
  }
}
