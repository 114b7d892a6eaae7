import type { CompiledPolicy } from './compile.js';
import type { AlgorithmDescriptor, KindDescriptor, PolicyBase } from './descriptor.js';
import { count, duration, flag, toUs, trimNumber } from './fields.js';
import { clampRemaining, type Evaluation, type State } from './types.js';

/** Log of events in the last `windowMs`: at most `ceil(limit) + 1` entries, coalesced only ever more strictly. */
export interface SlidingLogPolicy extends PolicyBase {
  readonly algorithm: 'sliding-log';
  readonly limit: number;
  readonly windowMs: number;
  /** Minimum time between two events. `0` turns it off. @default 0 */
  readonly minGapMs: number;
  /** Denied attempts are logged too, so a client that keeps trying stays denied. @default false */
  readonly countDenied: boolean;
}

/** Options of {@link slidingLog}. */
export interface SlidingLogOptions {
  limit: number;
  windowMs: number;
  minGapMs?: number;
  countDenied?: boolean;
  name?: string;
  blockMs?: number;
}

/**
 * Largest `limit` of a sliding log. The log keeps an entry per event, up to `ceil(limit) + 1`, and one
 * decision reads, sums and rewrites all of them: at this size up to 36 kB per key in Redis and 1.3 to
 * 2.6 ms of Redis script time per decision on a loaded 2-core machine (docs/algorithms.md, "Bounds per
 * key"). `slidingWindow` keeps four numbers whatever the limit.
 */
export const MAX_SLIDING_LOG_LIMIT = 1000;

export const SLIDING_LOG: AlgorithmDescriptor<SlidingLogPolicy> = {
  algorithm: 'sliding-log',
  factory: 'slidingLog',
  fields: {
    limit: count({
      max: {
        value: MAX_SLIDING_LOG_LIMIT,
        why: 'for a sliding log, which keeps an entry per event (use slidingWindow for larger limits)',
      },
    }),
    windowMs: duration(),
    minGapMs: duration({ optional: true }),
    countDenied: flag(),
  },
  derivedName: (p) =>
    `sliding-log-${trimNumber(p.limit)}-per-${trimNumber(p.windowMs)}ms${p.minGapMs ? `-gap-${trimNumber(p.minGapMs)}ms` : ''}${p.countDenied ? '-count-denied' : ''}`,
  compile: (p) => ({
    kind: SLIDING_LOG_KIND.id,
    limit: p.limit,
    a: toUs(p.windowMs),
    b: toUs(p.minGapMs),
    c: p.countDenied ? 1 : 0,
  }),
};

/**
 * Sliding log: the list of charged events in the last window, `(time, cost)` pairs oldest first. An
 * event at `t` counts while `now − window < t`. Optional minimum gap between events; optional counting
 * of denied attempts (a client that keeps hammering stays shut out until it pauses).
 *
 * The log holds at most `maxLogEntries(limit)` = `ceil(limit) + 1` entries, whatever the costs and the
 * timing, so a key's state and the work of one decision are bounded by the policy:
 * - once the newest events alone sum to `limit`, older ones can no longer change any decision (they all
 *   leave the window before the newest do), so a logged denied attempt drops them (`countDenied`);
 * - when an append leaves more entries than that (tiny or fractional costs, denied attempts), adjacent
 *   entries are coalesced (`coalesce`): an older entry's cost moves forward onto the next one. A cost
 *   that moves later counts for longer, so the log only ever gets stricter than the exact log of the
 *   same events: it never admits a call the exact log would refuse. Whole costs of at least 1 without
 *   `countDenied` never fill it (they fit at most `floor(limit)` entries), so they are logged exactly.
 */
