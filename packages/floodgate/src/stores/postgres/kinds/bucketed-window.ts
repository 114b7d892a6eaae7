import { alignDown, evaluation, setRemaining } from '../sql.js';
import { appendPair, refundPair, skipExpired, sumLive, waitToFit } from './lists.js';
import type { SqlPort } from './sql-port.js';

/** The PL/pgSQL port of the bucketed-window kind: model/bucketed-window.ts (a = window, b = precision: the buckets' width). */
export const BUCKETED_WINDOW_PORT: SqlPort = {
  functions: () => [],
  run: () => `DECLARE
      len int := coalesce(array_length(s, 1), 0);
      cur float8 := ${alignDown('now', 'b')};
      cutoff float8;
      f int := 1;
      i int; total float8 := 0; untouched float8 := 0; nx float8[]; k int; newer float8; wait float8;
    BEGIN
      cutoff := cur - a;
      ${skipExpired('cutoff')}
      ${sumLive('total')}
      IF len > f THEN untouched := s[len - 1] + a - now; END IF;
      IF total + cost <= lim THEN
        ${setRemaining('lim - (total + cost)')}
        IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'untouched', '0')}; END IF;
        -- The buckets still in the window, with the cost added to the current one.
        ${appendPair('nx', 'cur')}
        RETURN ${evaluation(1, 0, 'rem', '0', 'cur + a - now', '0', 'nx')};
      END IF;
      ${setRemaining('lim - total')}
      ${waitToFit('wait', 'newer')}
      RETURN ${evaluation(0, 1, 'rem', 'wait', 'untouched', '0')};
    END;`,
  // The bucket of the grant loses the units, and goes when nothing is left of it.
  refund: () => refundPair('bucket', `\n      bucket float8 := ${alignDown('p_leased_at', 'b')};`),
};
