import { MAX_COST } from '../../model/cost.js';
import type { KindName } from '../../model/kinds.js';
import { alignDown, charge, evaluation, type SqlNames, setRemaining } from './sql.js';

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

/** The PL/pgSQL port of each kind of the model: one per kind, or this does not build. */
export const SQL_PORTS: { readonly [N in KindName]: SqlPort } = {
  // meter.ts: GCRA, continuous token bucket, leaky bucket (a = T, b = τ, c = 1 queue mode).
  meter: {
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
  },

  // token-bucket.ts, interval refill (a = refill amount, b = interval); TOKEN_DUST = 1e-12.
  'token-interval': {
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
  },

  // fixed-window.ts (a = window, b = 1 count every call, c = 1 first-request aligned).
  'fixed-window': {
    functions: () => [],
    run: () => `DECLARE
        start float8; cnt float8 := 0; after float8; reset float8;
      BEGIN
        IF c = 0 THEN
          start := ${alignDown('now', 'a')};
          IF s IS NOT NULL AND s[2] = start THEN cnt := s[3]; END IF;
        ELSIF s IS NOT NULL AND s[3] > 0 AND now < s[2] + a THEN
          start := s[2];
          cnt := s[3];
        ELSE
          start := now;
        END IF;
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
          IF c = 0 THEN
            start := ${alignDown('now', 'a')};
            IF s IS NOT NULL AND s[2] = start THEN cnt := s[3]; END IF;
          ELSIF s IS NOT NULL AND s[3] > 0 AND now < s[2] + a THEN
            start := s[2];
            cnt := s[3];
          ELSE
            start := now;
          END IF;
          nx := ARRAY[coalesce(s[1], 0), start, least(cnt + cost, ${MAX_COST})]::float8[];
        END;`,
    },
  },

  // sliding-window.ts (a = window).
  'sliding-window': {
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
  },

  // sliding-log.ts (a = window, b = minimum gap, c = 1 count denied).
  'sliding-log': {
    functions: (n) => [
      // `append`: the live entries from `f` (model index), then the event, merged at the same µs.
      `
  CREATE OR REPLACE FUNCTION ${n.fn('append')}(s float8[], f int, now float8, cost float8)
  RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
  DECLARE
    nx float8[] := ARRAY[0]::float8[] || coalesce(s[f + 1:array_length(s, 1)], '{}'::float8[]);
    k int := array_length(nx, 1);
  BEGIN
    IF k > 1 AND nx[k - 1] = now THEN
      nx[k] := nx[k] + cost;
    ELSE
      nx[k + 1] := now;
      nx[k + 2] := cost;
    END IF;
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
    WHILE f < len AND s[f + 1] <= cutoff LOOP f := f + 2; END LOOP;
    ap := ${n.fn('append')}(s, f, now, cost);
    m := array_length(ap, 1);
    keep := m;
    WHILE keep > 1 AND total < lim LOOP
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
        WHILE f < len AND s[f + 1] <= cutoff LOOP f := f + 2; END LOOP;
        -- Summed newest first, as sumWait() walks.
        i := len - 1;
        WHILE i > f LOOP
          total := total + s[i + 1];
          i := i - 2;
        END LOOP;
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
          lft := 0;
          i := len - 2;
          WHILE i >= f LOOP
            lft := lft + s[i + 2];
            IF lft + cost > lim THEN
              sw := s[i + 1] + a - now;
              EXIT;
            END IF;
            i := i - 2;
          END LOOP;
          IF sw IS NULL THEN sw := s[len - 1] + a - now; END IF;
        END IF;
        RETURN ${evaluation(0, 1, 'rem', 'greatest(gapwait, sw)', 'reset', '0')};
      END;`,
    // The event logged at the grant's µs loses the units, and goes when nothing is left of it.
    refund: () => `DECLARE
        len int := coalesce(array_length(st, 1), 0);
        i int := 2;
        left_over float8;
      BEGIN
        WHILE i < len LOOP
          IF st[i] = p_leased_at THEN
            left_over := st[i + 1] - p_unused;
            IF left_over > 0 THEN
              nx := st;
              nx[i + 1] := left_over;
            ELSE
              nx := st[1:i - 1] || coalesce(st[i + 2:len], '{}'::float8[]);
            END IF;
            EXIT;
          END IF;
          i := i + 2;
        END LOOP;
      END;`,
    logDenied: {
      when: (_b, c) => `${c} = 1`,
      count: (n) => `nx := ${n.fn('log_denied')}(lim, a, s, now, cost);`,
    },
  },

  // bucketed-window.ts (a = window, b = precision: the buckets' width).
  'bucketed-window': {
    functions: () => [],
    run: () => `DECLARE
        len int := coalesce(array_length(s, 1), 0);
        cur float8 := ${alignDown('now', 'b')};
        cutoff float8;
        f int := 1;
        i int; total float8 := 0; untouched float8 := 0; nx float8[]; k int; newer float8; wait float8;
      BEGIN
        cutoff := cur - a;
        WHILE f < len AND s[f + 1] <= cutoff LOOP f := f + 2; END LOOP;
        -- Summed newest first, as the wait walks.
        i := len - 1;
        WHILE i > f LOOP
          total := total + s[i + 1];
          i := i - 2;
        END LOOP;
        IF len > f THEN untouched := s[len - 1] + a - now; END IF;
        IF total + cost <= lim THEN
          ${setRemaining('lim - (total + cost)')}
          IF cost = 0 THEN RETURN ${evaluation(1, 0, 'rem', '0', 'untouched', '0')}; END IF;
          -- The buckets still in the window, with the cost added to the current one.
          nx := ARRAY[0]::float8[] || coalesce(s[f + 1:len], '{}'::float8[]);
          k := array_length(nx, 1);
          IF k > 1 AND nx[k - 1] = cur THEN
            nx[k] := nx[k] + cost;
          ELSE
            nx[k + 1] := cur;
            nx[k + 2] := cost;
          END IF;
          RETURN ${evaluation(1, 0, 'rem', '0', 'cur + a - now', '0', 'nx')};
        END IF;
        ${setRemaining('lim - total')}
        -- From the newest bucket back: the first that no longer fits beside the newer ones must leave.
        wait := s[len - 1] + a - now;
        newer := 0;
        i := len - 2;
        WHILE i >= f LOOP
          newer := newer + s[i + 2];
          IF newer + cost > lim THEN
            wait := s[i + 1] + a - now;
            EXIT;
          END IF;
          i := i - 2;
        END LOOP;
        RETURN ${evaluation(0, 1, 'rem', 'wait', 'untouched', '0')};
      END;`,
    // The bucket of the grant loses the units, and goes when nothing is left of it.
    refund: () => `DECLARE
        len int := coalesce(array_length(st, 1), 0);
        bucket float8 := ${alignDown('p_leased_at', 'b')};
        i int := 2;
        left_over float8;
      BEGIN
        WHILE i < len LOOP
          IF st[i] = bucket THEN
            left_over := st[i + 1] - p_unused;
            IF left_over > 0 THEN
              nx := st;
              nx[i + 1] := left_over;
            ELSE
              nx := st[1:i - 1] || coalesce(st[i + 2:len], '{}'::float8[]);
            END IF;
            EXIT;
          END IF;
          i := i + 2;
        END LOOP;
      END;`,
  },
};
