import { EXPIRY_GRAIN_US, PRUNE_GRACE_US, quoteIdentifier } from '../sql/common.js';

/**
 * What the names of the objects `migrate()` creates beside a table (other than its functions) carry
 * after the table's name. Tables, indexes and composite types share one namespace in PostgreSQL (every
 * table is also a type of its name), so these names must never be a table's: table names may not
 * contain it (see `validatePostgresTable` in postgres-store.ts).
 */
export const RESERVED_INFIX = '__fg_';

/** The qualified, quoted names of everything `migrate()` creates for one table. */
export interface SqlNames {
  schema: string;
  table: string;
  /** `"schema"."table"` */
  qualified: string;
  decide: string;
  policy: string;
  run: string;
  settle: string;
  append: string;
  coalesce: string;
  logDenied: string;
  intervals: string;
  cancel: string;
  refund: string;
  /** A composite `(s float8[])`: an array of these holds states of different lengths. */
  stateType: string;
  /** Unquoted names, in the table's schema, of the composite type, the expiry index and the primary key. */
  stateTypeName: string;
  expiryIndexName: string;
  primaryKeyName: string;
}

export function sqlNames(schema: string, table: string): SqlNames {
  const q = (name: string) => `${quoteIdentifier(schema)}.${quoteIdentifier(name)}`;
  return {
    schema,
    table,
    qualified: q(table),
    decide: q(`${table}_decide`),
    policy: q(`${table}_policy`),
    run: q(`${table}_run`),
    settle: q(`${table}_settle`),
    append: q(`${table}_append`),
    coalesce: q(`${table}_coalesce`),
    logDenied: q(`${table}_log_denied`),
    intervals: q(`${table}_intervals`),
    cancel: q(`${table}_cancel`),
    refund: q(`${table}_refund`),
    stateType: q(`${table}${RESERVED_INFIX}state`),
    stateTypeName: `${table}${RESERVED_INFIX}state`,
    expiryIndexName: `${table}${RESERVED_INFIX}expires_at`,
    primaryKeyName: `${table}${RESERVED_INFIX}pkey`,
  };
}

/** The one statement a batch of decisions is: see `decideFunction` for the parameters. */
export function decideStatement(n: SqlNames): string {
  return `SELECT ${n.decide}($1::text[], $2::int, $3::float8[], $4::float8[]) AS r`;
}

/** Cancelling a reservation: see `cancelFunction` for the parameters. */
export function cancelStatement(n: SqlNames): string {
  return `SELECT ${n.cancel}($1::text[], $2::float8, $3::float8, $4::float8[]) AS r`;
}

/** Giving back a lease's unused units: see `refundFunction` for the parameters. */
export function refundStatement(n: SqlNames): string {
  return `SELECT ${n.refund}($1::text[], $2::float8, $3::float8, $4::float8, $5::float8, $6::float8[]) AS r`;
}

/**
 * The whole schema in one idempotent statement: a DO block run under an advisory lock, so that several
 * processes migrating at once neither fail nor interleave.
 */
export function migrationStatement(n: SqlNames, unlogged: boolean): string {
  const persistence = unlogged ? 'u' : 'p';
  const literal = (s: string) => `'${s.replaceAll("'", "''")}'`;
  return `DO $migrate$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('floodgate migrate'));
  IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ${literal(n.schema)}) THEN
    CREATE SCHEMA ${quoteIdentifier(n.schema)};
  END IF;
  -- The name may already be taken by another kind of relation (an index, a view): say so, never use it.
  IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
      WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.table)} AND c.relkind <> 'r') THEN
    RAISE EXCEPTION 'floodgate: % exists in schema % and is not a table', ${literal(n.table)}, ${literal(n.schema)}
      USING ERRCODE = '42809';
  END IF;
  CREATE ${unlogged ? 'UNLOGGED ' : ''}TABLE IF NOT EXISTS ${n.qualified} (
    key text COLLATE "C" NOT NULL,
    state float8[],
    expires_at bigint NOT NULL,
    CONSTRAINT ${quoteIdentifier(n.primaryKeyName)} PRIMARY KEY (key)
  ) WITH (fillfactor = 80);
  IF (SELECT c.relpersistence FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
      WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.table)}) <> '${persistence}' THEN
    ALTER TABLE ${n.qualified} SET ${unlogged ? 'UNLOGGED' : 'LOGGED'};
  END IF;
  -- The composite type of the states, checked by its shape, not just its name.
  IF NOT EXISTS (SELECT 1 FROM pg_type y JOIN pg_namespace s ON s.oid = y.typnamespace
      WHERE s.nspname = ${literal(n.schema)} AND y.typname = ${literal(n.stateTypeName)}) THEN
    CREATE TYPE ${n.stateType} AS (s float8[]);
  ELSIF ${stateTypeShape(n.schema, n.stateTypeName, literal)} <> 1 THEN
    RAISE EXCEPTION 'floodgate: type %.% exists and is not a composite (s float8[])', ${literal(n.schema)},
      ${literal(n.stateTypeName)} USING ERRCODE = '42809';
  END IF;
  -- Earlier versions named the index <table>_expires_at and the primary key <table>_pkey: both are renamed
  -- (a change of the catalog only, no index is built), unless the new name is taken already.
  IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_namespace s ON s.oid = x.relnamespace
      WHERE s.nspname = ${literal(n.schema)} AND x.relname = ${literal(`${n.table}_expires_at`)}
        AND i.indrelid = ${literal(n.qualified)}::regclass) THEN
    IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
        WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.expiryIndexName)}) THEN
      DROP INDEX ${quoteIdentifier(n.schema)}.${quoteIdentifier(`${n.table}_expires_at`)};
    ELSE
      ALTER INDEX ${quoteIdentifier(n.schema)}.${quoteIdentifier(`${n.table}_expires_at`)}
        RENAME TO ${quoteIdentifier(n.expiryIndexName)};
    END IF;
  END IF;
  CREATE INDEX IF NOT EXISTS ${quoteIdentifier(n.expiryIndexName)} ON ${n.qualified} (expires_at);
  IF EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = ${literal(n.qualified)}::regclass AND k.contype = 'p'
        AND k.conname = ${literal(`${n.table}_pkey`)})
      AND NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
        WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.primaryKeyName)}) THEN
    ALTER TABLE ${n.qualified} RENAME CONSTRAINT ${quoteIdentifier(`${n.table}_pkey`)}
      TO ${quoteIdentifier(n.primaryKeyName)};
  END IF;
${[
  appendFunction(n),
  coalesceFunction(n),
  logDeniedFunction(n),
  intervalsFunction(n),
  runFunction(n),
  policyFunction(n),
  settleFunction(n),
  decideFunction(n),
  cancelFunction(n),
  refundFunction(n),
].join('\n')}
  -- Earlier versions named the type <table>_state, a name another table's row type may need: the
  -- functions above no longer use it, so it goes (when it is that type, and nothing else uses it).
  IF ${stateTypeShape(n.schema, `${n.table}_state`, literal)} = 1 THEN
    BEGIN
      DROP TYPE ${quoteIdentifier(n.schema)}.${quoteIdentifier(`${n.table}_state`)};
    EXCEPTION WHEN dependent_objects_still_exist THEN
      NULL;
    END;
  END IF;
END
$migrate$`;
}

