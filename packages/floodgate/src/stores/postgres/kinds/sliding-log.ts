import { evaluation, setRemaining } from '../sql.js';
import { appendPair, refundPair, skipExpired, sumLive, waitToFit } from './lists.js';
import type { SqlPort } from './sql-port.js';

/** The PL/pgSQL port of the sliding-log kind: model/sliding-log.ts (a = window, b = minimum gap, c = 1 count denied). */
export const SLIDING_LOG_PORT: SqlPort = {
  functions: (n) => [
    // `append`: the live entries from `f` (model index), then the event, merged at the same µs.
    `
CREATE OR REPLACE FUNCTION ${n.fn('append')}(s float8[], f int, now float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  len int := coalesce(array_length(s, 1), 0);
  nx float8[];
  k int;
BEGIN
  ${appendPair('nx', 'now')}
  RETURN nx;
END
$fn$;`,
    // `coalesce`: merges adjacent entries until at most ceil(lim) + 1 are left, each time the pair that
    // moves the least cost-time forward (oldest on ties) into (later time, summed cost). The bound is
    // compared as a float8, so no limit overflows an int.
    `
CREATE OR REPLACE FUNCTION ${n.fn('coalesce')}(lim float8, s float8[])
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  max_len float8 := 2 * (ceil(lim) + 1) + 1;
  len int := coalesce(array_length(s, 1), 0);
  i int;
  at int;
  least float8;
  moved float8;
BEGIN
  WHILE len > max_len LOOP
    at := 2;
    least := 'Infinity';
    i := 2;
    WHILE i <= len - 3 LOOP
      moved := s[i + 1] * (s[i + 2] - s[i]);
      IF moved < least THEN
        least := moved;
        at := i;
      END IF;
      i := i + 2;
    END LOOP;
    s[at + 2] := greatest(s[at], s[at + 2]);
    s[at + 3] := s[at + 1] + s[at + 3];
    s := s[1:at - 1] || s[at + 2:len];
    len := len - 2;
  END LOOP;
  RETURN s;
END
$fn$;`,
    // `logDeniedAttempt`.
    `
CREATE OR REPLACE FUNCTION ${n.fn('log_denied')}(lim float8, a float8, s float8[], now float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  len int := coalesce(array_length(s, 1), 0);
  cutoff float8 := now - a;
  f int := 1;
  ap float8[];
  m int;
  total float8 := 0;
  keep int;
BEGIN
  ${skipExpired('cutoff')}
  ap := ${n.fn('append')}(s, f, now, cost);
  m := array_length(ap, 1);
  keep := m;
  WHILE keep > 1 AND total <= lim LOOP
    keep := keep - 2;
    total := total + ap[keep + 2];
  END LOOP;
  IF keep <= 1 THEN RETURN ${n.fn('coalesce')}(lim, ap); END IF;
  RETURN ${n.fn('coalesce')}(lim, ARRAY[ap[1]] || ap[keep + 1:m]);
END
$fn$;`,
  ],
  run: (n) => `DECLARE
      len int := coalesce(array_length(s, 1), 0);
      cutoff float8 := now - a;
      f int := 1;
      i int; total float8 := 0; last float8; hold float8; gapwait float8; reset float8; nx float8[];
      sw float8; lft float8;
    BEGIN
      ${skipExpired('cutoff')}
      ${sumLive('total')}
      last := CASE WHEN len > 1 THEN s[len - 1] ELSE -1 END;
      hold := greatest(b, a);
      gapwait := CASE WHEN b > 0 AND cost > 0 AND last >= 0 AND now - last < b THEN last + b - now ELSE 0 END;
      -- untilUntouched()
      reset := CASE WHEN last >= 0 AND last + hold > now THEN last + hold - now ELSE 0 END;
      IF total + cost <= lim AND gapwait = 0 THEN
        ${setRemaining('lim - (total + cost)')}
        IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0')}; END IF;
        nx := ${n.fn('coalesce')}(lim, ${n.fn('append')}(s, f, now, cost));
        RETURN ${evaluation(1, 0, 'rem', '0', 'hold', '0', 'nx')};
      END IF;
      ${setRemaining('lim - total')}
      -- sumWait()
      IF total + cost <= lim OR s IS NULL THEN
        sw := 0;
      ELSE
        ${waitToFit('sw', 'lft')}
      END IF;
      RETURN ${evaluation(0, 1, 'rem', 'greatest(gapwait, sw)', 'reset', '0')};
    END;`,
  // The event logged at the grant's µs loses the units, and goes when nothing is left of it.
  refund: () => refundPair('p_leased_at'),
  logDenied: {
    when: (_b, c) => `${c} = 1`,
    count: (n) => `nx := ${n.fn('log_denied')}(lim, a, s, now, cost);`,
  },
};
