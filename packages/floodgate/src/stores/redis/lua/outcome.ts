/*
 * How a window kind's port (fixed window, sliding window, sliding log, bucketed window, token bucket with
 * interval refill) writes its outcome into `out`, the model's `Evaluation`: written once here and inlined
 * into each port, so the script runs no extra call. The statements sit in an `if` of the kind's evaluate
 * function: the lines after the first are indented for it.
 */

/** An admission: `left` of `limit` remain after the call, no wait; the caller writes `out.reset` and `out.nxt`. */
export function admittedLua(left: string, limit: string): string {
  return `out.allowed = true
      out.reason = OK
      out.remaining = clamp_remaining(${left}, ${limit})
      out.retry = 0`;
}

/**
 * A denial by the limit: `left` of `limit` remain, the call fits after `retry` µs, `reset` is the statement
 * that sets `out.reset`; nothing is stored.
 */
export function deniedLua(left: string, limit: string, retry: string, reset: string): string {
  return `out.allowed = false
      out.reason = LIMIT
      out.remaining = clamp_remaining(${left}, ${limit})
      out.retry = ${retry}
      ${reset}
      out.nxt = false`;
}
