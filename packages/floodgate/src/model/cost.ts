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
