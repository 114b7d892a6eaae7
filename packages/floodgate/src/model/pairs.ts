import type { State } from './types.js';

/**
 * A state laid out as `(time, amount)` pairs oldest first after the penalty slot, `[blockedUntil, t1, a1,
 * t2, a2, …]`: the sliding log's events and the bucketed window's buckets. Both read, charge, wait and
 * refund it the same way, with these functions; the Lua and PL/pgSQL ports share their list code too
 * and repeat these operations in this order, so every store sums the same doubles.
 */

/** Index of the first live pair's time (its time is above `cutoff`); pairs start at 1. */
export function firstLive(s: State | undefined, cutoff: number): number {
  if (s === undefined) return 1;
  let i = 1;
  while (i < s.length && (s[i] as number) <= cutoff) i += 2;
  return i;
}

/**
 * The amounts of the pairs from `first` on, summed newest first: the sum that {@link waitToFit} reaches
 * when only the newer pairs are left is then bit for bit the sum an evaluation computes once the older
 * ones have gone.
 */
export function liveSum(s: State | undefined, first: number): number {
  const length = s === undefined ? 0 : s.length;
  let sum = 0;
  for (let i = length - 1; i > first; i -= 2) sum += (s as State)[i] as number;
  return sum;
}

/** A new list: the pairs from `first` on, then `(at, amount)`; a pair at the newest pair's time is merged. */
export function appendPair(s: State | undefined, first: number, at: number, amount: number): number[] {
  const next: number[] = [0];
  const length = s === undefined ? 0 : s.length;
  for (let i = first; i < length; i++) next.push((s as State)[i] as number);
  if (next.length > 1 && next[next.length - 2] === at) {
    next[next.length - 1] = (next[next.length - 1] as number) + amount;
  } else {
    next.push(at, amount);
  }
  return next;
}

/**
 * µs until enough of the oldest pairs have left a window of `window` µs for `cost` to fit under `limit`.
 * Walks from the newest pair back, summing in the evaluation's order: the first pair whose amount no
 * longer fits beside the newer ones must leave the window (at its time + window), and once it has, the
 * evaluation sums exactly those newer ones. So the call fits exactly when promised, not a µs earlier.
 * Called only when the call does not fit now.
 */
export function waitToFit(s: State, first: number, cost: number, limit: number, window: number, nowUs: number): number {
  let newer = 0;
  for (let i = s.length - 2; i >= first; i -= 2) {
    newer += s[i + 1] as number;
    if (newer + cost > limit) return (s[i] as number) + window - nowUs;
  }
  // Not reached when the live pairs alone leave no room; the list is empty once the newest leaves.
  return (s[s.length - 2] as number) + window - nowUs;
}

/**
 * The state with `amount` taken off the pair at time `at` (the pair goes when nothing is left of it), or
 * undefined when no pair has that time: a refund.
 */
export function takeFromPair(s: State, at: number, amount: number): State | undefined {
  for (let i = 1; i < s.length; i += 2) {
    if (s[i] !== at) continue;
    const left = (s[i + 1] as number) - amount;
    const next = [...s];
    if (left > 0) next[i + 1] = left;
    else next.splice(i, 2);
    return next;
  }
  return undefined;
}