/** SQL counting the types of that name that are a stand-alone composite `(s float8[])`: 1 or 0. */
function stateTypeShape(schema: string, name: string, literal: (s: string) => string): string {
  return `(SELECT count(*) FROM pg_type y JOIN pg_namespace s ON s.oid = y.typnamespace
      JOIN pg_class c ON c.oid = y.typrelid
      WHERE s.nspname = ${literal(schema)} AND y.typname = ${literal(name)} AND c.relkind = 'c'
        AND (SELECT array_agg(a.attname::text || ' ' || format_type(a.atttypid, a.atttypmod))
          FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
          = ARRAY['s double precision[]'])`;
}

/*
 * The model, ported to PL/pgSQL. Every function mirrors one in `src/model/` with the same operations in
 * the same order on float8 (IEEE doubles, like JavaScript numbers), so both compute bit-identical
 * numbers; the randomized comparison in the conformance suite checks it. Arrays are 1-based here: the
 * model's `s[i]` is `s[i + 1]`.
 *
 * An evaluation travels as one float8[]: [allowed 0/1, reason, remaining, retryAfterUs, resetAfterUs,
 * delayUs, length of the next state (-1: unchanged), …next state]. Reasons: 0 ok, 1 limit, 2 blocked,
 * 3 exceeds-capacity.
 */

/** sliding-log.ts `append`: the live entries from `f` (model index), then the event, merged at the same µs. */
function appendFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.append}(s float8[], f int, now float8, cost float8)
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
  $fn$;`;
}

/**
 * sliding-log.ts `coalesce`: merges adjacent entries until at most ceil(lim) + 1 are left, each time the
 * pair that moves the least cost-time forward (oldest on ties) into (later time, summed cost). The
 * bound is compared as a float8, so no limit overflows an int.
 */
function coalesceFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.coalesce}(lim float8, s float8[])
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
  $fn$;`;
}

/** sliding-log.ts `logDeniedAttempt`. */
function logDeniedFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.logDenied}(lim float8, a float8, s float8[], now float8, cost float8)
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
    ap := ${n.append}(s, f, now, cost);
    m := array_length(ap, 1);
    keep := m;
    WHILE keep > 1 AND total < lim LOOP
      keep := keep - 2;
      total := total + ap[keep + 2];
    END LOOP;
    IF keep <= 1 THEN RETURN ${n.coalesce}(lim, ap); END IF;
    RETURN ${n.coalesce}(lim, ARRAY[ap[1]] || ap[keep + 1:m]);
  END
  $fn$;`;
}

/**
 * token-bucket.ts `intervalsUntil`: the fewest whole intervals m >= 1 after a state holding `used` for
 * which the evaluation admits `cost` against `target`, refills of `refill` (`a`), dust snapped to 0.
 */
function intervalsFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.intervals}(used float8, cost float8, target float8, refill float8, dust float8)
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
  $fn$;`;
}

/**
 * One algorithm on one state (`meter.ts`, `token-bucket.ts`, `fixed-window.ts`, `sliding-window.ts`,
 * `sliding-log.ts`), without the penalty box and impossible costs (those are `policy`).
 */
function runFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.run}(
    kind int, lim float8, a float8, b float8, c float8, s float8[], now float8, cost float8, maxdelay float8)
  RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
  DECLARE
    tat float8; base float8; newtat float8; owed float8; owed_before float8; slack float8; queue boolean;
    used float8; anchor float8; intervals float8; after float8; start float8; cnt float8; previous float8;
    elapsed float8; estimate float8; at float8; k int; retry float8; reset float8; rem float8; fl float8;
    len int; f int; i int; total float8; last float8; hold float8; gapwait float8; lft float8; sw float8;
    cutoff float8; nx float8[]; dust float8;
  BEGIN
    IF kind = 1 THEN
      -- meter.ts: GCRA, continuous token bucket, leaky bucket (a = T, b = tau, c = 1 queue mode)
      tat := CASE WHEN s IS NULL THEN now ELSE s[2] END;
      base := greatest(tat, now);
      newtat := base + ceil(cost * a - cost * a * 1e-15);
      owed := newtat - now;
      owed_before := base - now;
      queue := c = 1;
      slack := CASE WHEN queue THEN 0 ELSE maxdelay END;
      IF owed - b <= slack THEN
        fl := floor((b - owed) / a);
        rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
        IF cost = 0 THEN
          RETURN ARRAY[1, 0, rem, 0, owed,
            CASE WHEN queue THEN owed_before WHEN owed > b THEN owed - b ELSE 0 END, -1]::float8[];
        END IF;
        RETURN ARRAY[1, 0, rem, 0, owed,
          CASE WHEN queue THEN owed_before WHEN owed > b THEN owed - b ELSE 0 END, 2, 0, newtat]::float8[];
      END IF;
      fl := floor((b - owed_before) / a);
      rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
      RETURN ARRAY[0, 1, rem, owed - b - slack, owed_before, 0, -1]::float8[];
    ELSIF kind = 2 THEN
      -- token-bucket.ts, interval refill (a = refill amount, b = interval); TOKEN_DUST = 1e-12
      dust := lim * 1e-12::float8;
      used := 0;
      anchor := now;
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
        fl := floor(lim - after);
        rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
        IF cost = 0 THEN
          -- Nothing changes: the wait counts from the stored state.
          reset := CASE WHEN used > 0 THEN s[3] + ${n.intervals}(s[2], 0, 0, a, dust) * b - now ELSE 0 END;
          RETURN ARRAY[1, 0, rem, 0, reset, 0, -1]::float8[];
        END IF;
        reset := anchor + ${n.intervals}(after, 0, 0, a, dust) * b - now;
        RETURN ARRAY[1, 0, rem, 0, reset, 0, 3, 0, after, anchor]::float8[];
      END IF;
      fl := floor(lim - used);
      rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
      RETURN ARRAY[0, 1, rem, s[3] + ${n.intervals}(s[2], cost, lim, a, dust) * b - now,
        s[3] + ${n.intervals}(s[2], 0, 0, a, dust) * b - now, 0, -1]::float8[];
    ELSIF kind = 3 THEN
      -- fixed-window.ts (a = window, c = 1 first-request aligned). Times are whole µs, so the bigint
      -- remainder is exactly JavaScript's %.
      cnt := 0;
      IF c = 0 THEN
        start := now - (now::bigint % a::bigint)::float8;
        IF s IS NOT NULL AND s[2] = start THEN cnt := s[3]; END IF;
      ELSIF s IS NOT NULL AND s[3] > 0 AND now < s[2] + a THEN
        start := s[2];
        cnt := s[3];
      ELSE
        start := now;
      END IF;
      after := cnt + cost;
      IF after <= lim THEN
        fl := floor(lim - after);
        rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
        reset := CASE WHEN after > 0 THEN start + a - now ELSE 0 END;
        IF cost = 0 THEN RETURN ARRAY[1, 0, rem, 0, reset, 0, -1]::float8[]; END IF;
        RETURN ARRAY[1, 0, rem, 0, reset, 0, 3, 0, start, after]::float8[];
      END IF;
      fl := floor(lim - cnt);
      rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
      RETURN ARRAY[0, 1, rem, start + a - now, CASE WHEN cnt > 0 THEN start + a - now ELSE 0 END, 0, -1]::float8[];
    ELSIF kind = 4 THEN
      -- sliding-window.ts (a = window)
      start := now - (now::bigint % a::bigint)::float8;
      cnt := 0;
      previous := 0;
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
        fl := floor(lim - (estimate + cost));
        rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
        reset := CASE WHEN after > 0 THEN start + 2 * a - now WHEN previous > 0 THEN start + a - now ELSE 0 END;
        IF cost = 0 THEN RETURN ARRAY[1, 0, rem, 0, reset, 0, -1]::float8[]; END IF;
        RETURN ARRAY[1, 0, rem, 0, reset, 0, 4, 0, start, after, previous]::float8[];
      END IF;
      fl := floor(lim - estimate);
      rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
      -- retryAfter(): later in this window as the previous count fades, or in the next one.
      retry := NULL;
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
      RETURN ARRAY[0, 1, rem, retry,
        CASE WHEN cnt > 0 THEN start + 2 * a - now WHEN previous > 0 THEN start + a - now ELSE 0 END, 0, -1]::float8[];
    END IF;
    -- kind 5, sliding-log.ts (a = window, b = minimum gap, c = 1 count denied)
    len := coalesce(array_length(s, 1), 0);
    cutoff := now - a;
    f := 1;
    WHILE f < len AND s[f + 1] <= cutoff LOOP f := f + 2; END LOOP;
    -- Summed newest first, as sumWait() walks.
    total := 0;
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
      fl := floor(lim - (total + cost));
      rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
      IF cost = 0 THEN RETURN ARRAY[1, 0, rem, 0, reset, 0, -1]::float8[]; END IF;
      nx := ${n.coalesce}(lim, ${n.append}(s, f, now, cost));
      RETURN ARRAY[1, 0, rem, 0, hold, 0, array_length(nx, 1)]::float8[] || nx;
    END IF;
    fl := floor(lim - total);
    rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;
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
    RETURN ARRAY[0, 1, rem, greatest(gapwait, sw), reset, 0, -1]::float8[];
  END
  $fn$;`;
}

/** decide.ts `evaluatePolicy`: impossible costs, the penalty box, then the algorithm. */
function policyFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.policy}(
    kind int, lim float8, a float8, b float8, c float8, s float8[], now float8, cost float8, maxdelay float8)
  RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
  DECLARE
    r float8[];
    blocked_until float8;
    w float8;
  BEGIN
    IF (kind = 1 AND ceil(cost * a - cost * a * 1e-15) > b) OR (kind <> 1 AND cost > lim) THEN
      r := ${n.run}(kind, lim, a, b, c, s, now, 0, 0);
      RETURN ARRAY[0, 3, r[3], 'Infinity', r[5], 0, -1]::float8[];
    END IF;
    blocked_until := CASE WHEN s IS NULL THEN 0 ELSE s[1] END;
    IF blocked_until > now THEN
      -- The later of the block's end and the policy's own wait for this cost; the key as it stands.
      r := ${n.run}(kind, lim, a, b, c, s, now, cost, maxdelay);
      w := greatest(blocked_until - now, CASE WHEN r[1] = 0 THEN r[4] ELSE 0 END);
      r := ${n.run}(kind, lim, a, b, c, s, now, 0, 0);
      RETURN ARRAY[0, 2, 0, w, greatest(r[5], w), 0, -1]::float8[];
    END IF;
    RETURN ${n.run}(kind, lim, a, b, c, s, now, cost, maxdelay);
  END
  $fn$;`;
}