export function evaluateSlidingLog(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  _maxDelayUs: number,
  out: Evaluation,
): void {
  const limit = c.limit;
  const window = c.a;
  const minGap = c.b;
  const first = firstLive(s, nowUs - window);
  const length = s === undefined ? 0 : s.length;
  // Summed newest first: the sum that `sumWait` reaches when only the newer events are left is then
  // bit for bit the sum this evaluation computes once the older ones have left the window.
  let sum = 0;
  for (let i = length - 1; i > first; i -= 2) sum += (s as State)[i] as number;
  // The gap is measured from the newest event even when it has left the window (gap longer than window).
  const last = length > 1 ? ((s as State)[length - 2] as number) : -1;
  const hold = Math.max(minGap, window);
  const gapWait = minGap > 0 && cost > 0 && last >= 0 && nowUs - last < minGap ? last + minGap - nowUs : 0;
  out.delayUs = 0;
  if (sum + cost <= limit && gapWait === 0) {
    out.allowed = true;
    out.reason = 'ok';
    out.remaining = clampRemaining(limit - (sum + cost), limit);
    out.retryAfterUs = 0;
    out.resetAfterUs = cost > 0 ? hold : untilUntouched(last, hold, nowUs);
    out.next = cost === 0 ? undefined : coalesce(append(s, first, nowUs, cost), limit);
  } else {
    out.allowed = false;
    out.reason = 'limit';
    out.remaining = clampRemaining(limit - sum, limit);
    out.retryAfterUs = Math.max(gapWait, sumWait(s, first, sum, cost, limit, window, nowUs));
    out.resetAfterUs = untilUntouched(last, hold, nowUs);
    out.next = undefined;
  }
}

/**
 * The state after a denied attempt is logged (`countDenied`): the attempt is appended, then only the
 * shortest run of newest events whose costs reach `limit` is kept, then entries beyond the bound are
 * coalesced.
 */
export function logDeniedAttempt(c: CompiledPolicy, s: State | undefined, nowUs: number, cost: number): State {
  const appended = append(s, firstLive(s, nowUs - c.a), nowUs, cost);
  let sum = 0;
  let keepFrom = appended.length;
  while (keepFrom > 1 && sum < c.limit) {
    keepFrom -= 2;
    sum += appended[keepFrom + 1] as number;
  }
  if (keepFrom > 1) appended.splice(1, keepFrom - 1);
  return coalesce(appended, c.limit);
}

/** The most entries a sliding log of this limit keeps: `ceil(limit) + 1`. */
export function maxLogEntries(limit: number): number {
  return Math.ceil(limit) + 1;
}

/**
 * Merges adjacent entries of `log` (in place) until it holds at most `maxLogEntries(limit)` of them. Each
 * merge takes the pair (older i, newer i + 1) that moves the least cost-time forward, `cost_i × (t_{i+1}
 * − t_i)`, the oldest such pair on ties, and replaces it with one entry `(max(t_i, t_{i+1}), cost_i +
 * cost_{i+1})`: the older cost now counts until the newer one leaves the window, never less long, so
 * coalescing only makes the log stricter. The newest entry's time never changes (the minimum gap and
 * the reset count from it). An append adds one entry, so one merge, O(entries), follows it; only a log
 * written under a larger limit of the same policy name needs several, once.
 *
 * The ports (Lua `log_coalesce`, PL/pgSQL `<table>_coalesce`) repeat these operations in this order,
 * so every store picks the same pair and stores the same doubles.
 */
function coalesce(log: number[], limit: number): number[] {
  const maxLength = 2 * maxLogEntries(limit) + 1;
  while (log.length > maxLength) {
    let at = 1;
    let least = Number.POSITIVE_INFINITY;
    for (let i = 1; i + 2 < log.length; i += 2) {
      const moved = (log[i + 1] as number) * ((log[i + 2] as number) - (log[i] as number));
      if (moved < least) {
        least = moved;
        at = i;
      }
    }
    log[at + 2] = Math.max(log[at] as number, log[at + 2] as number);
    log[at + 3] = (log[at + 1] as number) + (log[at + 3] as number);
    log.splice(at, 2);
  }
  return log;
}

/** µs until the newest event stops mattering: it has left the window and the gap after it has passed. */
function untilUntouched(last: number, hold: number, nowUs: number): number {
  return last >= 0 && last + hold > nowUs ? last + hold - nowUs : 0;
}

