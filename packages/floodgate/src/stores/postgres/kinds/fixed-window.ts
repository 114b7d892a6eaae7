import { MAX_COST } from '../../../model/cost.js';
import { alignDown, evaluation, setRemaining } from '../sql.js';
import type { SqlPort } from './sql-port.js';

/**
 * The fixed window's transition, written once in SQL: the window a call at `now` counts in and what it has
 * counted, the verdict, the next state and the moment the state written is untouched again. The decide
 * function's port (`FIXED_WINDOW_PORT`) and the plain fixed-window statements (window-fast.ts) are both
 * generated from it, as the model's `windowAt` and `evaluateFixedWindow` (model/fixed-window.ts) compute
 * them, on float8. `s2`, `s3` are the state's window start and count (NULL: none), `a` the window in µs.
 */
export const FIXED_WINDOW_SQL = {
  /** Where the window `now` falls in starts: clock-aligned (`c = 0`) or from a key's first request (`c = 1`). */
  start: (aligned: 0 | 1, s2: string, s3: string, now: string, a: string): string =>
    aligned === 0 ? alignDown(now, a) : `CASE WHEN ${live(s2, s3, now, a)} THEN ${s2} ELSE ${now} END`,
  /** The window a key that holds nothing starts at `now`. */
  fresh: (aligned: 0 | 1, now: string, a: string): string => (aligned === 0 ? alignDown(now, a) : now),
  /** What that window has counted (`start` as `start` gives it). */
  count: (aligned: 0 | 1, s2: string, s3: string, now: string, a: string, start: string): string =>
    aligned === 0
      ? `CASE WHEN ${s2} = ${start} THEN ${s3} ELSE 0 END`
      : `CASE WHEN ${live(s2, s3, now, a)} THEN ${s3} ELSE 0 END`,
  /** Admitted (when not blocked): the count after the call within the limit. */
  admits: (count: string, cost: string, limit: string): string => `${count} + ${cost} <= ${limit}`,
  /** A denied call counted (countDenied, model `countFixedWindowHit`): the count, at most MAX_COST. */
  counted: (count: string, cost: string): string => `least(${count} + ${cost}, ${MAX_COST})`,
  /**
   * When the state `[blockedUntil, start, count]` written at `now` (its window the current one) is
   * untouched again: the later of the block's end and the window's end (`now` for an empty window).
   */
  untouchedAt: (blockedUntil: string, start: string, count: string, now: string, a: string): string =>
    `greatest(${blockedUntil}, CASE WHEN ${count} > 0 THEN ${start} + ${a} ELSE ${now} END)`,
} as const;

/** A first-request window still running: it has counted something and `now` is before its end. */
function live(s2: string, s3: string, now: string, a: string): string {
  return `${s3} > 0 AND ${now} < ${s2} + ${a}`;
}

/**
 * Sets `start` to the window `now` falls in and `cnt` to what it has counted, as the model's `windowAt`
 * finds them (`start`, `cnt`, `s`, `a`, `c`, `now` in scope); `indent` starts each line after the first.
 * Shared by the decision and the count of a denied call.
 */
function windowAt(indent: string): string {
  const w = FIXED_WINDOW_SQL;
  return [
    'IF c = 0 THEN',
    `  start := ${w.start(0, 's[2]', 's[3]', 'now', 'a')};`,
    `  cnt := ${w.count(0, 's[2]', 's[3]', 'now', 'a', 'start')};`,
    'ELSE',
    `  start := ${w.start(1, 's[2]', 's[3]', 'now', 'a')};`,
    `  cnt := ${w.count(1, 's[2]', 's[3]', 'now', 'a', 'start')};`,
    'END IF;',
  ].join(`\n${indent}`);
}

/** The PL/pgSQL port of the fixed-window kind: model/fixed-window.ts (a = window, b = 1 count every call, c = 1 first-request aligned). */
export const FIXED_WINDOW_PORT: SqlPort = {
  functions: () => [],
  run: () => `DECLARE
      start float8; cnt float8 := 0; after float8; reset float8;
    BEGIN
      ${windowAt('      ')}
      after := cnt + cost;
      IF ${FIXED_WINDOW_SQL.admits('cnt', 'cost', 'lim')} THEN
        ${setRemaining('lim - after')}
        reset := CASE WHEN after > 0 THEN start + a - now ELSE 0 END;
        IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0')}; END IF;
        RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0', ['0', 'start', 'after'])};
      END IF;
      ${setRemaining('lim - cnt')}
      RETURN ${evaluation(0, 1, 'rem', 'start + a - now', 'CASE WHEN cnt > 0 THEN start + a - now ELSE 0 END', '0')};
    END;`,
  // Within the lease's window only.
  refund: () => `DECLARE
      start float8 := st[2];
      lw float8 := CASE WHEN c = 0 THEN ${alignDown('p_leased_at', 'a')} ELSE st[2] END;
    BEGIN
      IF start = lw AND p_leased_at >= start AND p_leased_at < start + a AND now < start + a AND st[3] > 0 THEN
        nx := ARRAY[st[1], start, greatest(0, st[3] - p_unused)];
      END IF;
    END;`,
  // countFixedWindowHit: the window's count plus the cost, at most MAX_COST (2^53 - 1).
  logDenied: {
    when: (b) => `${b} = 1`,
    everyCall: true,
    count: () => `DECLARE
        start float8; cnt float8 := 0;
      BEGIN
        ${windowAt('        ')}
        nx := ARRAY[CASE WHEN s[1] > now THEN s[1] ELSE 0 END, start, ${FIXED_WINDOW_SQL.counted('cnt', 'cost')}]::float8[];
      END;`,
  },
};
