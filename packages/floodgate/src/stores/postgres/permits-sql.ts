import { createHash } from 'node:crypto';
import { EXPIRY_GRAIN_US, PRUNE_GRACE_US, quoteIdentifier } from '../sql/common.js';
import { clockUs, literal, RESERVED_INFIX } from './sql.js';

// The permit model (src/permits/model.ts) ported to PL/pgSQL: one function per operation, each one
// transaction on one key. (Line comments: this module is internal, and its declarations stay small.)
// Two tables:
//
// - `<table>`: one row per lease: `key`, `lease_id`, `cost`, `expires_at` (µs; live while now < expires_at).
//   A key holds at most `limit` ≤ 10 000 of them (each costs at least 1), so one call reads at most that many.
// - `<table>__fg_keys`: one row per key: its last `fence` and `expires_at`, the moment (rounded up to a
//   minute) after which the row decides like no row (no lease left, the clock past the fence).
//
// Every function first locks the key's row (`FOR UPDATE`; acquire creates it when missing), so the calls
// on one key are serial across every connection; then reads the clock (parameter `p_now` in µs, or NULL:
// the server's `clock_timestamp()`), so a key's calls see its time in order; then deletes the key's
// leases that expired (the sweep, in the same transaction); then decides from the leases left (model:
// acquirePermit, refreshPermit, releasePermit). What is in flight is `sum(cost)` of those leases: there is
// no counter. The fence is on the key's row, which no sweep deletes: only a prune, a minute after the
// clock passed it, and then `max(fence + 1, now)` still exceeds it. When a call creates a key row, it
// also deletes up to PRUNE_KEYS idle key rows with their leases, skipping rows other calls hold (it never
// waits, so it never deadlocks), on the earlier of the caller's clock and the server's.
//
// Returns (bigint[]): acquire { granted 1|0, inFlight, fence, expiresAtUs, nowUs, retryAfterUs,
// resetAfterUs }; refresh { refreshed 1|0, expiresAtUs, nowUs }; release { released 1|0, nowUs }.

export type PermitFunction = 'acquire' | 'refresh' | 'release';

// What `migrate()` creates for one permit table.
export interface PermitSqlNames {
  readonly schema: string;
  readonly table: string;
  readonly leases: string;
  readonly keys: string;
  readonly version: string;
  fn(name: PermitFunction): string;
}

const PRUNE_KEYS = 4;

function names(schema: string, table: string, version: string): PermitSqlNames {
  const q = (name: string) => `${quoteIdentifier(schema)}.${quoteIdentifier(name)}`;
  return {
    schema,
    table,
    leases: q(table),
    keys: q(`${table}${RESERVED_INFIX}keys`),
    version,
    fn: (name) => q(`${table}_${name}_${version}`),
  };
}

// `x` (whole µs ≥ 0) rounded up to a whole minute: a busy key's row keeps its expiry (HOT updates).
const grain = (x: string) => `((${x} + ${EXPIRY_GRAIN_US - 1}) / ${EXPIRY_GRAIN_US} * ${EXPIRY_GRAIN_US})`;

// `v_now`: `p_now`, or the server's clock in whole µs; read once the key's row is locked.
const NOW = `ts := clock_timestamp() AT TIME ZONE 'UTC';
v_now := coalesce(p_now, (${clockUs('ts')})::bigint);`;

// Locks the key's row into `v_fence`, `v_found`. Acquire creates it when missing: a concurrent insert of
// the key waits for the other transaction; a prune may delete the row in between: then round again.
function lockKey(n: PermitSqlNames, create: boolean): string {
  if (!create) return `SELECT fence INTO v_fence FROM ${n.keys} WHERE key = p_key FOR UPDATE;\nv_found := FOUND;`;
  return `LOOP
SELECT fence INTO v_fence FROM ${n.keys} WHERE key = p_key FOR UPDATE;
EXIT WHEN FOUND;
INSERT INTO ${n.keys} (key, fence, expires_at) VALUES (p_key, 0, 0) ON CONFLICT (key) DO NOTHING;
GET DIAGNOSTICS v_rows = ROW_COUNT;
v_created := v_created OR v_rows > 0;
END LOOP;`;
}

