import { describeValue, FloodgateError } from '../errors.js';
import type { AlgorithmDescriptor, PolicyBase, PolicyBaseOptions } from './algorithm.js';
import { windowQuota } from './algorithm.js';
import { BUCKETED_WINDOW } from './bucketed-window.js';
import type { CompiledNumbers, Evaluate, KindDescriptor } from './descriptor.js';
import { count, duration, nameDuration, optionalDuration, toUs, trimNumber } from './fields.js';
import { admit, deny, nextState4, type State } from './types.js';

/**
 * Sliding window. Without `precisionMs`, a counter: the current window's count plus the previous one's,
 * weighted by overlap. With it, bucketed ("rollup"): counts per clock-aligned bucket of `precisionMs`,
 * summed over the `windowMs / precisionMs` buckets that end with the current one.
 */
export interface SlidingWindowPolicy extends PolicyBase {
  readonly algorithm: 'sliding-window';
  readonly limit: number;
  readonly windowMs: number;
  /**
   * Width of the buckets counts are kept in, ms: `windowMs` must be a whole multiple of it, at most
   * {@link MAX_WINDOW_BUCKETS} times. Absent: the weighted two-window counter.
   */
  readonly precisionMs?: number;
}

/** Options of {@link slidingWindow}. */
export interface SlidingWindowOptions extends PolicyBaseOptions {
  limit: number;
  windowMs: number;
  /** Bucketed window: counts per bucket of this many ms, summed over the window (see {@link SlidingWindowPolicy.precisionMs}). */
  precisionMs?: number;
}

/**
 * Most buckets of a bucketed window (`windowMs / precisionMs`). A key keeps a count per bucket that holds
 * something, and one decision sums them: like the sliding log's largest limit, this bounds a key's state
 * (about 20 kB in Redis) and a decision's work (docs/algorithms.md, "Bounds per key").
 */
export const MAX_WINDOW_BUCKETS = 1000;

export const SLIDING_WINDOW: AlgorithmDescriptor<SlidingWindowPolicy> = {
  algorithm: 'sliding-window',
  factory: 'slidingWindow',
  fields: { limit: count(), windowMs: duration(), precisionMs: optionalDuration() },
  check(p, path) {
    if (p.precisionMs === undefined) return;
    const windowUs = toUs(p.windowMs);
    const precisionUs = toUs(p.precisionMs);
    if (windowUs % precisionUs !== 0) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `${path}.precisionMs must divide ${path}.windowMs ${describeValue(p.windowMs)} into whole buckets, got ${describeValue(p.precisionMs)}`,
        { option: `${path}.precisionMs` },
      );
    }
    if (windowUs / precisionUs > MAX_WINDOW_BUCKETS) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `${path}.precisionMs ${describeValue(p.precisionMs)} makes ${windowUs / precisionUs} buckets of ${path}.windowMs ${describeValue(p.windowMs)}; at most ${MAX_WINDOW_BUCKETS} are allowed (a key keeps a count per bucket)`,
        { option: `${path}.precisionMs` },
      );
    }
  },
  derivedName: (p) =>
    `sliding-window-${trimNumber(p.limit)}-per-${nameDuration(p.windowMs)}${p.precisionMs === undefined ? '' : `-precision-${nameDuration(p.precisionMs)}`}`,
  compile: (p) =>
    p.precisionMs === undefined
      ? { kind: SLIDING_WINDOW_KIND.id, limit: p.limit, a: toUs(p.windowMs), b: 0, c: 0 }
      : { kind: BUCKETED_WINDOW.id, limit: p.limit, a: toUs(p.windowMs), b: toUs(p.precisionMs), c: 0 },
  quota: windowQuota,
  gauge: (p) =>
    p.precisionMs === undefined
      ? {
          label: 'weighted count: previous window × its overlap + current window',
          axis: 'weighted count',
          ceilingLabel: 'limit',
          scale: 'used',
        }
      : {
          label: `count in the window's buckets of ${trimNumber(p.precisionMs)} ms`,
          axis: 'count',
          ceilingLabel: 'limit',
          scale: 'used',
        },
};

/** The window a call at `nowUs` falls in, its count and the previous window's (scratch, reused). */
const counts = { start: 0, count: 0, previous: 0 };

/** Reads the current and previous window's counts from a state, at `nowUs`. */
function countsAt(c: CompiledNumbers, s: State | undefined, nowUs: number): void {
  const window = c.a;
  const start = nowUs - (nowUs % window);
  let count = 0;
  let previous = 0;
  if (s !== undefined) {
    if (s[1] === start) {
      count = s[2] as number;
      previous = s[3] as number;
    } else if (s[1] === start - window) {
      previous = s[2] as number;
    }
  }
  counts.start = start;
  counts.count = count;
  counts.previous = previous;
}

