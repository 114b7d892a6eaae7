import { alignDown, evaluation, setRemaining } from '../sql.js';
import type { SqlPort } from './sql-port.js';

/** The PL/pgSQL port of the sliding-window kind: model/sliding-window.ts (a = window). */
export const SLIDING_WINDOW_PORT: SqlPort = {
  functions: () => [],
  run: () => `DECLARE
      start float8 := ${alignDown('now', 'a')};
      cnt float8 := 0; previous float8 := 0; elapsed float8; estimate float8; after float8; reset float8;
      at float8; k int; retry float8;
    BEGIN
      IF s IS NOT NULL THEN
        IF s[2] = start THEN
          cnt := s[3];
          previous := s[4];
        ELSIF s[2] = start - a THEN
          previous := s[3];
        END IF;
      END IF;
      elapsed := now - start;
      estimate := (previous * (a - elapsed)) / a + cnt;
      IF estimate + cost <= lim THEN
        after := cnt + cost;
        ${setRemaining('lim - (estimate + cost)')}
        reset := CASE WHEN after > 0 THEN start + 2 * a - now WHEN previous > 0 THEN start + a - now ELSE 0 END;
        IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0')}; END IF;
        RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0', ['0', 'start', 'after', 'previous'])};
      END IF;
      ${setRemaining('lim - estimate')}
      -- retryAfter(): later in this window as the previous count fades, or in the next one.
      IF cnt + cost <= lim THEN
        at := ceil(a - ((lim - cnt - cost) * a) / previous);
        k := 0;
        WHILE k < 4 AND at < a AND (previous * (a - at)) / a + cnt + cost > lim LOOP
          at := at + 1;
          k := k + 1;
        END LOOP;
        IF at < a THEN retry := at - elapsed; END IF;
      END IF;
      IF retry IS NULL THEN
        at := CASE WHEN cnt > 0 THEN greatest(0, ceil(a - ((lim - cost) * a) / cnt)) ELSE 0 END;
        k := 0;
        WHILE k < 4 AND at < a AND (cnt * (a - at)) / a + 0 + cost > lim LOOP
          at := at + 1;
          k := k + 1;
        END LOOP;
        retry := a - elapsed + at;
      END IF;
      reset := CASE WHEN cnt > 0 THEN start + 2 * a - now WHEN previous > 0 THEN start + a - now ELSE 0 END;
      RETURN ${evaluation(0, 1, 'rem', 'retry', 'reset', '0')};
    END;`,
  // The grant's window, current or previous.
  refund: () => `DECLARE
      lw float8 := ${alignDown('p_leased_at', 'a')};
    BEGIN
      IF st[2] = lw THEN
        nx := ARRAY[st[1], lw, greatest(0, st[3] - p_unused), st[4]];
      ELSIF st[2] = lw + a THEN
        nx := ARRAY[st[1], st[2], st[3], greatest(0, st[4] - p_unused)];
      END IF;
    END;`,
};