// The function's head: its name, parameters, locals, and the lock, clock and sweep every one begins with.
function head(n: PermitSqlNames, op: PermitFunction, params: string, locals: string): string {
  return `CREATE OR REPLACE FUNCTION ${n.fn(op)}(p_key text, p_now bigint, ${params}) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE ts timestamp; v_now bigint; v_fence bigint; v_found boolean; ${locals}
BEGIN
${lockKey(n, op === 'acquire')}
${NOW}
${{ acquire: '', refresh: 'IF NOT v_found THEN RETURN ARRAY[0, 0, v_now]; END IF;', release: 'IF NOT v_found THEN RETURN ARRAY[0, v_now]; END IF;' }[op]}
DELETE FROM ${n.leases} WHERE key = p_key AND expires_at <= v_now;`;
}

function acquireFunction(n: PermitSqlNames): string {
  // Refused: the leases in the order they run out (ties by id), the first expiry after which the rest
  // leaves room for this cost.
  return `${head(
    n,
    'acquire',
    'p_limit bigint, p_lease bigint, p_cost bigint, p_id text',
    'v_created boolean := false; v_rows bigint; v_flight bigint; v_exp bigint; v_last bigint; v_left bigint; v_retry bigint := 0; r record;',
  )}
SELECT coalesce(sum(cost), 0) INTO v_flight FROM ${n.leases} WHERE key = p_key;
IF v_flight + p_cost <= p_limit THEN
  v_exp := v_now + p_lease;
  INSERT INTO ${n.leases} (key, lease_id, cost, expires_at) VALUES (p_key, p_id, p_cost, v_exp)
    ON CONFLICT (key, lease_id) DO UPDATE SET cost = excluded.cost, expires_at = excluded.expires_at;
  v_fence := greatest(v_fence + 1, v_now);
  SELECT max(expires_at) INTO v_last FROM ${n.leases} WHERE key = p_key;
  UPDATE ${n.keys} SET fence = v_fence, expires_at = ${grain('greatest(v_last, v_fence)')} WHERE key = p_key;
ELSE
  v_left := v_flight;
  FOR r IN SELECT cost, expires_at FROM ${n.leases} WHERE key = p_key ORDER BY expires_at, lease_id LOOP
    v_left := v_left - r.cost;
    IF v_left + p_cost <= p_limit THEN v_retry := r.expires_at - v_now; EXIT; END IF;
  END LOOP;
  SELECT coalesce(max(expires_at), 0) INTO v_last FROM ${n.leases} WHERE key = p_key;
END IF;
IF v_created THEN
  WITH gone AS (DELETE FROM ${n.keys} WHERE key IN (SELECT key FROM ${n.keys}
    WHERE expires_at < least(v_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) - ${PRUNE_GRACE_US}
    AND key <> p_key ORDER BY expires_at LIMIT ${PRUNE_KEYS} FOR UPDATE SKIP LOCKED) RETURNING key)
  DELETE FROM ${n.leases} l USING gone WHERE l.key = gone.key;
END IF;
IF v_flight + p_cost <= p_limit THEN RETURN ARRAY[1, v_flight + p_cost, v_fence, v_exp, v_now, 0, v_last - v_now]; END IF;
RETURN ARRAY[0, v_flight, 0, 0, v_now, v_retry, v_last - v_now];
END
$fn$;`;
}

