import { MAX_COST } from '../../../model/cost.js';
import { alignDown, evaluation, setRemaining } from '../sql.js';
import type { SqlPort } from './sql-port.js';

/**
 * Sets `start` to the window `now` falls in and `cnt` to what it has counted, as the model's `windowAt`
 * finds them (`start`, `cnt`, `s`, `a`, `c`, `now` in scope); `indent` starts each line after the first.
 * Shared by the decision and the count of a denied call.
 */
function windowAt(indent: string): string {
  return [
    'IF c = 0 THEN',
    `  start := ${alignDown('now', 'a')};`,
    '  IF s IS NOT NULL AND s[2] = start THEN cnt := s[3]; END IF;',
    'ELSIF s IS NOT NULL AND s[3] > 0 AND now < s[2] + a THEN',
    '  start := s[2];',
    '  cnt := s[3];',
    'ELSE',
    '  start := now;',
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
      IF after <= lim THEN
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
        nx := ARRAY[coalesce(s[1], 0), start, least(cnt + cost, ${MAX_COST})]::float8[];
      END;`,
  },
};
