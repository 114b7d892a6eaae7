import { evaluation, setRemaining } from '../sql.js';
import type { SqlPort } from './sql-port.js';

/** The PL/pgSQL port of the token-interval kind: model/token-bucket.ts, interval refill (a = refill amount, b = interval); TOKEN_DUST = 1e-12. */
export const TOKEN_INTERVAL_PORT: SqlPort = {
  functions: (n) => [
    // `intervalsUntil`: the fewest whole intervals m >= 1 after a state holding `used` for which the
    // evaluation admits `cost` against `target`, refills of `refill`, dust snapped to 0.
    `
CREATE OR REPLACE FUNCTION ${n.fn('intervals')}(used float8, cost float8, target float8, refill float8, dust float8)
RETURNS float8 LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  m float8 := greatest(1, ceil((used + cost - target) / refill));
  k int := 0;
  lft float8;
BEGIN
  -- fitsAfter(m - 1), at most 4 nudges down, then fitsAfter(m), at most 4 up.
  LOOP
    EXIT WHEN k >= 4 OR m <= 1;
    lft := used - (m - 1) * refill;
    IF lft <= dust THEN lft := 0; END IF;
    EXIT WHEN NOT (lft + cost <= target);
    m := m - 1;
    k := k + 1;
  END LOOP;
  k := 0;
  LOOP
    EXIT WHEN k >= 4;
    lft := used - m * refill;
    IF lft <= dust THEN lft := 0; END IF;
    EXIT WHEN lft + cost <= target;
    m := m + 1;
    k := k + 1;
  END LOOP;
  RETURN m;
END
$fn$;`,
  ],
  run: (n) => `DECLARE
      dust float8 := lim * 1e-12::float8;
      used float8 := 0;
      anchor float8 := now;
      intervals float8; after float8; reset float8;
    BEGIN
      IF s IS NOT NULL AND s[2] > 0 THEN
        used := s[2];
        anchor := s[3];
        intervals := floor((now - anchor) / b);
        IF intervals > 0 THEN
          used := used - intervals * a;
          anchor := anchor + intervals * b;
          IF used <= dust THEN
            used := 0;
            anchor := now;
          END IF;
        END IF;
      END IF;
      after := used + cost;
      IF after <= lim THEN
        ${setRemaining('lim - after')}
        IF cost = 0 THEN
          -- Nothing changes: the wait counts from the stored state.
          reset := CASE WHEN used > 0 THEN s[3] + ${n.fn('intervals')}(s[2], 0, 0, a, dust) * b - now ELSE 0 END;
          RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0')};
        END IF;
        reset := anchor + ${n.fn('intervals')}(after, 0, 0, a, dust) * b - now;
        RETURN ${evaluation(1, 0, 'rem', '0', 'reset', '0', ['0', 'after', 'anchor'])};
      END IF;
      ${setRemaining('lim - used')}
      RETURN ${evaluation(
        0,
        1,
        'rem',
        `s[3] + ${n.fn('intervals')}(s[2], cost, lim, a, dust) * b - now`,
        `s[3] + ${n.fn('intervals')}(s[2], 0, 0, a, dust) * b - now`,
        '0',
      )};
    END;`,
  // Only while no refill boundary has passed since the grant.
  refund: () => `BEGIN
      IF st[2] > 0 AND st[3] <= p_leased_at
          AND floor((now - st[3]) / b) = floor((p_leased_at - st[3]) / b) THEN
        nx := ARRAY[st[1], greatest(0, st[2] - p_unused), st[3]];
      END IF;
    END;`,
};
