import type { SqlNames } from '../sql.js';

/**
 * One kind's PL/pgSQL port: the model's evaluation and refund of that kind (model/kinds.ts), with the
 * same operations in the same order on float8 (IEEE doubles, like JavaScript numbers), so both compute
 * bit-identical numbers; the randomized comparison in the conformance suite checks it. Arrays are 1-based
 * here: the model's `s[i]` is `s[i + 1]`. `SQL_PORTS` holds one per kind, so a kind without a port does
 * not build; the functions of port.ts dispatch on the kind's number and raise for a number without one.
 */
export interface SqlPort {
  /** Helper functions of the kind (`CREATE OR REPLACE FUNCTION …`), named with `n.fn`. */
  functions(n: SqlNames): readonly string[];
  /**
   * A block (`DECLARE … BEGIN … END;`) that evaluates a policy of the kind and RETURNs an evaluation
   * (sql.ts `evaluation`). In scope: `lim`, `a`, `b`, `c`, `s` (the state, or NULL), `now`, `cost`,
   * `maxdelay`, and `fl`, `rem` for `setRemaining`.
   */
  run(n: SqlNames): string;
  /**
   * A block that sets `nx` to the state after `p_unused` units of a lease are given back, or leaves it
   * NULL. In scope: `st` (never NULL), `now`, `p_leased_at`, `p_leased`, `p_unused`, `lim`, `a`, `b`, `c`.
   */
  refund(n: SqlNames): string;
  /**
   * A kind that counts denied calls (model: the descriptor's `countsDenied` and `logDenied`): when, as a
   * condition on the policy's `b` and `c` (given as SQL expressions); statements that set `nx` to the state
   * once the call is counted (`lim`, `a`, `b`, `c`, `s`, `now`, `cost` in scope); and whether every
   * committed call counts, one whose cost some policy can never admit too.
   */
  readonly logDenied?: {
    when(b: string, c: string): string;
    count(n: SqlNames): string;
    readonly everyCall?: boolean;
  };
}