/**
 * Sliding-window counter: clock-aligned windows, where the previous window's count is weighted by
 * how much of it the sliding window still overlaps. Two numbers per key instead of a log; exact within
 * each aligned window, and never more than twice `limit` in any span of one window length.
 */
export const evaluateSlidingWindow: Evaluate = (c, s, nowUs, cost, _maxDelayUs, out) => {
  const limit = c.limit;
  const window = c.a;
  countsAt(c, s, nowUs);
  const { start, count, previous } = counts;
  const elapsed = nowUs - start;
  const estimate = estimateAt(previous, count, window, elapsed);
  if (estimate + cost <= limit) {
    const after = count + cost;
    const next = cost === 0 ? undefined : nextState4(out, 0, start, after, previous);
    admit(out, limit - (estimate + cost), limit, untouchedAfter(after, previous, start, window, nowUs), next);
  } else {
    const retry = retryAfter(previous, count, window, elapsed, limit, cost);
    deny(out, limit - estimate, limit, retry, untouchedAfter(count, previous, start, window, nowUs));
  }
};

/** µs until the key is untouched, with `count` in the current window and `previous` in the one before. */
function untouchedAfter(count: number, previous: number, start: number, window: number, nowUs: number): number {
  return count > 0 ? start + 2 * window - nowUs : previous > 0 ? start + window - nowUs : 0;
}

/** The weighted count at `elapsed` µs into the current window. Ports repeat this order of operations. */
function estimateAt(previous: number, count: number, window: number, elapsed: number): number {
  return (previous * (window - elapsed)) / window + count;
}

/**
 * The first whole µs at which the same call fits: later in this window as the previous window's weight
 * fades, or in the next window, where this window's count becomes the previous one. The closed form is
 * checked against `estimateAt` and nudged, so a retry at the promised time is never refused by rounding.
 */
function retryAfter(
  previous: number,
  count: number,
  window: number,
  elapsed: number,
  limit: number,
  cost: number,
): number {
  if (count + cost <= limit) {
    let at = Math.ceil(window - ((limit - count - cost) * window) / previous);
    for (let k = 0; k < 4 && at < window && estimateAt(previous, count, window, at) + cost > limit; k++) at++;
    if (at < window) return at - elapsed;
  }
  let at = count > 0 ? Math.max(0, Math.ceil(window - ((limit - cost) * window) / count)) : 0;
  for (let k = 0; k < 4 && at < window && estimateAt(count, 0, window, at) + cost > limit; k++) at++;
  return window - elapsed + at;
}

/**
 * The sliding-window counter. State `[blockedUntil, windowStart, count, previousCount]`.
 *
 * Refund: the count of the grant's window drops, whether it is still the current window or has become
 * the previous one.
 */
export const SLIDING_WINDOW_KIND: KindDescriptor<4, 'sliding-window'> = {
  id: 4,
  name: 'sliding-window',
  tag: 's',
  layout: { fields: ['windowStart', 'count', 'previousCount'] },
  params: { a: 'window, µs', b: '–', c: '–' },
  flags: {},
  capacity: 'count',
  leaseEndsAtReset: false,
  evaluate: evaluateSlidingWindow,
  refund(c, s, _nowUs, leasedAtUs, _leased, unused) {
    const window = c.a;
    const leaseWindow = leasedAtUs - (leasedAtUs % window);
    if (s[1] === leaseWindow) {
      return [s[0] as number, leaseWindow, Math.max(0, (s[2] as number) - unused), s[3] as number];
    }
    if (s[1] === leaseWindow + window) {
      return [s[0] as number, s[1] as number, s[2] as number, Math.max(0, (s[3] as number) - unused)];
    }
    return undefined;
  },
  leaseRefusal: () => undefined,
  countsDenied: () => false,
  read(c, s, nowUs) {
    countsAt(c, s, nowUs);
    const { start, count, previous } = counts;
    const weight = (c.a - (nowUs - start)) / c.a;
    return {
      used: estimateAt(previous, count, c.a, nowUs - start),
      blockedUntilUs: s === undefined ? 0 : (s[0] as number),
      fields: [
        { label: 'current window start', value: start, unit: 'time' },
        { label: 'current window end', value: start + c.a, unit: 'time' },
        { label: 'current count', value: count, unit: 'number' },
        { label: 'previous count', value: previous, unit: 'number' },
        { label: 'previous weight', value: weight, unit: 'number' },
      ],
    };
  },
};
