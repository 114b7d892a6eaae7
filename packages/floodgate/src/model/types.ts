/**
 * The state of one key under one policy, as a flat list of numbers so that every store can hold it:
 * index 0 is the end of a penalty block (µs, 0 when none); the rest is laid out as the policy's kind
 * says (`layout` in its descriptor, kinds.ts): a fixed list of named fields (the meter's
 * `[blockedUntil, tat]`), or `(time, amount)` pairs oldest first (the sliding log's
 * `[blockedUntil, t1, cost1, t2, cost2, …]`).
 *
 * A key with no stored state is untouched: a fresh key.
 */
export type State = readonly number[];

export type Reason = 'ok' | 'limit' | 'blocked' | 'exceeds-capacity';

/** One policy's verdict on one call, in microseconds. Filled in place to keep the hot path allocation-free. */
export interface Evaluation {
  allowed: boolean;
  reason: Reason;
  /** How many cost-1 calls would be admitted right now, after this call (floored, within 0…limit). */
  remaining: number;
  /**
   * µs until this same call could pass; Infinity when it never can. 0 when allowed, but for a `countDenied`
   * sliding log that logged the attempt of a call another policy denied: its wait after that attempt.
   */
  retryAfterUs: number;
  /** µs until the key is back to untouched. */
  resetAfterUs: number;
  /** Admitted, but proceed after this long (queue mode, reservations). */
  delayUs: number;
  /**
   * The state to store if this call is committed; undefined when nothing changes. Fixed-size states are
   * written into `buffer` and valid until `out` is evaluated again: a store that keeps the array copies it.
   */
  next: State | undefined;
  /** Reused room for fixed-size next states of 2, 3 and 4 numbers (keeps the hot path allocation-free). */
  readonly buffers: readonly [number[], number[], number[]];
}

export function emptyEvaluation(): Evaluation {
  return {
    allowed: true,
    reason: 'ok',
    remaining: 0,
    retryAfterUs: 0,
    resetAfterUs: 0,
    delayUs: 0,
    next: undefined,
    buffers: [
      [0, 0],
      [0, 0, 0],
      [0, 0, 0, 0],
    ],
  };
}

/** A next state of two numbers, written into the evaluation's buffer. */
export function nextState2(out: Evaluation, a: number, b: number): State {
  const buffer = out.buffers[0];
  buffer[0] = a;
  buffer[1] = b;
  return buffer;
}

/** A next state of three numbers, written into the evaluation's buffer. */
export function nextState3(out: Evaluation, a: number, b: number, c: number): State {
  const buffer = out.buffers[1];
  buffer[0] = a;
  buffer[1] = b;
  buffer[2] = c;
  return buffer;
}

/** A next state of four numbers, written into the evaluation's buffer. */
export function nextState4(out: Evaluation, a: number, b: number, c: number, d: number): State {
  const buffer = out.buffers[2];
  buffer[0] = a;
  buffer[1] = b;
  buffer[2] = c;
  buffer[3] = d;
  return buffer;
}

/**
 * Writes an admission into `out`: `left` of `limit` remain (floored into 0…limit), the key is untouched
 * again after `resetAfterUs`, `next` is the state to store, and the call proceeds after `delayUs`.
 */
export function admit(
  out: Evaluation,
  left: number,
  limit: number,
  resetAfterUs: number,
  next: State | undefined,
  delayUs = 0,
): void {
  out.allowed = true;
  out.reason = 'ok';
  out.remaining = clampRemaining(left, limit);
  out.retryAfterUs = 0;
  out.resetAfterUs = resetAfterUs;
  out.delayUs = delayUs;
  out.next = next;
}

/** Writes a denial on the limit into `out`: `left` of `limit` remain, the same call passes after `retryAfterUs`. */
export function deny(out: Evaluation, left: number, limit: number, retryAfterUs: number, resetAfterUs: number): void {
  out.allowed = false;
  out.reason = 'limit';
  out.remaining = clampRemaining(left, limit);
  out.retryAfterUs = retryAfterUs;
  out.resetAfterUs = resetAfterUs;
  out.delayUs = 0;
  out.next = undefined;
}

/** Floors a remaining count into 0…limit. */
export function clampRemaining(value: number, limit: number): number {
  const floored = Math.floor(value);
  return floored < 0 ? 0 : floored > limit ? Math.floor(limit) : floored;
}
