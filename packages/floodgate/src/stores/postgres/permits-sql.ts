import { createHash } from 'node:crypto';
import { EXPIRY_GRAIN_US, PRUNE_GRACE_US, quoteIdentifier } from '../sql/common.js';
import { clockUs, literal, migrationOpening, RESERVED_INFIX } from './sql.js';

// The permit model (src/permits/model.ts) ported to PL/pgSQL: one function per operation, each one
// transaction on one key. (Line comments: this module is internal, and its declarations stay small.)
// Three tables:
//
// - `<table>`: one row per lease: `key`, `lease_id`, `cost`, `expires_at` (µs; live while now < expires_at).
//   A key holds at most `limit` ≤ 10 000 of them (each costs at least 1), so one call reads at most that many.
// - `<table>__fg_keys`: one row per key: its last `fence` and `expires_at`, the moment (rounded up to a
//   minute) after which the row decides like no row (no lease left, no waiter, the clock past the fence).
// - `<table>__fg_queue`: one row per waiter (model: PermitWaiter): `key`, `waiter_id`, `cost`, `ticket`
//   (increasing in arrival order), `expires_at` (µs; the place is kept while now < expires_at). A key
//   holds at most `maxQueue` ≤ 10 000 of them.
//
// Every function first locks the key's row (`FOR UPDATE`; acquire creates it when missing), so the calls
// on one key are serial across every connection; then reads the clock (parameter `p_now` in µs, or NULL:
// the server's `clock_timestamp()`), so a key's calls see its time in order; then deletes the key's
// leases and the waiters that expired (the sweep, in the same transaction); then decides from what is
// left (model: acquirePermit, refreshPermit, releasePermit, waitPermit, leaveQueue). What is in flight is `sum(cost)` of those leases: there is
// no counter. The fence is on the key's row, which no sweep deletes: only a prune, a minute after the
// clock passed it, and then `max(fence + 1, now)` still exceeds it. When a call creates a key row, it
// also deletes up to PRUNE_KEYS idle key rows with their leases, skipping rows other calls hold (it never
// waits, so it never deadlocks), on the earlier of the caller's clock and the server's.
//
//
// Wakes (model: wakeOf): an operation that freed room computes the ticket of the last waiter of the
// longest head of the queue that now fits, and `pg_notify`s it (the payload: the ticket in decimal) on
// the key's channel, delivered when the transaction commits. The channel is `floodgate_` and 40 hex
// digits of the SHA-256 of `<schema>.<table>:<key>` (permitChannel): a key is only ever hashed, never
// part of a name, and a listener hears only the keys it waits on.
//
// Returns (bigint[]): acquire { granted 1|0, inFlight, fence, expiresAtUs, nowUs, retryAfterUs,
// resetAfterUs, wake }; refresh { refreshed 1|0, expiresAtUs, nowUs, wake }; release { released 1|0,
// nowUs, wake }; wait { …acquire's, queued 1|0, full 1|0, ticket, ahead }; leave { left 1|0, nowUs, wake }.

export type PermitFunction = 'acquire' | 'refresh' | 'release' | 'wait' | 'leave';

// The functions the operations share: the sweep, the cost queued ahead, the wake, the prune.
type HelperFunction = 'sweep' | 'ahead' | 'wake' | 'prune';

// What `migrate()` creates for one permit table.
export interface PermitSqlNames {
  readonly schema: string;
  readonly table: string;
  readonly leases: string;
  readonly keys: string;
  readonly queue: string;
  readonly version: string;
  fn(name: PermitFunction | HelperFunction): string;
}

const PRUNE_KEYS = 4;

