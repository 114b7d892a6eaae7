import type { CompiledPolicy } from './compile.js';
import { clampRemaining, type Evaluation, nextState3, type State } from './types.js';

/**
 * Token bucket with interval refill: the bucket starts full and `refillAmount` tokens come back at each
 * interval boundary. State is what has been used and the anchor the intervals count from; the anchor is
 * the moment the bucket last left its full state, so a full bucket is the same as an untouched key.
 * (The continuous token bucket runs on the meter; see meter.ts.)
 */
export function evaluateTokenInterval(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  _maxDelayUs: number,
  out: Evaluation,
): void {
  const capacity = c.limit;
  const refill = c.a;
  const interval = c.b;
  let used = 0;
  let anchor = nowUs;
  if (s !== undefined && (s[1] as number) > 0) {
    used = s[1] as number;
    anchor = s[2] as number;
    const intervals = Math.floor((nowUs - anchor) / interval);
    if (intervals > 0) {
      used = used - intervals * refill;
      anchor = anchor + intervals * interval;
      if (used <= 0) {
        used = 0;
        anchor = nowUs;
      }
    }
  }
  const after = used + cost;
  out.delayUs = 0;
  if (after <= capacity) {
    out.allowed = true;
    out.reason = 'ok';
    out.remaining = clampRemaining(capacity - after, capacity);
    out.retryAfterUs = 0;
    out.resetAfterUs = after > 0 ? anchor + Math.ceil(after / refill) * interval - nowUs : 0;
    out.next = cost === 0 ? undefined : nextState3(out, 0, after, anchor);
  } else {
    out.allowed = false;
    out.reason = 'limit';
    out.remaining = clampRemaining(capacity - used, capacity);
    out.retryAfterUs = anchor + Math.ceil((after - capacity) / refill) * interval - nowUs;
    out.resetAfterUs = used > 0 ? anchor + Math.ceil(used / refill) * interval - nowUs : 0;
    out.next = undefined;
  }
}
