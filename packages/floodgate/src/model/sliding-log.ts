import type { AlgorithmDescriptor, PolicyBase, PolicyBaseOptions } from './algorithm.js';
import { windowQuota } from './algorithm.js';
import type { CompiledNumbers, Evaluate, KindDescriptor } from './descriptor.js';
import { count, duration, flag, nameDuration, toUs, trimNumber } from './fields.js';
import { appendPair, firstLive, liveSum, takeFromPair, waitToFit } from './pairs.js';
import { admit, deny, type State } from './types.js';

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
export interface SlidingLogOptions extends PolicyBaseOptions {
  limit: number;
  windowMs: number;
  minGapMs?: number;
  countDenied?: boolean;
}

/**
 * Largest `limit` of a sliding log. The log keeps an entry per event, up to `ceil(limit) + 1`, and one
 * decision reads, sums and rewrites all of them: this bounds a key's state and a decision's work (the
 * bytes per key and the Redis script time at this size are measured in docs/algorithms.md, "Bounds per
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
    `sliding-log-${trimNumber(p.limit)}-per-${nameDuration(p.windowMs)}${p.minGapMs ? `-gap-${nameDuration(p.minGapMs)}` : ''}${p.countDenied ? '-count-denied' : ''}`,
  compile: (p) => ({
    kind: SLIDING_LOG_KIND.id,
    limit: p.limit,
    a: toUs(p.windowMs),
    b: toUs(p.minGapMs),
    c: p.countDenied ? 1 : 0,
  }),
  // A minimum gap longer than the window's share per event slows the sustained rate further.
  quota: (p) => {
    const quota = windowQuota(p);
    return p.minGapMs > 0 ? { ...quota, ratePerMs: Math.min(quota.ratePerMs, 1 / p.minGapMs) } : quota;
  },
  gauge: () => ({ label: 'cost logged in the last window', axis: 'logged', ceilingLabel: 'limit', scale: 'used' }),
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
export const evaluateSlidingLog: Evaluate = (c, s, nowUs, cost, _maxDelayUs, out) => {
  const limit = c.limit;
  const window = c.a;
  const minGap = c.b;
  const first = firstLive(s, nowUs - window);
  const sum = liveSum(s, first);
  // The gap is measured from the newest event even when it has left the window (gap longer than window).
  const length = s === undefined ? 0 : s.length;
  const last = length > 1 ? ((s as State)[length - 2] as number) : -1;
  const hold = Math.max(minGap, window);
  const gapWait = minGap > 0 && cost > 0 && last >= 0 && nowUs - last < minGap ? last + minGap - nowUs : 0;
  if (sum + cost <= limit && gapWait === 0) {
    const next = cost === 0 ? undefined : coalesce(appendPair(s, first, nowUs, cost), limit);
    admit(out, limit - (sum + cost), limit, cost > 0 ? hold : untilUntouched(last, hold, nowUs), next);
  } else {
    const sumWait = sum + cost <= limit || s === undefined ? 0 : waitToFit(s, first, cost, limit, window, nowUs);
    deny(out, limit - sum, limit, Math.max(gapWait, sumWait), untilUntouched(last, hold, nowUs));
  }
};

/**
 * The state after a denied attempt is logged (`countDenied`): the attempt is appended, then only the
 * shortest run of newest events whose costs exceed `limit` is kept, then entries beyond the bound are
 * coalesced. Older events leave the window first, and while that run is live no call fits, a check (cost
 * 0) included: so dropping them changes no decision. (A run that only reached the limit, as kept before,
 * answered a check "allowed" where the whole log says no.)
 */
export function logDeniedAttempt(c: CompiledNumbers, s: State | undefined, nowUs: number, cost: number): State {
  const appended = appendPair(s, firstLive(s, nowUs - c.a), nowUs, cost);
  let sum = 0;
  let keepFrom = appended.length;
  while (keepFrom > 1 && sum <= c.limit) {
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
  refund: (_c, s, _nowUs, leasedAtUs, _leased, unused) => takeFromPair(s, leasedAtUs, unused),
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
    const used = liveSum(s, first);
    const fields: { label: string; value: number; unit: 'time' | 'number' }[] = [
      { label: 'events in the window', value: (length - first) / 2, unit: 'number' },
    ];
    if (length > 1) fields.push({ label: 'newest event', value: (s as State)[length - 2] as number, unit: 'time' });
    return { used, blockedUntilUs: s === undefined ? 0 : (s[0] as number), fields };
  },
};
