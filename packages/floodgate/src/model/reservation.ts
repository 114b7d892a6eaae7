import type { CompiledPolicy } from './compile.js';
import { KIND_METER } from './kinds.js';
import { meterCharge } from './meter.js';
import type { Evaluation, State } from './types.js';

/**
 * What a call admitted with a delay (`maxDelayMs`, or a leaky bucket in queue mode) booked, so that it
 * can be cancelled: its cost, and per policy the TAT it left behind. Plain data; treat it as opaque.
 */
export interface Reservation {
  /** The booked call's cost. */
  readonly cost: number;
  /** Per policy, in call order: its name and the TAT the call set, µs on the store's clock. */
  readonly policies: readonly string[];
  readonly tatUs: readonly number[];
}

/**
 * Reservations exist for the meter algorithms only (GCRA, continuous token bucket, leaky bucket): their
 * one number per key, the TAT, is a schedule, and booking a slot ahead is pushing it further. A window or
 * a log counts what happened in a span of time: a call booked ahead would be counted in the window it
 * was booked in, not the one it runs in, so they refuse `maxDelayMs` instead of breaking their limit.
 */
export function isReservable(c: CompiledPolicy): boolean {
  return c.kind === KIND_METER;
}

/** The moment a booked call may proceed under one policy: its TAT less the tolerance (queue mode: its charge). */
function proceedAt(c: CompiledPolicy, tatUs: number, charge: number): number {
  return tatUs - (c.c === 1 ? charge : c.b);
}

/**
 * Cancels a reservation: gives back, under each policy, what that policy can give back without letting
 * later calls run closer than the rate allows. Pure: reads `states`, writes `outs[i].next` (the state to
 * store, or undefined to leave it) and `outs[i].resetAfterUs` (for its expiry). Returns true when every
 * policy gave the whole cost back.
 *
 * - Nothing comes back once the call is due (`now` ≥ the latest of its per-policy proceed times): it may
 *   have run.
 * - A policy gives back only while the call is still the last one booked on it (its TAT is the one the
 *   call set). A call booked later was scheduled behind this one; pulling the TAT back would let the
 *   next caller take a slot at the same moment as that later call. (Calls booked later that are
 *   cancelled first restore the TAT, so cancelling in reverse order gives everything back.)
 * - What comes back is exactly the call's charge: the state is what it would be had the call never been
 *   made. A penalty block in force stays.
 */
export function cancelReservation(
  policies: readonly CompiledPolicy[],
  states: readonly (State | undefined)[],
  nowUs: number,
  reservation: Reservation,
  outs: Evaluation[],
): boolean {
  let due = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < policies.length; i++) {
    const c = policies[i] as CompiledPolicy;
    if (!isReservable(c)) continue;
    const at = proceedAt(c, reservation.tatUs[i] as number, meterCharge(reservation.cost, c.a));
    if (at > due) due = at;
  }
  let all = true;
  for (let i = 0; i < policies.length; i++) {
    const c = policies[i] as CompiledPolicy;
    const s = states[i];
    const out = outs[i] as Evaluation;
    out.next = undefined;
    out.resetAfterUs = 0;
    const tat = reservation.tatUs[i] as number;
    // A window or a log beside a queue-mode bucket counted the call where it was admitted: it stays.
    if (!isReservable(c) || nowUs >= due || s === undefined || s[1] !== tat) {
      all = false;
      continue;
    }
    const blockedUntil = s[0] as number;
    const back = tat - meterCharge(reservation.cost, c.a);
    out.next = [blockedUntil, back];
    out.resetAfterUs = Math.max(0, back - nowUs, blockedUntil - nowUs);
  }
  return all;
}