/** Index of the first live entry's time (entries start at 1). */
function firstLive(s: State | undefined, cutoff: number): number {
  if (s === undefined) return 1;
  let i = 1;
  while (i < s.length && (s[i] as number) <= cutoff) i += 2;
  return i;
}

/** A new log: live entries, then the event; an event at the same µs as the newest one is merged. */
function append(s: State | undefined, first: number, nowUs: number, cost: number): number[] {
  const next: number[] = [0];
  const length = s === undefined ? 0 : s.length;
  for (let i = first; i < length; i++) next.push((s as State)[i] as number);
  if (next.length > 1 && next[next.length - 2] === nowUs) {
    next[next.length - 1] = (next[next.length - 1] as number) + cost;
  } else {
    next.push(nowUs, cost);
  }
  return next;
}

/**
 * µs until enough of the oldest events leave the window for `cost` to fit. Walks from the newest event
 * back, summing in the evaluation's order: the first event whose cost no longer fits beside the newer
 * ones must leave the window, and once it has, the evaluation sums exactly those newer ones. So the
 * call fits exactly when promised, and not a µs earlier.
 */
function sumWait(
  s: State | undefined,
  first: number,
  sum: number,
  cost: number,
  limit: number,
  window: number,
  nowUs: number,
): number {
  if (sum + cost <= limit || s === undefined) return 0;
  let newer = 0;
  for (let i = s.length - 2; i >= first; i -= 2) {
    newer += s[i + 1] as number;
    if (newer + cost > limit) return (s[i] as number) + window - nowUs;
  }
  // Not reached (the live events alone do not leave room); the log is empty once the newest leaves.
  return (s[s.length - 2] as number) + window - nowUs;
}

/**
 * The sliding log. State `[blockedUntil, t1, cost1, t2, cost2, …]`, oldest first, at most
 * `ceil(limit) + 1` pairs.
 *
 * Refund: the event logged at the grant's µs (merged with any logged at the same µs) loses the units,
 * and goes when nothing is left of it.
 */
export const SLIDING_LOG_KIND: KindDescriptor<5, 'sliding-log'> = {
  id: 5,
  name: 'sliding-log',
  tag: 'l',
  layout: { pairs: ['time', 'cost'], maxPairs: (c) => maxLogEntries(c.limit) },
  params: { a: 'window, µs', b: 'minimum gap, µs (0 off)', c: '1 = count denied' },
  flags: { c: [0, 1] },
  capacity: 'count',
  leaseEndsAtReset: false,
  evaluate: evaluateSlidingLog,
  refund(_c, s, _nowUs, leasedAtUs, _leased, unused) {
    for (let i = 1; i < s.length; i += 2) {
      if (s[i] !== leasedAtUs) continue;
      const left = (s[i + 1] as number) - unused;
      const next = [...s];
      if (left > 0) next[i + 1] = left;
      else next.splice(i, 2);
      return next;
    }
    return undefined;
  },
  leaseRefusal(c) {
    if (c.b > 0) return 'a minimum gap (minGapMs) cannot hold between calls admitted locally';
    if (c.c === 1) return 'counting denied attempts (countDenied) needs every call at the store';
    return undefined;
  },
  countsDenied: (c) => (c.c === 1 ? 'attempts' : false),
  logDenied: logDeniedAttempt,
  read(c, s, nowUs) {
    const first = firstLive(s, nowUs - c.a);
    const length = s === undefined ? 0 : s.length;
    let used = 0;
    for (let i = length - 1; i > first; i -= 2) used += (s as State)[i] as number;
    const fields: { label: string; value: number; unit: 'time' | 'number' }[] = [
      { label: 'events in the window', value: (length - first) / 2, unit: 'number' },
    ];
    if (length > 1) fields.push({ label: 'newest event', value: (s as State)[length - 2] as number, unit: 'time' });
    return { used, blockedUntilUs: s === undefined ? 0 : (s[0] as number), fields };
  },
};
