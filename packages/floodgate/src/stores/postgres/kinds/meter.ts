import { charge, evaluation, setRemaining } from '../sql.js';
import type { SqlPort } from './sql-port.js';

/** The PL/pgSQL port of the meter kind: model/meter.ts: GCRA, continuous token bucket, leaky bucket (a = T, b = τ, c = 1 queue mode). */
export const METER_PORT: SqlPort = {
  functions: () => [],
  run: () => `DECLARE
      tat float8; base float8; newtat float8; owed float8; owed_before float8; slack float8; queue boolean;
      delay float8;
    BEGIN
      tat := CASE WHEN s IS NULL THEN now ELSE s[2] END;
      base := greatest(tat, now);
      newtat := base + ${charge('cost', 'a')};
      owed := newtat - now;
      owed_before := base - now;
      queue := c = 1;
      slack := CASE WHEN queue THEN 0 ELSE maxdelay END;
      IF owed - b <= slack THEN
        ${setRemaining('(b - owed) / a')}
        delay := CASE WHEN queue THEN owed_before WHEN owed > b THEN owed - b ELSE 0 END;
        IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'owed', 'delay')}; END IF;
        RETURN ${evaluation(1, 0, 'rem', '0', 'owed', 'delay', ['0', 'newtat'])};
      END IF;
      ${setRemaining('(b - owed_before) / a')}
      RETURN ${evaluation(0, 1, 'rem', 'owed - b - slack', 'owed_before', '0')};
    END;`,
  // The part of the lease still ahead of now comes off the TAT.
  refund: () => `DECLARE
      charged float8 := ${charge('p_leased', 'a')};
      ahead float8 := p_leased_at + charged - now;
      back float8 := least(charged - ${charge('(p_leased - p_unused)', 'a')}, ahead);
    BEGIN
      IF back > 0 THEN nx := ARRAY[st[1], st[2] - back]; END IF;
    END;`,
};
