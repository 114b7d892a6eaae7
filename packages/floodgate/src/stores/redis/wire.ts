/**
 * The positional layouts the Redis store and its scripts exchange: every ARGV slot and every reply slot,
 * in one table. The client builds arguments and reads replies through these numbers, and the scripts'
 * Lua is generated with the same numbers interpolated (`argv[${…}]`), so the two sides cannot drift
 * apart. ARGV slots are Lua's (1-based); reply slots are the client's (0-based, as the client library
 * hands the array over).
 *
 * Two port shapes:
 * - **State port** (the meter scripts, the single-call window scripts): the script decides the
 *   verdict, writes the next state with the expiry of that state, and replies the state it read and the
 *   Redis time; the client runs the model (`decide`) on that state to write the report, and checks the
 *   script's verdict against its own.
 * - **Report port** (the full script: several policies, every kind, cancels and refunds): the script
 *   also computes each policy's report. The list kinds (sliding log, bucketed window) keep their report
 *   on the server: their state is up to `2·(limit + 1)` numbers, which a reply would have to carry back
 *   (and the client parse) on every call, against five integers of report.
 */

/** Operation codes (`op`), shared by every script. */
export const OP = { check: '0', limit: '1', reset: '2', cancel: '3', refund: '4', settle: '5' } as const;

/** The single-call meter script (lua/meter-fast.ts): one call, one meter policy. */
export const METER_CALL_WIRE = {
  /** KEYS[1] is the storage key. */
  argv: {
    /** The caller's clock, µs; '' = Redis TIME. */
    nowUs: 1,
    /** ms added to the expiry of keys written on the caller's clock. */
    graceMs: 2,
    op: 3,
    cost: 4,
    maxDelayUs: 5,
    blockUs: 6,
    /** T, µs per unit of cost (compiled `a`). */
    t: 7,
    /** τ, the tolerance in µs (compiled `b`). */
    tau: 8,
    /** The meter's variant flag (compiled `c`): 1 = queue mode. */
    queue: 9,
  },
  /**
   * One string of fields separated by single spaces: the verdict (`1` allowed / `0` denied), then the time
   * the call was decided at as seconds and µs (Redis TIME's, or `0` and the call's µs), then the state read
   * (the rest of the string, which may hold spaces; empty when none). Field numbers, 0-based.
   */
  reply: { verdict: 0, seconds: 1, micros: 2, state: 3 },
} as const;

/**
 * The single-call window scripts (lua/window-fast.ts): one call, one fixed-window, sliding-window or
 * interval token bucket policy without a penalty box. Their reply is the meter's (`METER_CALL_WIRE.reply`).
 */
export const WINDOW_CALL_WIRE = {
  /** KEYS[1] is the storage key. */
  argv: {
    /** The caller's clock, µs; '' = Redis TIME. */
    nowUs: 1,
    /** ms added to the expiry of keys written on the caller's clock. */
    graceMs: 2,
    op: 3,
    cost: 4,
    limit: 5,
    /** Compiled `a`: the window (µs), or the interval bucket's refill. */
    a: 6,
    /** Compiled `c`: the fixed window's alignment (0 clock, 1 a key's first request); 0 for the others. */
    c: 7,
    /** Compiled `b`: the fixed window's denied calls counted (1 = countDenied), the bucket's interval (µs), 0 for the sliding window. */
    b: 8,
  },
  reply: METER_CALL_WIRE.reply,
} as const;

/** The batch meter script (lua/meter-batch.ts): many calls, one meter policy each. */
export const METER_BATCH_WIRE = {
  /** KEYS: one storage key per call, in call order. */
  argv: {
    graceMs: 1,
    /** P, the number of distinct policies that follow. */
    policies: 2,
    /** L, the number of links after the policies (see the script). */
    links: 3,
    /** First slot of the policies: P groups of `policy`. */
    first: 4,
  },
  /** Offsets within one policy's group, and the group's size. */
  policy: { blockUs: 0, t: 1, tau: 2, queue: 3, size: 4 },
  /** Offsets within one run of calls that differ only by key, and the run's head size. */
  run: { calls: 0, nowUs: 1, op: 2, cost: 3, maxDelayUs: 4, policy: 5, size: 6 },
  /**
   * Per call, the state it was decided on (nil when none, `E` when the key holds another type); then the
   * Redis time the calls without a clock were decided at (0 when none); then the numbers (1-based) of the
   * calls the script denied, in increasing order.
   */
  reply: { wrongType: 'E' },
} as const;

/**
 * The batch window scripts (lua/meter-batch.ts, for a fixed or a sliding window: the policies whose calls
 * take the single-call window scripts, one kind a batch): the meter batch's layout, with a window's numbers
 * per policy.
 */
export const WINDOW_BATCH_WIRE = {
  argv: METER_BATCH_WIRE.argv,
  /** Offsets within one policy's group, and the group's size: the limit, compiled `a`, `c` and `b` (as `WINDOW_CALL_WIRE`). */
  policy: { limit: 0, a: 1, c: 2, b: 3, size: 4 },
  run: METER_BATCH_WIRE.run,
  reply: METER_BATCH_WIRE.reply,
} as const;

/** The full decision script (lua/main.ts): any calls, any policies, every operation. */
export const DECIDE_WIRE = {
  argv: {
    graceMs: 1,
    /** P, the number of distinct policies that follow. */
    policies: 2,
    /** First slot of the policies: P groups of `policy`. */
    first: 3,
  },
  /** Offsets within one compiled policy's group, and the group's size. */
  policy: { kind: 0, limit: 1, blockUs: 2, a: 3, b: 4, c: 5, size: 6 },
  /** Offsets within one run of calls that differ only by key (then `n` policy numbers), and the head's size. */
  run: { calls: 0, op: 1, nowUs: 2, cost: 3, maxDelayUs: 4, n: 5, size: 6 },
  /**
   * Per decision: verdict (1/0), µs decided at, then per policy `stride` numbers: reason, remaining,
   * retryAfterUs (-1 = never), resetAfterUs, delayUs. A reset, refund or settle replies 1, a cancel 1 or 0, a
   * call whose GET or SET failed -1 then the error's message.
   */
  reply: {
    verdict: 0,
    nowUs: 1,
    head: 2,
    reason: 0,
    remaining: 1,
    retryAfterUs: 2,
    resetAfterUs: 3,
    delayUs: 4,
    stride: 5,
  },
} as const;

/** Reasons by the number the full script replies. */
export const REASON_CODES = ['ok', 'limit', 'blocked', 'exceeds-capacity'] as const;
