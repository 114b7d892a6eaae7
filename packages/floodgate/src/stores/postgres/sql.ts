import { EXPIRY_GRAIN_US, quoteIdentifier } from '../sql/common.js';

/**
 * What the names of the objects `migrate()` creates beside a table (other than its functions) carry
 * after the table's name. Tables, indexes and composite types share one namespace in PostgreSQL (every
 * table is also a type of its name), so these names must never be a table's: table names may not
 * contain it (see `postgresStore`).
 */
export const RESERVED_INFIX = '__fg_';

/** The names of everything `migrate()` creates for one table, at one version of the port. */
export interface SqlNames {
  readonly schema: string;
  readonly table: string;
  /** `"schema"."table"` */
  readonly qualified: string;
  /** The port's version (`v` and 8 hex digits), or `''` for the names of the unversioned port. */
  readonly version: string;
  /** A function of the port, qualified and quoted: `"schema"."table_decide_v1a2b3c4d"`. */
  fn(name: string): string;
  /** A composite `(s float8[])`: an array of these holds states of different lengths. */
  readonly stateType: string;
  /** Unquoted names, in the table's schema, of the composite type, the expiry index and the primary key. */
  readonly stateTypeName: string;
  readonly expiryIndexName: string;
  readonly primaryKeyName: string;
}

/** The unquoted name of a function of the port: `<table>_<name>_<version>` (`<table>_<name>` unversioned). */
export function functionName(table: string, name: string, version: string): string {
  return version === '' ? `${table}_${name}` : `${table}_${name}_${version}`;
}

export function sqlNames(schema: string, table: string, version: string): SqlNames {
  const q = (name: string) => `${quoteIdentifier(schema)}.${quoteIdentifier(name)}`;
  return {
    schema,
    table,
    qualified: q(table),
    version,
    fn: (name) => q(functionName(table, name, version)),
    stateType: q(`${table}${RESERVED_INFIX}state`),
    stateTypeName: `${table}${RESERVED_INFIX}state`,
    expiryIndexName: `${table}${RESERVED_INFIX}expires_at`,
    primaryKeyName: `${table}${RESERVED_INFIX}pkey`,
  };
}

/** A string as an SQL literal. */
export function literal(s: string): string {
  return `'${s.replaceAll("'", "''")}'`;
}

/**
 * The opening of a migration: a `DO` block that takes the one migration lock (the rate store's and the
 * permit store's migrations never run at once) and creates the schema when missing. The caller goes on
 * with its own statements and ends the block with `END $migrate$`.
 */
export function migrationOpening(schema: string): string {
  return `DO $migrate$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('floodgate migrate'));
  IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ${literal(schema)}) THEN
    CREATE SCHEMA ${quoteIdentifier(schema)};
  END IF;
`;
}

/*
 * Named expressions, repeated by the port exactly as the model writes them (same operations, same order),
 * so every use computes the same float8 as the TypeScript model.
 */

/** meter.ts `meterCharge`: what a cost adds to a TAT, whole µs rounded up past float dust. */
export function charge(cost: string, t: string): string {
  return `ceil(${cost} * ${t} - ${cost} * ${t} * 1e-15)`;
}

/** types.ts `clampRemaining`: sets `rem` to `floor(x)` within 0…lim (uses the variables `fl` and `rem`). */
export function setRemaining(x: string): string {
  return `fl := floor(${x}); rem := CASE WHEN fl < 0 THEN 0 WHEN fl > lim THEN floor(lim) ELSE fl END;`;
}

/** `t − t % w` for whole µs `t` and `w`: the bigint remainder is exactly JavaScript's `%`. */
export function alignDown(t: string, w: string): string {
  return `${t} - (${t}::bigint % ${w}::bigint)::float8`;
}

/** sql/common.ts `expiryOf`: when a row may be deleted, rounded up to a whole minute (a bigint, like the column). */
export function expiry(now: string, reset: string): string {
  return expiryAt(`${now} + ${reset}`);
}

/** `expiry` of the moment `at` (µs) the state is back to untouched. */
export function expiryAt(at: string): string {
  return `(ceil((${at}) / ${EXPIRY_GRAIN_US}) * ${EXPIRY_GRAIN_US})::bigint`;
}

/**
 * The server's clock as read into `ts` (`clock_timestamp() AT TIME ZONE 'UTC'`), in whole µs since the
 * epoch, exactly: whole seconds of the minute plus the microseconds within it, no float seconds on the way.
 */
export function clockUs(ts: string): string {
  return `(extract(epoch FROM date_trunc('minute', ${ts}))::bigint * 1000000
        + extract(microseconds FROM ${ts})::bigint)::float8`;
}

/** Sets `target` to the server's clock, whole µs since the epoch (`clockUs`; uses `ts`). */
export function serverNow(target: string): string {
  return `ts := clock_timestamp() AT TIME ZONE 'UTC';
      ${target} := ${clockUs('ts')};`;
}

/**
 * An evaluation as the port passes it around: one float8[] of allowed (0/1), reason (0 ok, 1 limit,
 * 2 blocked, 3 exceeds-capacity), remaining, retryAfterUs, resetAfterUs, delayUs, then the length of
 * the next state (-1: unchanged) and the next state itself.
 */
export function evaluation(
  allowed: 0 | 1,
  reason: 0 | 1 | 2 | 3,
  remaining: string,
  retry: string,
  reset: string,
  delay: string,
  next?: readonly string[] | string,
): string {
  const head = `ARRAY[${allowed}, ${reason}, ${remaining}, ${retry}, ${reset}, ${delay}`;
  if (next === undefined) return `${head}, -1]::float8[]`;
  // A state of variable length (an array expression) follows its length.
  if (typeof next === 'string') return `${head}, array_length(${next}, 1)]::float8[] || ${next}`;
  return `${head}, ${next.length}, ${next.join(', ')}]::float8[]`;
}
