import type { CompiledPolicy } from './compile.js';
import type { KindDescriptor, StateField } from './descriptor.js';
import { clampRemaining, type Evaluation, type State } from './types.js';

/**
 * Bucketed ("rollup") window: counts kept per bucket of `precision` µs (`b`), aligned to the clock, and
 * summed over the `window / precision` buckets (`a / b`) that end with the one holding `now`: per-second
 * counts summed over a minute. No weighting: a bucket counts whole until it leaves the window, all at once.
 * With one bucket per window it is the clock-aligned fixed window, decision for decision.
 *
 * State: `[blockedUntil, t1, count1, t2, count2, …]`, the buckets' starts (µs, multiples of the precision)
 * and counts, oldest first, only buckets that hold something. Each write keeps only the buckets still in
 * the window, so a key holds at most `window / precision` buckets (at most 1000, see slidingWindow).
 *
 * Sums run newest first, and a wait walks back from the newest bucket with that same running sum: the
 * first bucket whose count no longer fits beside the newer ones must leave the window, and once it has, the
 * evaluation sums exactly those newer ones. So `retryAfter` is exact: the call fits then, not a µs earlier.
 */
export function evaluateBucketedWindow(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  _maxDelayUs: number,
  out: Evaluation,
): void {
  const limit = c.limit;
  const window = c.a;
  const current = nowUs - (nowUs % c.b);
  // A bucket starting at t is in the window while t > current − window.
  const first = firstLive(s, current - window);
  const length = s === undefined ? 0 : s.length;
  let sum = 0;
  for (let i = length - 1; i > first; i -= 2) sum += (s as State)[i] as number;
  // The newest bucket that counts leaves the window last: the key is untouched from then on.
  const untouched = length > first ? ((s as State)[length - 2] as number) + window - nowUs : 0;
  out.delayUs = 0;
  if (sum + cost <= limit) {
    out.allowed = true;
    out.reason = 'ok';
    out.remaining = clampRemaining(limit - (sum + cost), limit);
    out.retryAfterUs = 0;
    out.resetAfterUs = cost > 0 ? current + window - nowUs : untouched;
    out.next = cost === 0 ? undefined : charge(s, first, current, cost);
  } else {
    out.allowed = false;
    out.reason = 'limit';
    out.remaining = clampRemaining(limit - sum, limit);
    out.retryAfterUs = bucketWait(s as State, first, cost, limit, window, nowUs);
    out.resetAfterUs = untouched;
    out.next = undefined;
  }
}

/** Index of the first bucket still in the window (its start is above `cutoff`); entries start at 1. */
function firstLive(s: State | undefined, cutoff: number): number {
  if (s === undefined) return 1;
  let i = 1;
  while (i < s.length && (s[i] as number) <= cutoff) i += 2;
  return i;
}

/** The buckets still in the window, with `cost` added to the current one (a new bucket when it has none yet). */
function charge(s: State | undefined, first: number, current: number, cost: number): number[] {
  const next: number[] = [0];
  const length = s === undefined ? 0 : s.length;
  for (let i = first; i < length; i++) next.push((s as State)[i] as number);
  if (next.length > 1 && next[next.length - 2] === current) {
    next[next.length - 1] = (next[next.length - 1] as number) + cost;
  } else {
    next.push(current, cost);
  }
  return next;
}

/**
 * µs until enough of the oldest buckets have left the window for `cost` to fit: from the newest bucket
 * back, the first one whose count no longer fits beside the newer ones leaves at its start + window.
 * (Some bucket does: the call does not fit, and a cost above the limit never gets here.)
 */
function bucketWait(s: State, first: number, cost: number, limit: number, window: number, nowUs: number): number {
  let newer = 0;
  for (let i = s.length - 2; i >= first; i -= 2) {
    newer += s[i + 1] as number;
    if (newer + cost > limit) return (s[i] as number) + window - nowUs;
  }
  return (s[s.length - 2] as number) + window - nowUs;
}

/**
 * The bucketed window. State `[blockedUntil, t1, count1, t2, count2, …]`, at most `window / precision`
 * pairs.
 *
 * Refund: the bucket the lease was counted in (the one holding the grant's µs) loses the units, and goes
 * when nothing is left of it; once it has left the window, nothing is given back.
 */
export const BUCKETED_WINDOW: KindDescriptor<6, 'bucketed-window'> = {
  id: 6,
  name: 'bucketed-window',
  tag: 'b',
  layout: { pairs: ['bucketStart', 'count'], maxPairs: (c) => c.a / c.b },
  params: { a: 'window, µs', b: 'precision (bucket width), µs', c: '–' },
  flags: {},
  capacity: 'count',
  leaseEndsAtReset: true,
  evaluate: evaluateBucketedWindow,
  refund(c, s, _nowUs, leasedAtUs, _leased, unused) {
    const bucket = leasedAtUs - (leasedAtUs % c.b);
    for (let i = 1; i < s.length; i += 2) {
      if (s[i] !== bucket) continue;
      const left = (s[i + 1] as number) - unused;
      const next = [...s];
      if (left > 0) next[i + 1] = left;
      else next.splice(i, 2);
      return next;
    }
    return undefined;
  },
  leaseRefusal: () => undefined,
  countsDenied: () => false,
  read(c, s, nowUs) {
    const current = nowUs - (nowUs % c.b);
    const first = firstLive(s, current - c.a);
    const length = s === undefined ? 0 : s.length;
    let used = 0;
    for (let i = length - 1; i > first; i -= 2) used += (s as State)[i] as number;
    const fields: StateField[] = [
      { label: 'current bucket', value: current, unit: 'time' },
      { label: 'buckets counted', value: (length - first) / 2, unit: 'number' },
    ];
    if (length > first) {
      fields.push({
        label: 'oldest counted bucket leaves',
        value: ((s as State)[first] as number) + c.a,
        unit: 'time',
      });
    }
    return { used, blockedUntilUs: s === undefined ? 0 : (s[0] as number), fields };
  },
};
