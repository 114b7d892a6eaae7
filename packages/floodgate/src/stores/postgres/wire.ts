import type { KindDescriptor } from '../../model/descriptor.js';
import { KIND_LIST } from '../../model/kinds.js';

/*
 * Every positional format the PostgreSQL port passes around, in one table: what the functions of port.ts
 * hand each other (an evaluation), what the decide function returns per call, and what the meter
 * statements (meter-fast.ts) return. Positions are 1-based in SQL arrays and 0-based in the text the
 * client splits; both are given where both read them.
 */

/**
 * An evaluation inside the port (sql.ts `evaluation`), a float8[] (1-based): the report fields, then the
 * length of the next state (-1: unchanged) and the next state itself.
 */
export const EVALUATION = {
  allowed: 1,
  reason: 2,
  remaining: 3,
  retryAfterUs: 4,
  resetAfterUs: 5,
  delayUs: 6,
  /** The report fields are `[allowed .. delayUs]`. */
  reportLength: 6,
  nextLength: 7,
  next: 8,
} as const;

/**
 * How the decide function answers a call (not a reset; resets answer nothing), decided by the call's
 * policies:
 *
 * - `'state'`: every policy's kind keeps fields (a fixed-size state). The server returns only its verdict
 *   and the states it read; the client's model writes the report and checks the verdict (`decodeStateCall`
 *   in postgres-store.ts). Per call: `allowed, nowUs`, then per policy `allowed, length (-1: no state),
 *   …state read`.
 * - `'report'`: some policy keeps a list (a sliding log, a bucketed window), whose state would make the
 *   reply grow with its limit (up to 2 · limit + 3 numbers): the report is written on the server. Per call:
 *   `allowed, nowUs`, then per policy the 6 report fields of `EVALUATION`.
 */
export type CallForm = 'state' | 'report';

/** Kinds whose state is a list: calls with one of them are answered in the `'report'` form. */
export const LIST_KINDS: readonly KindDescriptor[] = KIND_LIST.filter((k) => 'pairs' in k.layout);

/** Numbers per policy in the `'report'` form. */
export const REPORT_FIELDS = EVALUATION.reportLength;

/**
 * What a single-policy statement returns (meter-fast.ts, window-fast.ts), one bigint[] as text (0-based
 * after the braces):
 * - read or update: `{nowUs, …state, verdict}`: the state decided on, `stateLength` numbers (all `NULL`
 *   for a key holding none), and the server's verdict (1 admitted, 0 denied);
 * - insert (a key that held nothing, always admitted): `{nowUs, pruned}`.
 *
 * `bitsAt`: the position in the state of a number sent as itself when whole, else as minus the bits of its
 * float8 (the fixed window's count, a sum of costs).
 */
export interface StatementReply {
  readonly statement: string;
  readonly nowUs: 0;
  readonly state: 1;
  readonly stateLength: number;
  readonly verdict: number;
  readonly length: number;
  readonly insertedLength: 2;
  readonly bitsAt?: number;
}

/** The meter statements: state `[blockedUntil, tat]`. */
export const METER_REPLY: StatementReply = {
  statement: 'meter statement',
  nowUs: 0,
  state: 1,
  stateLength: 2,
  verdict: 3,
  length: 4,
  insertedLength: 2,
};

/** The fixed-window statements: state `[blockedUntil, windowStart, count]`, the count as `bitsAt` says. */
export const FIXED_WINDOW_REPLY: StatementReply = {
  statement: 'fixed-window statement',
  nowUs: 0,
  state: 1,
  stateLength: 3,
  verdict: 4,
  length: 5,
  insertedLength: 2,
  bitsAt: 2,
};
