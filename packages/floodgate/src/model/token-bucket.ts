import type { CompiledPolicy } from './compile.js';
import { clampRemaining, type Evaluation, nextState3, type State } from './types.js';

/**
 * What is left of `used` once `m` intervals have refilled it, relative to the capacity: float dust
 * (0.1 + 0.2 − 0.3 = 5.6e-17) is not a debt. Anything at or below this share of the capacity is an
 * empty bucket. Ports compute `capacity * 1e-12` and compare with `<=` the same way.
 */
export const TOKEN_DUST = 1e-12;

/** Nudges of the closed-form interval count, each way: it is off by one at most, outside absurd rates. */
const MAX_NUDGES = 4;

/**
 * Token bucket with interval refill: the bucket starts full and `refillAmount` tokens come back at each
 * interval boundary. State is what has been used and the anchor the intervals count from; the anchor is
 * the moment the bucket last left its full state, so a full bucket is the same as an untouched key.
 * (The continuous token bucket runs on the meter; see meter.ts.)
 *
 * `used` is a double (fractional costs and refills), so it carries dust. Two rules keep every answer
 * exact anyway, in every port:
 * - after a refill, what is left at or below `capacity · TOKEN_DUST` is taken as 0 (the bucket is full);
 * - a wait (`retryAfter`, `resetAfter`) is a whole number of intervals after the *stored* anchor, found
 *   by asking the same question the evaluation at that moment will ask (`used − m · refill`, snapped,
 *   plus the cost, against the capacity) instead of dividing: so the call fits exactly when promised,
 *   and not one interval earlier.
 */
export function evaluateTokenInterval(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  _maxDelayUs: number,
  out: Evaluation,
): void {
  const capacity = c.limit;
  const refill = c.a;
  const interval = c.b;
  const dust = capacity * TOKEN_DUST;
  let used = 0;
  let anchor = nowUs;
  if (s !== undefined && (s[1] as number) > 0) {
    used = s[1] as number;
    anchor = s[2] as number;
    const intervals = Math.floor((nowUs - anchor) / interval);
    if (intervals > 0) {
      used = used - intervals * refill;
      anchor = anchor + intervals * interval;
      if (used <= dust) {
        used = 0;
        anchor = nowUs;
      }
    }
  }
  const after = used + cost;
  out.delayUs = 0;
  if (after <= capacity) {
    out.allowed = true;
    out.reason = 'ok';
    out.remaining = clampRemaining(capacity - after, capacity);
    out.retryAfterUs = 0;
    if (cost > 0) {
      // The state stored is (after, anchor): the bucket is full once it has refilled `after`.
      out.resetAfterUs = anchor + intervalsUntil(after, 0, 0, refill, dust) * interval - nowUs;
      out.next = nextState3(out, 0, after, anchor);
    } else {
      out.resetAfterUs = used > 0 ? untilFull(s as State, refill, interval, dust, nowUs) : 0;
      out.next = undefined;
    }
  } else {
    // Denied: the stored state holds `used` (a bucket that had emptied always admits a cost it can hold).
    const st = s as State;
    out.allowed = false;
    out.reason = 'limit';
    out.remaining = clampRemaining(capacity - used, capacity);
    out.retryAfterUs =
      (st[2] as number) + intervalsUntil(st[1] as number, cost, capacity, refill, dust) * interval - nowUs;
    out.resetAfterUs = untilFull(st, refill, interval, dust, nowUs);
    out.next = undefined;
  }
}

/** µs until the stored state `s` (which still holds more than dust) has refilled completely. */
function untilFull(s: State, refill: number, interval: number, dust: number, nowUs: number): number {
  return (s[2] as number) + intervalsUntil(s[1] as number, 0, 0, refill, dust) * interval - nowUs;
}

/**
 * The fewest whole intervals `m ≥ 1` after a state holding `used` for which the evaluation admits `cost`
 * against `target` (`capacity` for a call; 0 with cost 0 for a full bucket): `left + cost ≤ target`,
 * where `left = used − m · refill`, and 0 when that is at most `dust`. Starts from the closed form and
 * nudges it with the very test the evaluation runs (the test only ever passes more as `m` grows).
 */
export function intervalsUntil(used: number, cost: number, target: number, refill: number, dust: number): number {
  let m = Math.max(1, Math.ceil((used + cost - target) / refill));
  for (let k = 0; k < MAX_NUDGES && m > 1 && fitsAfter(used, m - 1, cost, target, refill, dust); k++) m--;
  for (let k = 0; k < MAX_NUDGES && !fitsAfter(used, m, cost, target, refill, dust); k++) m++;
  return m;
}

/** The evaluation's test after `m ≥ 1` refills of a state holding `used`. */
function fitsAfter(used: number, m: number, cost: number, target: number, refill: number, dust: number): boolean {
  let left = used - m * refill;
  if (left <= dust) left = 0;
  return left + cost <= target;
}