/** decide.ts `settleDenied`: one policy's report when the call as a whole was denied. */
function settleFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.settle}(
    kind int, lim float8, blk float8, a float8, b float8, c float8, s float8[], now float8, cost float8,
    do_commit boolean, e float8[])
  RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
  DECLARE
    allowed_here boolean := e[1] = 1;
    r float8[];
    w float8;
    nx float8[] := s;
    has_next boolean := false;
    every_call boolean;
    cnt float8;
    start float8;
  BEGIN
    IF allowed_here THEN
      r := ${n.policy}(kind, lim, a, b, c, s, now, 0, 0);
      e := ARRAY[1, 0, r[3], 0, r[5], 0]::float8[];
    ELSE
      e := e[1:6];
    END IF;
    IF NOT do_commit OR cost = 0 OR e[2] = 2 THEN RETURN e || ARRAY[-1]::float8[]; END IF;
    -- A fixed window with countDenied (b = 1) counts every call, a cost above its limit too.
    every_call := kind = 3 AND b = 1;
    IF e[2] = 3 AND NOT every_call THEN RETURN e || ARRAY[-1]::float8[]; END IF;
    IF every_call OR (kind = 5 AND c = 1) THEN
      IF every_call THEN
        -- fixed-window.ts countFixedWindowHit: the window's count plus the cost, at most 2^53 - 1.
        cnt := 0;
        IF c = 0 THEN
          start := now - (now::bigint % a::bigint)::float8;
          IF s IS NOT NULL AND s[2] = start THEN cnt := s[3]; END IF;
        ELSIF s IS NOT NULL AND s[3] > 0 AND now < s[2] + a THEN
          start := s[2];
          cnt := s[3];
        ELSE
          start := now;
        END IF;
        nx := ARRAY[coalesce(s[1], 0), start, least(cnt + cost, 9007199254740991)]::float8[];
      ELSE
        nx := ${n.logDenied}(lim, a, s, now, cost);
      END IF;
      r := ${n.policy}(kind, lim, a, b, c, nx, now, cost, 0);
      IF allowed_here THEN
        -- Did not deny, but the counted attempt may leave no room: its wait for the same cost counts.
        w := CASE WHEN r[1] = 1 THEN 0 ELSE r[4] END;
        r := ${n.policy}(kind, lim, a, b, c, nx, now, 0, 0);
        e := ARRAY[1, 0, r[3], w, greatest(r[5], w), 0]::float8[];
      ELSE
        e := r[1:6];
      END IF;
      has_next := true;
    END IF;
    IF blk > 0 AND e[2] = 1 THEN
      IF nx IS NULL THEN
        nx := array_fill(0::float8, ARRAY[CASE kind WHEN 1 THEN 2 WHEN 4 THEN 4 WHEN 5 THEN 1 ELSE 3 END]);
      END IF;
      nx[1] := now + blk;
      e[3] := 0;
      -- The retry passes both the block and the policy's own wait for this cost.
      e[4] := greatest(blk, e[4]);
      e[5] := greatest(e[5], e[4]);
      has_next := true;
    END IF;
    IF NOT has_next THEN RETURN e || ARRAY[-1]::float8[]; END IF;
    RETURN e || ARRAY[array_length(nx, 1)]::float8[] || nx;
  END
  $fn$;`;
}

/**
 * A batch of calls, decided in arrival order in one transaction: decide.ts `decide` for each, with the
 * states kept in memory between calls on the same key and written once at the end.
 *
 * Parameters:
 * - `p_keys`: the distinct row keys the batch touches; the first `p_locked` are the ones it may write.
 * - `p_req`: 5 numbers per call: op (0 check, 1 limit, 2 reset), cost, nowUs (NaN: the server's
 *   `clock_timestamp()`, read once the locks are held), maxDelayUs, number of policies.
 * - `p_pol`: 7 numbers per policy of each call, in order: key index (1-based, into p_keys), kind, limit,
 *   blockUs, a, b, c (see compile.ts).
 *
 * Returns, as comma-separated text, for each call but resets: allowed (0/1), the µs it was decided at,
 * then 6 numbers per policy: allowed, reason, remaining, retryAfterUs, resetAfterUs, delayUs.
 *
 * Locking, deadlock-free: first the missing rows are created empty, in key order (a transaction only
 * waits there for another that is creating the same key, and that one never waits for a transaction
 * still creating rows); then all rows are locked in key order (waits only for transactions that hold
 * rows, all taken in the same order). A row deleted in between (expired and pruned) is created and
 * locked on its own. A batch that created rows deletes twice as many expired ones (at least 16, expired
 * for a minute) at the end, through the expiry index, skipping rows others hold: pruning never waits,
 * never scans the table, and keeps up with growth.
 */
function decideFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.decide}(p_keys text[], p_locked int, p_req float8[], p_pol float8[])
  RETURNS text LANGUAGE plpgsql VOLATILE
  -- The result is float8s as text: shortest exact digits, whatever the session's extra_float_digits.
  SET extra_float_digits = 3 AS $fn$
  DECLARE
    nkeys int := coalesce(array_length(p_keys, 1), 0);
    nreq int := coalesce(array_length(p_req, 1), 0) / 5;
    st ${n.stateType}[] := array_fill(NULL::${n.stateType}, ARRAY[greatest(nkeys, 1)]);
    seen boolean[] := array_fill(false, ARRAY[greatest(nkeys, 1)]);
    dirty boolean[] := array_fill(false, ARRAY[greatest(nkeys, 1)]);
    expiry bigint[] := array_fill(0::bigint, ARRAY[greatest(nkeys, 1)]);
    res float8[] := '{}';
    created int := 0;
    locked int := 0;
    resets boolean := false;
    s float8[];
    r float8[];
    rb float8[];
    ro int[] := '{}';
    i int; j int; k int; q int; ki int; np int; pj int; op int; base int; kind int; n_len int;
    lim float8; a float8; b float8; c float8; blocked_until float8; bwait float8;
    cost float8; now float8; maxdelay float8; server_now float8; prune_now float8; ts timestamp;
    all_ok boolean; impossible boolean; is_commit boolean; optimistic boolean := false;
  BEGIN
    IF p_locked = 1 THEN
      -- One row to write: lock it if it exists. A new key is decided optimistically and inserted at
      -- the end; if another transaction created it meanwhile, the insert finds it and the batch is
      -- decided again on the row, locked (below). So a new key costs one row version, not two.
      SELECT t.state INTO s FROM ${n.qualified} t WHERE t.key = p_keys[1] FOR UPDATE;
      optimistic := NOT FOUND;
      st[1] := ROW(s);
    ELSIF p_locked > 1 THEN
      INSERT INTO ${n.qualified} AS t (key, state, expires_at)
        SELECT u.k, NULL, 0 FROM unnest(p_keys[1:p_locked]) AS u(k) ORDER BY u.k COLLATE "C"
        ON CONFLICT DO NOTHING;
      GET DIAGNOSTICS created = ROW_COUNT;
      FOR i, s IN
        SELECT u.i, t.state FROM unnest(p_keys[1:p_locked]) WITH ORDINALITY AS u(k, i)
          JOIN ${n.qualified} t ON t.key = u.k ORDER BY t.key FOR UPDATE OF t
      LOOP
        st[i] := ROW(s);
        seen[i] := true;
        locked := locked + 1;
      END LOOP;
      IF locked < p_locked THEN
        FOR i IN 1..p_locked LOOP
          CONTINUE WHEN seen[i];
          LOOP
            SELECT t.state INTO s FROM ${n.qualified} t WHERE t.key = p_keys[i] FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO ${n.qualified} (key, state, expires_at) VALUES (p_keys[i], NULL, 0) ON CONFLICT DO NOTHING;
            IF FOUND THEN
              created := created + 1;
              s := NULL;
              EXIT;
            END IF;
          END LOOP;
          st[i] := ROW(s);
        END LOOP;
      END IF;
    END IF;
    IF nkeys > p_locked THEN
      FOR i, s IN
        SELECT u.i, t.state FROM unnest(p_keys[p_locked + 1:nkeys]) WITH ORDINALITY AS u(k, i)
          JOIN ${n.qualified} t ON t.key = u.k
      LOOP
        st[p_locked + i] := ROW(s);
      END LOOP;
    END IF;

    -- Runs once, unless a new key's optimistic insert finds the row created meanwhile.
    <<attempt>>
    LOOP
      pj := 0;
      FOR j IN 0..nreq - 1 LOOP
        op := p_req[j * 5 + 1]::int;
        cost := p_req[j * 5 + 2];
        now := p_req[j * 5 + 3];
        maxdelay := p_req[j * 5 + 4];
        np := p_req[j * 5 + 5]::int;
        IF now = 'NaN'::float8 THEN
          IF server_now IS NULL THEN
            -- Whole µs since the epoch, exactly: no float seconds on the way.
            ts := clock_timestamp() AT TIME ZONE 'UTC';
            server_now := (extract(epoch FROM date_trunc('minute', ts))::bigint * 1000000
              + extract(microseconds FROM ts)::bigint)::float8;
          END IF;
          now := server_now;
        END IF;
        IF op = 2 THEN
          FOR k IN 0..np - 1 LOOP
            ki := p_pol[pj + k * 7 + 1]::int;
            st[ki] := NULL;
            dirty[ki] := true;
          END LOOP;
          resets := true;
          pj := pj + np * 7;
          CONTINUE;
        END IF;
        is_commit := op = 1;
        IF is_commit AND (prune_now IS NULL OR now < prune_now) THEN prune_now := now; END IF;
        -- decide(): every policy first (evaluatePolicy, inlined), then settleDenied if one denied.
        all_ok := true;
        impossible := false;
        IF np > 1 THEN rb := '{}'; END IF;
        FOR k IN 0..np - 1 LOOP
          base := pj + k * 7;
          ki := p_pol[base + 1]::int;
          kind := p_pol[base + 2]::int;
          lim := p_pol[base + 3];
          a := p_pol[base + 5];
          b := p_pol[base + 6];
          c := p_pol[base + 7];
          s := (st[ki]).s;
          blocked_until := coalesce(s[1], 0);
          IF (kind = 1 AND ceil(cost * a - cost * a * 1e-15) > b) OR (kind <> 1 AND cost > lim) THEN
            r := ${n.run}(kind, lim, a, b, c, s, now, 0, 0);
            r := ARRAY[0, 3, r[3], 'Infinity', r[5], 0, -1]::float8[];
          ELSIF blocked_until > now THEN
            -- The later of the block's end and the policy's own wait for this cost; the key as it stands.
            r := ${n.run}(kind, lim, a, b, c, s, now, cost, maxdelay);
            bwait := greatest(blocked_until - now, CASE WHEN r[1] = 0 THEN r[4] ELSE 0 END);
            r := ${n.run}(kind, lim, a, b, c, s, now, 0, 0);
            r := ARRAY[0, 2, 0, bwait, greatest(r[5], bwait), 0, -1]::float8[];
          ELSE
            r := ${n.run}(kind, lim, a, b, c, s, now, cost, maxdelay);
          END IF;
          IF r[1] = 0 THEN all_ok := false; END IF;
          IF r[2] = 3 THEN impossible := true; END IF;
          IF np > 1 THEN
            ro[k + 1] := coalesce(array_length(rb, 1), 0);
            rb := rb || r;
          END IF;
        END LOOP;
        IF np = 1 THEN
          -- One policy (the common case): no bookkeeping of several evaluations.
          IF NOT all_ok THEN
            r := ${n.settle}(kind, lim, p_pol[pj + 4], a, b, c, s, now, cost, is_commit, r[1:6]);
          END IF;
          res := res || ARRAY[CASE WHEN all_ok THEN 1 ELSE 0 END, now]::float8[] || r[1:6];
          n_len := r[7]::int;
          IF is_commit AND n_len >= 0 THEN
            st[ki] := ROW(r[8:7 + n_len]);
            dirty[ki] := true;
            -- Rounded up to a whole minute: see expiryOf() in sql/common.ts.
            expiry[ki] := (ceil((now + r[5]) / ${EXPIRY_GRAIN_US}) * ${EXPIRY_GRAIN_US})::bigint;
          END IF;
        ELSE
          IF NOT all_ok THEN
            -- Nothing was written yet, so each policy settles against the state it was evaluated on. A
            -- cost one policy can never admit changes nothing under any policy (no block, no logged
            -- attempt), but a fixed window that counts every call (kind 3, b = 1) counts it.
            r := rb;
            rb := '{}';
            FOR k IN 0..np - 1 LOOP
              base := pj + k * 7;
              q := ro[k + 1];
              ro[k + 1] := coalesce(array_length(rb, 1), 0);
              rb := rb || ${n.settle}(p_pol[base + 2]::int, p_pol[base + 3], p_pol[base + 4], p_pol[base + 5],
                p_pol[base + 6], p_pol[base + 7], (st[p_pol[base + 1]::int]).s, now, cost,
                is_commit AND (NOT impossible OR (p_pol[base + 2] = 3 AND p_pol[base + 6] = 1)), r[q + 1:q + 6]);
            END LOOP;
          END IF;
          res := res || ARRAY[CASE WHEN all_ok THEN 1 ELSE 0 END, now]::float8[];
          FOR k IN 0..np - 1 LOOP
            q := ro[k + 1];
            res := res || rb[q + 1:q + 6];
            n_len := rb[q + 7]::int;
            IF is_commit AND n_len >= 0 THEN
              ki := p_pol[pj + k * 7 + 1]::int;
              st[ki] := ROW(rb[q + 8:q + 7 + n_len]);
              dirty[ki] := true;
              expiry[ki] := (ceil((now + rb[q + 5]) / ${EXPIRY_GRAIN_US}) * ${EXPIRY_GRAIN_US})::bigint;
            END IF;
          END LOOP;
        END IF;
        pj := pj + np * 7;
      END LOOP;

      IF p_locked = 1 AND optimistic THEN
        IF dirty[1] AND (st[1]).s IS NOT NULL THEN
          INSERT INTO ${n.qualified} (key, state, expires_at) VALUES (p_keys[1], (st[1]).s, expiry[1])
            ON CONFLICT DO NOTHING;
          IF NOT FOUND THEN
            -- Created by another transaction since it was read: decide the batch again on that row.
            SELECT t.state INTO s FROM ${n.qualified} t WHERE t.key = p_keys[1] FOR UPDATE;
            optimistic := NOT FOUND;
            st[1] := ROW(s);
            dirty[1] := false;
            res := '{}';
            resets := false;
            prune_now := NULL;
            -- Read the clock again, now that the row is held: time never goes back on a key.
            server_now := NULL;
            CONTINUE attempt;
          END IF;
          created := 1;
        END IF;
      ELSIF p_locked = 1 THEN
        IF dirty[1] AND (st[1]).s IS NOT NULL THEN
          UPDATE ${n.qualified} t SET state = (st[1]).s, expires_at = expiry[1] WHERE t.key = p_keys[1];
        ELSIF dirty[1] THEN
          DELETE FROM ${n.qualified} t WHERE t.key = p_keys[1];
        END IF;
      ELSIF p_locked > 1 THEN
        UPDATE ${n.qualified} AS t SET state = u.s, expires_at = u.e
          FROM unnest(p_keys[1:p_locked], st[1:p_locked], expiry[1:p_locked], dirty[1:p_locked]) AS u(k, s, e, d)
          WHERE u.d AND u.s IS NOT NULL AND t.key = u.k;
        IF created > 0 OR resets THEN
          -- Empty rows created above and never written, and rows reset: gone.
          DELETE FROM ${n.qualified} AS t
            USING unnest(p_keys[1:p_locked], st[1:p_locked], dirty[1:p_locked]) AS u(k, s, d)
            WHERE t.key = u.k AND u.s IS NULL AND (u.d OR t.state IS NULL);
        END IF;
      END IF;
      EXIT attempt;
    END LOOP;
    -- Only new rows make the table grow, so twice as many expired ones (at least 16) go for each, a
    -- minute after their expiry (PRUNE_GRACE_US in sql/common.ts). The bound is a bigint, like the column:
    -- compared with a float8, the column would be cast and the index could not serve the condition.
    IF created > 0 AND prune_now IS NOT NULL THEN
      DELETE FROM ${n.qualified} t WHERE t.key IN (
        SELECT x.key FROM ${n.qualified} x WHERE x.expires_at <= (prune_now - ${PRUNE_GRACE_US})::bigint
        ORDER BY x.expires_at LIMIT greatest(16, 2 * created) FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN array_to_string(res, ',');
  END
  $fn$;`;
}

