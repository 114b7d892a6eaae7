import type { CompiledPolicy } from './compile.js';
import { MAX_COST } from './cost.js';
import { clampRemaining, type Evaluation, nextState3, type State } from './types.js';

/**
 * Fixed window: at most `limit` per window. Clock-aligned windows start at multiples of the window
 * length since the epoch (every key resets together: the top-of-the-hour stampede); first-request
 * windows start when a key with no live window is first charged.
 */
export function evaluateFixedWindow(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  _maxDelayUs: number,
  out: Evaluation,
): void {
  const limit = c.limit;
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
  const after = count + cost;
  out.delayUs = 0;
  if (after <= limit) {
    out.allowed = true;
    out.reason = 'ok';
    out.remaining = clampRemaining(limit - after, limit);
    out.retryAfterUs = 0;
    out.resetAfterUs = after > 0 ? start + window - nowUs : 0;
    out.next = cost === 0 ? undefined : nextState3(out, 0, start, after);
  } else {
    out.allowed = false;
    out.reason = 'limit';
    out.remaining = clampRemaining(limit - count, limit);
    out.retryAfterUs = start + window - nowUs;
    out.resetAfterUs = count > 0 ? start + window - nowUs : 0;
    out.next = undefined;
  }
}

/**
 * The state after a call is counted whatever its outcome (`countDenied`, model/decide.ts `settleDenied`):
 * the current window's count plus the cost, as Envoy's reference service adds each hit (`INCRBY`) before
 * it compares. The count stops at `MAX_COST`, the largest integer every store holds exactly: past the
 * limit, only the window's end lets calls through again.
 */
export function countFixedWindowHit(c: CompiledPolicy, s: State | undefined, nowUs: number, cost: number): State {
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
  return [s === undefined ? 0 : (s[0] as number), start, Math.min(count + cost, MAX_COST)];
}
