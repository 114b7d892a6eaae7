import type { AlgorithmDescriptor, PolicyBase, PolicyBaseOptions } from './algorithm.js';
import { windowQuota } from './algorithm.js';
import { MAX_COST } from './cost.js';
import type { CompiledNumbers, Evaluate, KindDescriptor } from './descriptor.js';
import { count, duration, flag, nameDuration, oneOf, toUs, trimNumber } from './fields.js';
import { admit, deny, nextState3, type State } from './types.js';

/** At most `limit` per window; windows aligned to the clock or to a key's first request. */
export interface FixedWindowPolicy extends PolicyBase {
  readonly algorithm: 'fixed-window';
  readonly limit: number;
  readonly windowMs: number;
  readonly align: 'clock' | 'first-request';
  /**
   * Every committed call counts, admitted or denied (as Envoy's reference rate limit service counts each
   * hit), so a client that keeps calling over the limit stays denied until the window ends. @default false
   */
  readonly countDenied: boolean;
}

/** Options of {@link fixedWindow}. */
export interface FixedWindowOptions extends PolicyBaseOptions {
  limit: number;
  windowMs: number;
  /** @default 'clock' */
  align?: 'clock' | 'first-request';
  /** Count denied calls too (see {@link FixedWindowPolicy.countDenied}). @default false */
  countDenied?: boolean;
}

export const FIXED_WINDOW: AlgorithmDescriptor<FixedWindowPolicy> = {
  algorithm: 'fixed-window',
  factory: 'fixedWindow',
  fields: { limit: count(), windowMs: duration(), align: oneOf('clock', 'first-request'), countDenied: flag() },
  derivedName: (p) =>
    `fixed-window-${trimNumber(p.limit)}-per-${nameDuration(p.windowMs)}${p.align === 'clock' ? '' : '-first-request'}${p.countDenied ? '-count-denied' : ''}`,
  compile: (p) => ({
    kind: FIXED_WINDOW_KIND.id,
    limit: p.limit,
    a: toUs(p.windowMs),
    b: p.countDenied ? 1 : 0,
    c: p.align === 'first-request' ? 1 : 0,
  }),
  quota: windowQuota,
  gauge: () => ({ label: 'count in the current window', axis: 'count', ceilingLabel: 'limit', scale: 'used' }),
};

/** The window a call at `nowUs` counts in and its count so far (scratch, reused). */
const current = { start: 0, count: 0 };

/**
 * Clock-aligned windows start at multiples of the window length since the epoch; a first-request window
 * starts when a key with no live window is first charged.
 */
function windowAt(c: CompiledNumbers, s: State | undefined, nowUs: number): void {
  const window = c.a;
  let start: number;
  let count = 0;
  if (c.c === 0) {
    start = nowUs - (nowUs % window);
    if (s !== undefined && s[1] === start) count = s[2] as number;
  } else if (s !== undefined && (s[2] as number) > 0 && nowUs < (s[1] as number) + window) {
    start = s[1] as number;
    count = s[2] as number;
  } else {
    start = nowUs;
  }
  current.start = start;
  current.count = count;
}

/**
 * Fixed window: at most `limit` per window. Clock-aligned windows start at multiples of the window
 * length since the epoch (every key resets together: the top-of-the-hour stampede); first-request
 * windows start when a key with no live window is first charged.
 */
export const evaluateFixedWindow: Evaluate = (c, s, nowUs, cost, _maxDelayUs, out) => {
  const limit = c.limit;
  windowAt(c, s, nowUs);
  const { start, count } = current;
  const end = start + c.a;
  const after = count + cost;
  if (after <= limit) {
    admit(
      out,
      limit - after,
      limit,
      after > 0 ? end - nowUs : 0,
      cost === 0 ? undefined : nextState3(out, 0, start, after),
    );
  } else {
    deny(out, limit - count, limit, end - nowUs, count > 0 ? end - nowUs : 0);
  }
};

/**
 * The state after a call is counted whatever its outcome (`countDenied`, model/decide.ts `settleDenied`):
 * the current window's count plus the cost, as Envoy's reference service adds each hit (`INCRBY`) before
 * it compares. The count stops at `MAX_COST`, the largest integer every store holds exactly: past the
 * limit, only the window's end lets calls through again. A live block is kept (a cost above the limit is
 * counted even in a penalty box: `evaluatePolicy` finds it can never fit before it looks at the block); one
 * that has ended is not, as an admitted call keeps none, so a key reads the same whether its ended state
 * was kept or pruned.
 */
export function countFixedWindowHit(c: CompiledNumbers, s: State | undefined, nowUs: number, cost: number): State {
  windowAt(c, s, nowUs);
  const blockedUntil = s === undefined ? 0 : (s[0] as number);
  return [blockedUntil > nowUs ? blockedUntil : 0, current.start, Math.min(current.count + cost, MAX_COST)];
}

/**
 * The fixed window. State `[blockedUntil, windowStart, count]`.
 *
 * Refund: within the lease's window only (clock-aligned: the window of the grant; first-request: the
 * live window that contains the grant), the count drops.
 */
export const FIXED_WINDOW_KIND: KindDescriptor<3, 'fixed-window'> = {
  id: 3,
  name: 'fixed-window',
  tag: 'f',
  layout: { fields: ['windowStart', 'count'] },
  params: { a: 'window, µs', b: '1 = count denied (every call)', c: '1 = first-request aligned' },
  flags: { b: [0, 1], c: [0, 1] },
  capacity: 'count',
  leaseEndsAtReset: true,
  evaluate: evaluateFixedWindow,
  refund(c, s, nowUs, leasedAtUs, _leased, unused) {
    const window = c.a;
    const start = s[1] as number;
    const count = s[2] as number;
    const leaseWindow = c.c === 0 ? leasedAtUs - (leasedAtUs % window) : start;
    if (start !== leaseWindow || leasedAtUs < start || leasedAtUs >= start + window) return undefined;
    if (nowUs >= start + window || count <= 0) return undefined;
    return [s[0] as number, start, Math.max(0, count - unused)];
  },
  leaseRefusal: (c) => (c.b === 1 ? 'counting denied attempts (countDenied) needs every call at the store' : undefined),
  countsDenied: (c) => (c.b === 1 ? 'every-call' : false),
  logDenied: countFixedWindowHit,
  read(c, s, nowUs) {
    windowAt(c, s, nowUs);
    const { start, count } = current;
    const open = count > 0 || c.c === 0;
    return {
      used: count,
      blockedUntilUs: s === undefined ? 0 : (s[0] as number),
      fields: [
        ...(open
          ? [
              { label: 'window start', value: start, unit: 'time' as const },
              { label: 'window end', value: start + c.a, unit: 'time' as const },
            ]
          : []),
        { label: 'count', value: count, unit: 'number' },
      ],
    };
  },
};