/**
 * reservation.ts `cancelReservation`, in one transaction: gives a booked call's charge back under each
 * meter policy while the call is not yet due and is still the last one booked on it (its TAT is the one
 * the reservation set); other algorithms keep it counted.
 *
 * Parameters: `p_keys` the call's row keys in policy order; `p_now` µs (NaN: the server's
 * `clock_timestamp()`); `p_cost` the call's cost; `p_pol` 5 numbers per policy: kind, a, b, c (see
 * compile.ts) and the reservation's TAT. Rows are locked in key order, as the decide function locks
 * them, so the two never deadlock. Returns true when every policy gave the whole cost back.
 */
function cancelFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.cancel}(p_keys text[], p_now float8, p_cost float8, p_pol float8[])
  RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  DECLARE
    np int := coalesce(array_length(p_keys, 1), 0);
    now float8 := p_now;
    due float8 := '-Infinity';
    all_ok boolean := true;
    ts timestamp;
    st float8[];
    k int; base int;
    at float8; tat float8; back float8; reset float8;
  BEGIN
    PERFORM 1 FROM ${n.qualified} t WHERE t.key = ANY(p_keys) ORDER BY t.key FOR UPDATE;
    IF now = 'NaN'::float8 THEN
      ts := clock_timestamp() AT TIME ZONE 'UTC';
      now := (extract(epoch FROM date_trunc('minute', ts))::bigint * 1000000
        + extract(microseconds FROM ts)::bigint)::float8;
    END IF;
    FOR k IN 0..np - 1 LOOP
      base := k * 5;
      IF p_pol[base + 1] = 1 THEN
        IF p_pol[base + 4] = 1 THEN
          at := p_pol[base + 5] - ceil(p_cost * p_pol[base + 2] - p_cost * p_pol[base + 2] * 1e-15);
        ELSE
          at := p_pol[base + 5] - p_pol[base + 3];
        END IF;
        IF at > due THEN due := at; END IF;
      END IF;
    END LOOP;
    FOR k IN 0..np - 1 LOOP
      base := k * 5;
      tat := p_pol[base + 5];
      SELECT t.state INTO st FROM ${n.qualified} t WHERE t.key = p_keys[k + 1];
      IF p_pol[base + 1] <> 1 OR now >= due OR st IS NULL OR st[2] <> tat THEN
        all_ok := false;
      ELSE
        back := tat - ceil(p_cost * p_pol[base + 2] - p_cost * p_pol[base + 2] * 1e-15);
        reset := greatest(0, back - now, st[1] - now);
        -- Rounded up to a whole minute: see expiryOf() in sql/common.ts.
        UPDATE ${n.qualified} t SET state = ARRAY[st[1], back]::float8[],
          expires_at = (ceil((now + reset) / ${EXPIRY_GRAIN_US}) * ${EXPIRY_GRAIN_US})::bigint
          WHERE t.key = p_keys[k + 1];
      END IF;
    END LOOP;
    RETURN all_ok;
  END
  $fn$;`;
}

/**
 * refund.ts `refundPolicy`, in one transaction: gives back the unused units of a lease (a committed call
 * of cost `p_leased` decided at `p_leased_at` µs) under each policy, as far as the algorithm can still
 * tell them apart; the new state expires when a cost-0 evaluation says it is untouched.
 *
 * Parameters: `p_keys` the row keys in policy order; `p_now` µs (NaN: the server's `clock_timestamp()`);
 * `p_leased_at`, `p_leased`, `p_unused`; `p_pol` 5 numbers per policy: kind, limit, a, b, c (compile.ts).
 * Rows are locked in key order, as the decide function locks them. Returns true.
 */
function refundFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.refund}(
    p_keys text[], p_now float8, p_leased_at float8, p_leased float8, p_unused float8, p_pol float8[])
  RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  DECLARE
    np int := coalesce(array_length(p_keys, 1), 0);
    now float8 := p_now;
    ts timestamp;
    st float8[]; nx float8[]; r float8[];
    k int; base int; kind int; i int; len int;
    lim float8; a float8; b float8; c float8;
    charged float8; ahead float8; back float8; start float8; lw float8; left_over float8;
  BEGIN
    PERFORM 1 FROM ${n.qualified} t WHERE t.key = ANY(p_keys) ORDER BY t.key FOR UPDATE;
    IF now = 'NaN'::float8 THEN
      ts := clock_timestamp() AT TIME ZONE 'UTC';
      now := (extract(epoch FROM date_trunc('minute', ts))::bigint * 1000000
        + extract(microseconds FROM ts)::bigint)::float8;
    END IF;
    IF NOT (p_unused > 0) OR p_unused > p_leased THEN RETURN true; END IF;
    FOR k IN 0..np - 1 LOOP
      base := k * 5;
      kind := p_pol[base + 1]::int;
      lim := p_pol[base + 2];
      a := p_pol[base + 3];
      b := p_pol[base + 4];
      c := p_pol[base + 5];
      SELECT t.state INTO st FROM ${n.qualified} t WHERE t.key = p_keys[k + 1];
      nx := NULL;
      IF st IS NULL THEN
        CONTINUE;
      ELSIF kind = 1 THEN
        -- meter.ts meterCharge, for the lease and for the units it used.
        charged := ceil(p_leased * a - p_leased * a * 1e-15);
        ahead := p_leased_at + charged - now;
        back := least(charged - ceil((p_leased - p_unused) * a - (p_leased - p_unused) * a * 1e-15), ahead);
        IF back > 0 THEN nx := ARRAY[st[1], st[2] - back]; END IF;
      ELSIF kind = 2 THEN
        IF st[2] > 0 AND st[3] <= p_leased_at
            AND floor((now - st[3]) / b) = floor((p_leased_at - st[3]) / b) THEN
          nx := ARRAY[st[1], greatest(0, st[2] - p_unused), st[3]];
        END IF;
      ELSIF kind = 3 THEN
        start := st[2];
        lw := CASE WHEN c = 0 THEN p_leased_at - (p_leased_at::bigint % a::bigint)::float8 ELSE start END;
        IF start = lw AND p_leased_at >= start AND p_leased_at < start + a AND now < start + a AND st[3] > 0 THEN
          nx := ARRAY[st[1], start, greatest(0, st[3] - p_unused)];
        END IF;
      ELSIF kind = 4 THEN
        lw := p_leased_at - (p_leased_at::bigint % a::bigint)::float8;
        IF st[2] = lw THEN
          nx := ARRAY[st[1], lw, greatest(0, st[3] - p_unused), st[4]];
        ELSIF st[2] = lw + a THEN
          nx := ARRAY[st[1], st[2], st[3], greatest(0, st[4] - p_unused)];
        END IF;
      ELSE
        len := coalesce(array_length(st, 1), 0);
        i := 2;
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
      END IF;
      IF nx IS NOT NULL THEN
        r := ${n.policy}(kind, lim, a, b, c, nx, now, 0, 0);
        -- Rounded up as expiryOf() in sql/common.ts rounds.
        UPDATE ${n.qualified} t SET state = nx,
          expires_at = (ceil((now + r[5]) / ${EXPIRY_GRAIN_US}) * ${EXPIRY_GRAIN_US})::bigint
          WHERE t.key = p_keys[k + 1];
      END IF;
    END LOOP;
    RETURN true;
  END
  $fn$;`;
}
