import { charge, evaluation, setRemaining } from '../sql.js';
import type { SqlPort } from './sql-port.js';

/**
 * The meter's transition, written once in SQL: the verdict, the next state and the moment the state written
 * is untouched again. The meter branch of the decide function (`METER_PORT`) and the plain meter statements
 * (meter-fast.ts) are both generated from it. `tat` and `blockedUntil` are the state read (NULL: none);
 * `charge` is `meterCharge(cost, T)` and `room` is `τ + slack − charge`, at least 0 (a charge beyond τ is
 * refused before: `exceeds-capacity`). Every number is a whole µs below 2^53, so float8 computes them
 * exactly, and `TAT ≤ now + room` is the model's `owed − τ ≤ slack` (model/meter.ts), with a TAT behind now
 * admitted as the model admits it.
 */
export const METER_SQL = {
  /** The penalty box holds: nothing changes. */
  blocked: (blockedUntil: string, now: string): string => `${blockedUntil} > ${now}`,
  /** Admitted (when not blocked). */
  admits: (tat: string, now: string, room: string): string => `coalesce(${tat}, 0) <= ${now} + ${room}`,
  /** The TAT once admitted: the state written is `[0, admittedTat]`. */
  admittedTat: (tat: string, now: string, charge: string): string => `greatest(${tat}, ${now}) + ${charge}`,
  /** The state a denial writes under a penalty box: `[now + blockUs, tat]`. */
  penalty: (now: string, blockUs: string, tat: string): readonly [string, string] => [`${now} + ${blockUs}`, tat],
  /** When the state `[blockedUntil, tat]` is untouched again: the later of its two numbers. */
  untouchedAt: (blockedUntil: string, tat: string): string => `greatest(${blockedUntil}, ${tat})`,
} as const;

/** The PL/pgSQL port of the meter kind: model/meter.ts: GCRA, continuous token bucket, leaky bucket (a = T, b = τ, c = 1 queue mode). */
export const METER_PORT: SqlPort = {
  functions: () => [],
  run: () => `DECLARE
      ch float8 := ${charge('cost', 'a')};
      base float8; newtat float8; owed float8; owed_before float8; slack float8; queue boolean;
      delay float8;
    BEGIN
      queue := c = 1;
      slack := CASE WHEN queue THEN 0 ELSE maxdelay END;
      base := greatest(s[2], now);
      owed_before := base - now;
      IF ${METER_SQL.admits('s[2]', 'now', 'b + slack - ch')} THEN
        newtat := ${METER_SQL.admittedTat('s[2]', 'now', 'ch')};
        owed := newtat - now;
        ${setRemaining('(b - owed) / a')}
        delay := CASE WHEN queue THEN owed_before WHEN owed > b THEN owed - b ELSE 0 END;
        IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'owed', 'delay')}; END IF;
        RETURN ${evaluation(1, 0, 'rem', '0', 'owed', 'delay', ['0', 'newtat'])};
      END IF;
      ${setRemaining('(b - owed_before) / a')}
      RETURN ${evaluation(0, 1, 'rem', 'owed_before + ch - b - slack', 'owed_before', '0')};
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
