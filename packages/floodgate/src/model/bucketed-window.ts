import type { Evaluate, KindDescriptor, StateField } from './descriptor.js';
import { appendPair, firstLive, liveSum, takeFromPair, waitToFit } from './pairs.js';
import { admit, deny, type State } from './types.js';

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
export const evaluateBucketedWindow: Evaluate = (c, s, nowUs, cost, _maxDelayUs, out) => {
  const limit = c.limit;
  const window = c.a;
  const current = nowUs - (nowUs % c.b);
  // A bucket starting at t is in the window while t > current − window.
  const first = firstLive(s, current - window);
  const sum = liveSum(s, first);
  // The newest bucket that counts leaves the window last: the key is untouched from then on.
  const length = s === undefined ? 0 : s.length;
  const untouched = length > first ? ((s as State)[length - 2] as number) + window - nowUs : 0;
  if (sum + cost <= limit) {
    const next = cost === 0 ? undefined : appendPair(s, first, current, cost);
    admit(out, limit - (sum + cost), limit, cost > 0 ? current + window - nowUs : untouched, next);
  } else {
    // Some bucket must leave: the call does not fit, and a cost above the limit never gets here.
    deny(out, limit - sum, limit, waitToFit(s as State, first, cost, limit, window, nowUs), untouched);
  }
};

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
  refund: (c, s, _nowUs, leasedAtUs, _leased, unused) => takeFromPair(s, leasedAtUs - (leasedAtUs % c.b), unused),
  leaseRefusal: () => undefined,
  countsDenied: () => false,
  read(c, s, nowUs) {
    const current = nowUs - (nowUs % c.b);
    const first = firstLive(s, current - c.a);
    const length = s === undefined ? 0 : s.length;
    const used = liveSum(s, first);
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
