import { FloodgateError, invalid } from '../../errors.js';

/**
 * Checks a request's `nowUs` for a store that reads its own clock when the request carries none: either
 * `undefined`, or a whole number of µs since the epoch within 2^53, the only times every store computes
 * on exactly (Lua and SQL included). Refuses anything else with `ERR_INVALID_OPTION` naming
 * `clock.nowUs()`, before any store is called.
 */
export function checkNowUs(nowUs: number | undefined): number | undefined {
  if (nowUs === undefined || (Number.isSafeInteger(nowUs) && nowUs >= 0)) return nowUs;
  throw invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of µs since the epoch');
}

/**
 * The time a store without a clock of its own decides at: the request's `nowUs`, checked as
 * {@link checkNowUs} does. A limiter always passes one to such a store (`hasOwnClock: false`); a request
 * without it (a store called directly) is refused with `ERR_INVALID_OPTION`.
 */
export function callerNowUs(storeName: string, nowUs: number | undefined): number {
  if (nowUs === undefined) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `the ${storeName} store has no clock of its own: a request must carry the caller’s (nowUs)`,
      { option: 'nowUs' },
    );
  }
  return checkNowUs(nowUs) as number;
}

/**
 * When a stored state may be forgotten: the moment it is untouched again (`nowUs + resetAfterUs`, the
 * `resetAfterUs` of the evaluation that produced it), rounded up to a multiple of `grainUs`. A state kept
 * past that moment decides exactly like no state, so an expiry may be late, never early: round up.
 * A coarse grain (the SQL stores keep minutes) lets a busy key keep one expiry across many writes.
 */
export function expiryOf(nowUs: number, resetAfterUs: number, grainUs = 1): number {
  return Math.ceil((nowUs + resetAfterUs) / grainUs) * grainUs;
}