function refreshFunction(n: PermitSqlNames): string {
  // Extends a live lease, never shortens it; a swept one stays gone.
  return `${head(n, 'refresh', 'p_lease bigint, p_id text', 'v_exp bigint;')}
UPDATE ${n.leases} SET expires_at = greatest(expires_at, v_now + p_lease) WHERE key = p_key AND lease_id = p_id
  RETURNING expires_at INTO v_exp;
IF NOT FOUND THEN RETURN ARRAY[0, 0, v_now]; END IF;
UPDATE ${n.keys} SET expires_at = ${grain('v_exp')} WHERE key = p_key AND expires_at < ${grain('v_exp')};
RETURN ARRAY[1, v_exp, v_now];
END
$fn$;`;
}

function releaseFunction(n: PermitSqlNames): string {
  return `${head(n, 'release', 'p_id text', '')}
DELETE FROM ${n.leases} WHERE key = p_key AND lease_id = p_id;
RETURN ARRAY[CASE WHEN FOUND THEN 1 ELSE 0 END, v_now];
END
$fn$;`;
}

function permitFunctions(n: PermitSqlNames): string[] {
  return [acquireFunction(n), refreshFunction(n), releaseFunction(n)];
}

// The functions' version: `v` and 8 hex digits of a digest of their code, part of their names.
export const PERMIT_SQL_VERSION = `v${createHash('sha256')
  .update(permitFunctions(names('schema', 'table', '')).join('\n'))
  .digest('hex')
  .slice(0, 8)}`;

export const permitSqlNames = (schema: string, table: string): PermitSqlNames =>
  names(schema, table, PERMIT_SQL_VERSION);

// The statement calling one operation's function: parameters as text, `$2` '' for the server's clock.
export function permitStatement(n: PermitSqlNames, op: PermitFunction): string {
  const params = { acquire: '$3::bigint, $4::bigint, $5::bigint, $6', refresh: '$3::bigint, $4', release: '$3' }[op];
  return `SELECT ${n.fn(op)}($1, NULLIF($2, '')::bigint, ${params}) AS r`;
}

// Whether `table` of the schema has `column` (how a permit table is told from another table of the name).
function hasColumn(n: PermitSqlNames, table: string, column: string): string {
  return `EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = ${literal(n.schema)}
AND c.relname = ${literal(table)} AND c.relkind = 'r' AND a.attname = ${literal(column)} AND NOT a.attisdropped)`;
}

// The whole schema in one idempotent statement, under the rate store's migration lock: the two tables,
// the keys' expiry index, this version's functions (beside any other version's, which keep serving the
// processes that run it). A table of the name that is not a permit table is refused, never used.
export function permitMigrationStatement(n: PermitSqlNames): string {
  const keysName = `${n.table}${RESERVED_INFIX}keys`;
  return `DO $migrate$
BEGIN
PERFORM pg_advisory_xact_lock(hashtext('floodgate migrate'));
IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ${literal(n.schema)}) THEN
  CREATE SCHEMA ${quoteIdentifier(n.schema)};
END IF;
CREATE TABLE IF NOT EXISTS ${n.leases} (key text COLLATE "C" NOT NULL, lease_id text COLLATE "C" NOT NULL,
  cost bigint NOT NULL, expires_at bigint NOT NULL,
  CONSTRAINT ${quoteIdentifier(`${n.table}${RESERVED_INFIX}pkey`)} PRIMARY KEY (key, lease_id));
CREATE TABLE IF NOT EXISTS ${n.keys} (key text COLLATE "C" NOT NULL, fence bigint NOT NULL,
  expires_at bigint NOT NULL, CONSTRAINT ${quoteIdentifier(`${keysName}_pkey`)} PRIMARY KEY (key))
  WITH (fillfactor = 80);
IF NOT (${hasColumn(n, n.table, 'lease_id')} AND ${hasColumn(n, keysName, 'fence')}) THEN
  RAISE EXCEPTION 'floodgate: %.% is not a table of concurrency permits', ${literal(n.schema)}, ${literal(n.table)}
    USING ERRCODE = '42809';
END IF;
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${keysName}_expires_at`)} ON ${n.keys} (expires_at);
${permitFunctions(n).join('\n')}
END
$migrate$`;
}
