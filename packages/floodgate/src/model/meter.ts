import type { CompiledPolicy } from './compile.js';
import { clampRemaining, type Evaluation, nextState2, type State } from './types.js';

/**
 * GCRA, the continuous token bucket and the drip-free leaky bucket are one machine, kept as a single
 * number per key: the theoretical arrival time (TAT), the moment the key will again be untouched.
 *
 * Each unit of cost pushes the TAT T µs further (T is the emission interval: one unit every T µs).
 * `TAT − now` is what the key owes; a call is admitted while what it would owe stays within the
 * tolerance τ = burst · T. In bucket words: the level is `(TAT − now) / T` and the capacity is `burst`.
 *
 * Everything here is an integer number of µs (T and τ are whole µs, see compile.ts; a fractional cost
 * is charged `ceil(cost · T)` µs), so every store computes exactly the same numbers, below 2^53.
 *
 * Queue mode (a shaper) admits on the same test but tells each call to wait until the calls before it
 * have drained (`delayUs = TAT − now`), so admitted calls leave evenly spaced.
 *
 */
export function evaluateMeter(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  maxDelayUs: number,
  out: Evaluation,
): void {
  const t = c.a;
  const tau = c.b;
  const tat = s === undefined ? nowUs : (s[1] as number);
  const base = Math.max(tat, nowUs);
  const newTat = base + meterCharge(cost, t);
  const owed = newTat - nowUs;
  const owedBefore = base - nowUs;
  const queue = c.c === 1;
  const slack = queue ? 0 : maxDelayUs;
  if (owed - tau <= slack) {
    out.allowed = true;
    out.reason = 'ok';
    out.remaining = clampRemaining((tau - owed) / t, c.limit);
    out.retryAfterUs = 0;
    out.resetAfterUs = owed;
    out.delayUs = queue ? owedBefore : owed > tau ? owed - tau : 0;
    out.next = cost === 0 ? undefined : nextState2(out, 0, newTat);
  } else {
    out.allowed = false;
    out.reason = 'limit';
    out.remaining = clampRemaining((tau - owedBefore) / t, c.limit);
    out.retryAfterUs = owed - tau - slack;
    out.resetAfterUs = owedBefore;
    out.delayUs = 0;
    out.next = undefined;
  }
}

/**
 * What a cost adds to the TAT: whole µs, rounded up. A product within a few ulps above a whole number is
 * that number: 184.58 × 2 592 000 000 is exactly 478 431 360 000 in decimal but 478 431 360 000.00006 in
 * binary, and decimal amounts that add up to a budget must fit it. (Ports repeat `x − x·1e-15`.)
 */
export function meterCharge(cost: number, t: number): number {
  const x = cost * t;
  return Math.ceil(x - x * 1e-15);
}