function names(schema: string, table: string, version: string): PermitSqlNames {
  const q = (name: string) => `${quoteIdentifier(schema)}.${quoteIdentifier(name)}`;
  return {
    schema,
    table,
    leases: q(table),
    keys: q(`${table}${RESERVED_INFIX}keys`),
    queue: q(`${table}${RESERVED_INFIX}queue`),
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

// The key's channel of wakes (see the top of this module), computed from the key in SQL.
function channelOf(n: PermitSqlNames): string {
  return `'floodgate_' || left(encode(sha256(convert_to(${literal(`${n.schema}.${n.table}:`)} || p_key, 'UTF8')), 'hex'), 40)`;
}

// The helpers, each called inside an operation's transaction with the key's row locked. sweep (model:
// sweepLeases): drops the key's leases and waiters that expired, true when it dropped any. ahead (model:
// costAhead): the cost queued ahead of `p_id` (all of the queue when NULL or not queued), no further than
// `p_cap`. wake (model: wakeOf): the ticket to tell, notified. prune: up to PRUNE_KEYS idle key rows with
// their leases and waiters, skipping rows other calls hold (it never waits, so it never deadlocks), on
// the earlier of the caller's clock and the server's.
function helperFunctions(n: PermitSqlNames): string[] {
  const fn = (name: HelperFunction, params: string, returns: string, body: string) =>
    `CREATE OR REPLACE FUNCTION ${n.fn(name)}(${params}) RETURNS ${returns}
LANGUAGE plpgsql VOLATILE AS $fn$
${body}
$fn$;`;
  return [
    fn(
      'sweep',
      'p_key text, p_now bigint',
      'boolean',
      `DECLARE v_swept boolean;
BEGIN
DELETE FROM ${n.leases} WHERE key = p_key AND expires_at <= p_now;
v_swept := FOUND;
DELETE FROM ${n.queue} WHERE key = p_key AND expires_at <= p_now;
RETURN v_swept OR FOUND;
END`,
    ),
    fn(
      'ahead',
      'p_key text, p_id text, p_cap bigint',
      'bigint',
      `DECLARE v_sum bigint := 0; r record;
BEGIN
FOR r IN SELECT waiter_id, cost FROM ${n.queue} WHERE key = p_key ORDER BY ticket LOOP
  EXIT WHEN r.waiter_id = p_id OR v_sum > p_cap;
  v_sum := v_sum + r.cost;
END LOOP;
RETURN v_sum;
END`,
    ),
    fn(
      'wake',
      'p_key text, p_limit bigint, p_freed boolean',
      'bigint',
      `DECLARE v_sum bigint; v_ticket bigint := 0; r record;
BEGIN
IF NOT p_freed OR NOT EXISTS (SELECT 1 FROM ${n.queue} WHERE key = p_key) THEN RETURN 0; END IF;
SELECT coalesce(sum(cost), 0) INTO v_sum FROM ${n.leases} WHERE key = p_key;
FOR r IN SELECT cost, ticket FROM ${n.queue} WHERE key = p_key ORDER BY ticket LOOP
  v_sum := v_sum + r.cost;
  EXIT WHEN v_sum > p_limit;
  v_ticket := r.ticket;
END LOOP;
IF v_ticket > 0 THEN PERFORM pg_notify(${channelOf(n)}, v_ticket::text); END IF;
RETURN v_ticket;
END`,
    ),
    fn(
      'prune',
      'p_key text, p_now bigint',
      'void',
      `BEGIN
WITH gone AS (DELETE FROM ${n.keys} WHERE key IN (SELECT key FROM ${n.keys}
  WHERE expires_at < least(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) - ${PRUNE_GRACE_US}
  AND key <> p_key ORDER BY expires_at LIMIT ${PRUNE_KEYS} FOR UPDATE SKIP LOCKED) RETURNING key),
waiters AS (DELETE FROM ${n.queue} q USING gone WHERE q.key = gone.key)
DELETE FROM ${n.leases} l USING gone WHERE l.key = gone.key;
END`,
    ),
  ];
}

// The function's head: its name, parameters, locals, and the lock, clock and sweep every one begins
// with. Refresh, release and leave on a key without a row answer at once (nothing to sweep).
function head(n: PermitSqlNames, op: PermitFunction, params: string, locals: string): string {
  const create = op === 'acquire' || op === 'wait';
  const none = { acquire: '', wait: '', refresh: '[0, 0, v_now, 0]', release: '[0, v_now, 0]', leave: '[0, v_now, 0]' }[
    op
  ];
  return `CREATE OR REPLACE FUNCTION ${n.fn(op)}(p_key text, p_now bigint, ${params}) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE ts timestamp; v_now bigint; v_fence bigint; v_found boolean; v_freed boolean; v_wake bigint := 0;
${create ? 'v_created boolean := false; v_rows bigint; ' : ''}${locals}
BEGIN
${lockKey(n, create)}
${NOW}
${create ? '' : `IF NOT v_found THEN RETURN ARRAY${none}; END IF;`}
v_freed := ${n.fn('sweep')}(p_key, v_now);`;
}

// model: grant. A lease of `p_cost` for `p_id`, the next fence; the key's row outlives both (never
// shortened: a waiter's place may outlast them).
function grantLease(n: PermitSqlNames): string {
  return `v_exp := v_now + p_lease;
  INSERT INTO ${n.leases} (key, lease_id, cost, expires_at) VALUES (p_key, p_id, p_cost, v_exp)
    ON CONFLICT (key, lease_id) DO UPDATE SET cost = excluded.cost, expires_at = excluded.expires_at;
  v_fence := greatest(v_fence + 1, v_now);
  SELECT max(expires_at) INTO v_last FROM ${n.leases} WHERE key = p_key;
  UPDATE ${n.keys} SET fence = v_fence, expires_at = greatest(expires_at, ${grain('greatest(v_last, v_fence)')})
    WHERE key = p_key;`;
}

// Until every live lease has run out: 0 when none is (model: resetAfterUs).
const RESET = 'CASE WHEN v_last = 0 THEN 0 ELSE v_last - v_now END';

function acquireFunction(n: PermitSqlNames): string {
  // A call that does not wait goes behind every waiter: it passes only if they all fit as well.
  // Refused: the leases in the order they run out (ties by id), the first expiry after which the rest
  // leaves room for this cost and the cost queued ahead.
  return `${head(
    n,
    'acquire',
    'p_limit bigint, p_lease bigint, p_cost bigint, p_id text',
    'v_flight bigint; v_queued bigint; v_granted boolean; v_exp bigint; v_last bigint; v_left bigint; v_retry bigint := 0; r record;',
  )}
SELECT coalesce(sum(cost), 0) INTO v_flight FROM ${n.leases} WHERE key = p_key;
v_queued := ${n.fn('ahead')}(p_key, NULL, p_limit - v_flight - p_cost);
v_granted := v_flight + v_queued + p_cost <= p_limit;
v_wake := ${n.fn('wake')}(p_key, p_limit, v_freed);
IF v_granted THEN
  ${grantLease(n)}
ELSE
  v_left := v_flight;
  FOR r IN SELECT cost, expires_at FROM ${n.leases} WHERE key = p_key ORDER BY expires_at, lease_id LOOP
    v_left := v_left - r.cost;
    IF v_left + v_queued + p_cost <= p_limit THEN v_retry := r.expires_at - v_now; EXIT; END IF;
  END LOOP;
  SELECT coalesce(max(expires_at), 0) INTO v_last FROM ${n.leases} WHERE key = p_key;
END IF;
IF v_created THEN PERFORM ${n.fn('prune')}(p_key, v_now); END IF;
IF v_granted THEN RETURN ARRAY[1, v_flight + p_cost, v_fence, v_exp, v_now, 0, ${RESET}, v_wake]; END IF;
RETURN ARRAY[0, v_flight, 0, 0, v_now, v_retry, ${RESET}, v_wake];
END
$fn$;`;
}

function waitFunction(n: PermitSqlNames): string {
  // Granted when it and every waiter ahead of it fit (leaving the queue); else its place is kept for
  // `p_waiter` µs more, or a new one taken at the tail, unless `p_max_queue` wait already (full).
  return `${head(
    n,
    'wait',
    'p_limit bigint, p_lease bigint, p_cost bigint, p_id text, p_max_queue bigint, p_waiter bigint',
    'v_flight bigint; v_mine bigint; v_ahead bigint; v_exp bigint; v_last bigint; v_reset bigint; v_ticket bigint; v_full boolean := false;',
  )}
SELECT coalesce(sum(cost), 0), coalesce(max(expires_at), 0) INTO v_flight, v_last FROM ${n.leases} WHERE key = p_key;
v_reset := ${RESET};
SELECT ticket INTO v_mine FROM ${n.queue} WHERE key = p_key AND waiter_id = p_id;
v_ahead := ${n.fn('ahead')}(p_key, p_id, p_limit - v_flight - p_cost);
IF v_flight + v_ahead + p_cost <= p_limit THEN
  DELETE FROM ${n.queue} WHERE key = p_key AND waiter_id = p_id;
  ${grantLease(n)}
  v_wake := ${n.fn('wake')}(p_key, p_limit, v_freed);
  IF v_created THEN PERFORM ${n.fn('prune')}(p_key, v_now); END IF;
  RETURN ARRAY[1, v_flight + p_cost, v_fence, v_exp, v_now, 0, ${RESET}, v_wake, 0, 0, coalesce(v_mine, 0), v_ahead];
END IF;
IF v_mine IS NOT NULL THEN
  v_ticket := v_mine;
  UPDATE ${n.queue} SET expires_at = v_now + p_waiter WHERE key = p_key AND waiter_id = p_id;
ELSIF (SELECT count(*) FROM ${n.queue} WHERE key = p_key) >= p_max_queue THEN
  v_full := true;
ELSE
  SELECT coalesce(max(ticket), 0) + 1 INTO v_ticket FROM ${n.queue} WHERE key = p_key;
  INSERT INTO ${n.queue} (key, waiter_id, cost, ticket, expires_at) VALUES (p_key, p_id, p_cost, v_ticket, v_now + p_waiter);
END IF;
IF NOT v_full THEN
  UPDATE ${n.keys} SET expires_at = ${grain('v_now + p_waiter')} WHERE key = p_key AND expires_at < ${grain('v_now + p_waiter')};
END IF;
v_wake := ${n.fn('wake')}(p_key, p_limit, v_freed);
IF v_created THEN PERFORM ${n.fn('prune')}(p_key, v_now); END IF;
IF v_full THEN RETURN ARRAY[0, v_flight, 0, 0, v_now, 0, v_reset, v_wake, 0, 1, 0, v_ahead]; END IF;
RETURN ARRAY[0, v_flight, 0, 0, v_now, 0, v_reset, v_wake, 1, 0, v_ticket, v_ahead];
END
$fn$;`;
}

function refreshFunction(n: PermitSqlNames): string {
  // Extends a live lease, never shortens it; a swept one stays gone.
  return `${head(n, 'refresh', 'p_lease bigint, p_id text, p_limit bigint', 'v_exp bigint;')}
v_wake := ${n.fn('wake')}(p_key, p_limit, v_freed);
UPDATE ${n.leases} SET expires_at = greatest(expires_at, v_now + p_lease) WHERE key = p_key AND lease_id = p_id
  RETURNING expires_at INTO v_exp;
IF NOT FOUND THEN RETURN ARRAY[0, 0, v_now, v_wake]; END IF;
UPDATE ${n.keys} SET expires_at = ${grain('v_exp')} WHERE key = p_key AND expires_at < ${grain('v_exp')};
RETURN ARRAY[1, v_exp, v_now, v_wake];
END
$fn$;`;
}

// Release (a lease) and leave (a waiter's place): one row deleted, and the wake of what it freed.
function dropFunction(n: PermitSqlNames, op: 'release' | 'leave'): string {
  const [params, table, column] =
    op === 'release'
      ? ['p_id text, p_limit bigint', n.leases, 'lease_id']
      : ['p_limit bigint, p_id text', n.queue, 'waiter_id'];
  return `${head(n, op, params, 'v_dropped boolean;')}
DELETE FROM ${table} WHERE key = p_key AND ${column} = p_id;
v_dropped := FOUND;
v_wake := ${n.fn('wake')}(p_key, p_limit, v_freed OR v_dropped);
RETURN ARRAY[CASE WHEN v_dropped THEN 1 ELSE 0 END, v_now, v_wake];
END
$fn$;`;
}

function permitFunctions(n: PermitSqlNames): string[] {
  return [
    ...helperFunctions(n),
    acquireFunction(n),
    refreshFunction(n),
    dropFunction(n, 'release'),
    waitFunction(n),
    dropFunction(n, 'leave'),
  ];
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
  const params = {
    acquire: '$3::bigint, $4::bigint, $5::bigint, $6',
    refresh: '$3::bigint, $4, $5::bigint',
    release: '$3, $4::bigint',
    wait: '$3::bigint, $4::bigint, $5::bigint, $6, $7::bigint, $8::bigint',
    leave: '$3::bigint, $4',
  }[op];
  return `SELECT ${n.fn(op)}($1, NULLIF($2, '')::bigint, ${params}) AS r`;
}

// The channel the wakes of `key` are notified on (the SQL of channelOf computes the same): a hash, never the key.
export function permitChannel(schema: string, table: string, key: string): string {
  return `floodgate_${createHash('sha256').update(`${schema}.${table}:${key}`, 'utf8').digest('hex').slice(0, 40)}`;
}

// Whether `table` of the schema has `column` (how a permit table is told from another table of the name).
function hasColumn(n: PermitSqlNames, table: string, column: string): string {
  return `EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = ${literal(n.schema)}
AND c.relname = ${literal(table)} AND c.relkind = 'r' AND a.attname = ${literal(column)} AND NOT a.attisdropped)`;
}

// The whole schema in one idempotent statement, under the rate store's migration lock: the three tables,
// the keys' expiry index, the queue's ticket index, this version's functions (beside any other version's, which keep serving the
// processes that run it). A table of the name that is not a permit table is refused, never used.
export function permitMigrationStatement(n: PermitSqlNames): string {
  const keysName = `${n.table}${RESERVED_INFIX}keys`;
  return `${migrationOpening(n.schema)}CREATE TABLE IF NOT EXISTS ${n.leases} (key text COLLATE "C" NOT NULL, lease_id text COLLATE "C" NOT NULL,
  cost bigint NOT NULL, expires_at bigint NOT NULL,
  CONSTRAINT ${quoteIdentifier(`${n.table}${RESERVED_INFIX}pkey`)} PRIMARY KEY (key, lease_id));
CREATE TABLE IF NOT EXISTS ${n.keys} (key text COLLATE "C" NOT NULL, fence bigint NOT NULL,
  expires_at bigint NOT NULL, CONSTRAINT ${quoteIdentifier(`${keysName}_pkey`)} PRIMARY KEY (key))
  WITH (fillfactor = 80);
CREATE TABLE IF NOT EXISTS ${n.queue} (key text COLLATE "C" NOT NULL, waiter_id text COLLATE "C" NOT NULL,
  cost bigint NOT NULL, ticket bigint NOT NULL, expires_at bigint NOT NULL,
  CONSTRAINT ${quoteIdentifier(`${n.table}${RESERVED_INFIX}queue_pkey`)} PRIMARY KEY (key, waiter_id));
CREATE UNIQUE INDEX IF NOT EXISTS ${quoteIdentifier(`${n.table}${RESERVED_INFIX}queue_ticket`)} ON ${n.queue} (key, ticket);
IF NOT (${hasColumn(n, n.table, 'lease_id')} AND ${hasColumn(n, keysName, 'fence')}) THEN
  RAISE EXCEPTION 'floodgate: %.% is not a table of concurrency permits', ${literal(n.schema)}, ${literal(n.table)}
    USING ERRCODE = '42809';
END IF;
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${keysName}_expires_at`)} ON ${n.keys} (expires_at);
${permitFunctions(n).join('\n')}
END
$migrate$`;
}
