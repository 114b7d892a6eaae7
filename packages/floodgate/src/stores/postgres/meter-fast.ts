import { METER_SQL } from './kinds/meter.js';
import { expiryAt, literal, type SqlNames } from './sql.js';

/*
 * Plain statements for the commonest call: one `limit` or `check` under a single meter policy (GCRA,
 * token bucket with continuous refill, leaky bucket in either mode), sent when no other call waits to share
 * a statement. A call of the decide function pays for the function (its variables, its nested functions,
 * each statement in it planned and run on its own); these are one plain statement each, prepared once per
 * connection. Like the Redis store's meter scripts, the statement computes only the verdict, the next state
 * and the expiry, from the meter's one SQL definition (`METER_SQL`, kinds/meter.ts, which the decide
 * function's meter port is generated from too), and returns the state it decided on, the time and its
 * verdict; the client runs the model (`decide`, model/decide.ts) on that state to write the report, and a
 * verdict the model does not reach is a protocol error (ERR_STORE_PROTOCOL): a free self-check.
 *
 * Each comes in two forms, by whose clock decides: the server's (`clock_timestamp()`, read where noted), or
 * the caller's (`nowUs` of the request, a parameter). Two prepared statements rather than one that tests a
 * parameter for NaN: PostgreSQL builds the executor's state of every expression of a prepared statement
 * again on each execution, so each function call, operator and cast in the text costs every call, taken or
 * not, and the statements are written with as few as the decision allows.
 *
 * Both read and write the rows the decide function reads and writes (port.ts: the meter's state
 * `[blockedUntil, tat]`, `expires_at` at its untouched time rounded up to the minute), so calls of either
 * path on one key interoperate, and both fail to prepare where this version of the port is not installed
 * (they name its prune function), which the store turns into ERR_STORE_VERSION as for the decide function.
 *
 * Both return one row, `r`: a bigint[] as text (`{…}`; integers print exactly, whatever the session's
 * `extra_float_digits`), laid out as `METER_REPLY` (wire.ts) says, parsed by `decodeMeter` (replies.ts).
 */

/**
 * Where the write statement keeps the state it decided on between its `DO UPDATE` and its `RETURNING`
 * (which sees only the row it wrote): a setting local to the statement's own transaction (`set_config(…,
 * true)`). Outside that transaction it is empty (`''`, or unknown, NULL, in a session that never set it),
 * so a `RETURNING` that finds it empty belongs to a row the statement inserted.
 */
export const STASH = 'floodgate.decided_on';

/** Whose clock decides: the server's, or the caller's `nowUs` (the last parameter). */
export type MeterClock = 'server' | 'caller';

/**
 * The server's clock in whole µs since the epoch, read once: `extract` gives the exact seconds with their
 * µs as a numeric (PostgreSQL 14 and later); before 14 it gives a float8, within 0.25 µs of the exact value
 * until the year 2112, which the bigint cast rounds to it. Below 2^53, the float8 is exact.
 */
export const SERVER_NOW = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint::float8`;

/**
 * A committed call of cost > 0 that the meter can admit at all (a cost beyond its tolerance changes
 * nothing: the read statement serves it). Ports, for that one policy, `evaluatePolicy` + `evaluateMeter` +
 * `decide` + `settleDenied` (model/decide.ts, model/meter.ts), as far as they change the state:
 *
 * - blocked (`blockedUntil > now`): nothing changes;
 * - admitted (`owed − τ ≤ slack`, with `owed = max(TAT, now) + charge − now`): `[0, max(TAT, now) + charge]`;
 * - denied with `blockMs`: `[now + blockUs, TAT]`, the penalty box; denied without: nothing changes.
 *
 * Every number here is a whole number of µs below 2^53 (times, charges, τ, the slack), so float8 computes
 * them exactly, in any order: the test `owed − τ ≤ slack` is `TAT ≤ now + room` with `room = τ + slack −
 * charge` (at least 0, the charge fitting τ), which also admits a TAT behind `now`; and the expiry, at the
 * moment the state written is untouched (`now + resetAfterUs` in the model: the new TAT when admitted, the
 * later of the block's end and the TAT in the penalty box), is the later of its two numbers. A call that
 * changes nothing writes the row back as it was, expiry included (it is locked either way).
 *
 * Two forms by penalty box: with `penalty`, `$4` is blockUs (> 0) and a denial writes the box; without, a
 * denial changes nothing and the statement has no such branch (each branch's expressions are built again on
 * every execution, taken or not: the plain form costs the server about 5 % less per call,
 * bench/sql-profile.ts).
 *
 * Parameters: `$1` the row key, `$2` the charge (`meterCharge(cost, T)`), `$3` room, with `penalty` `$4`
 * blockUs, and with the caller's clock now µs after them (`$5`, or `$4` without `penalty`).
 *
 * Clock: the server's is read in the `DO UPDATE`, once the conflict has locked the row, so time never goes
 * back on a key (a call that waited for the lock decides after the call it waited for); a new key reads it
 * before its insert.
 *
 * A row whose state is NULL (one the decide function created to lock a key it then did not write) decides
 * like a missing key, as it does there: not blocked, `coalesce` makes its TAT pass the test, `greatest`
 * skips the NULL (`[0, now + charge]`), and it is returned as holding nothing.
 *
 * Concurrency: a key no transaction holds is inserted; one that exists, or that another transaction inserts
 * meanwhile, is locked by the `ON CONFLICT` and decided in its `DO UPDATE` on the row as it is then (the
 * latest committed version, which the statement's snapshot may not see), so the state returned is the one
 * the write was computed from.
 *
 * Returns `{now,blockedUntil,tat,verdict}`, the state decided on and the verdict (1 admitted; stashed by
 * the `DO UPDATE`, whose subquery passes its one row once `set_config` has kept it: `set_config` returns
 * the value set, never NULL; the blocked test comes first, so a blocked key is never admitted), or,
 * for a key that held nothing, `{now,pruned}`: the row was inserted at `now` (its TAT less the charge) and,
 * as the decide function does for the rows it creates, the port's prune function deleted a few expired
 * ones (how many follows).
 */
export function meterWriteStatement(n: SqlNames, clock: MeterClock, penalty: boolean): string {
  const now = clock === 'server' ? SERVER_NOW : penalty ? '$5::float8' : '$4::float8';
  const m = METER_SQL;
  // The verdict is tested where it is used rather than kept in a subquery level of its own: a level costs
  // every call more than the two comparisons it would save (bench/sql-profile.ts).
  const blocked = m.blocked('v.b', 'v.now');
  const admits = m.admits('v.x', 'v.now', '$3::float8');
  const admitted = m.admittedTat('v.x', 'v.now', '$2::float8');
  const [blockedUntil, tat] = m.penalty('v.now', '$4::float8', 'v.x');
  return `INSERT INTO ${n.qualified} AS t (key, state, expires_at)
SELECT $1::text, ARRAY[0, i.tat], ${expiryAt('i.tat')}
FROM (SELECT ${now} + $2::float8 AS tat OFFSET 0) i
ON CONFLICT (key) DO UPDATE SET (state, expires_at) = (
  SELECT
    CASE WHEN ${blocked} THEN t.state
      WHEN ${admits} THEN ARRAY[0, ${admitted}]
      ELSE ${penalty ? `ARRAY[${blockedUntil}, ${tat}]` : 't.state'} END,
    CASE WHEN ${blocked} THEN t.expires_at
      WHEN ${admits} THEN ${expiryAt(admitted)}
      ELSE ${penalty ? expiryAt(m.untouchedAt(blockedUntil, tat)) : 't.expires_at'} END
  FROM (SELECT ${now} AS now, t.state[1] AS b, t.state[2] AS x OFFSET 0) v
  WHERE set_config('${STASH}', ARRAY[v.now, v.b, v.x,
    CASE WHEN ${blocked} THEN 0 WHEN ${admits} THEN 1 ELSE 0 END]::bigint[]::text, true) IS NOT NULL)
RETURNING coalesce(nullif(current_setting('${STASH}', true), ''),
  ARRAY[t.state[2] - $2::float8, ${n.fn('prune')}(t.state[2] - $2::float8, 1)]::bigint[]::text) AS r`;
}

/**
 * Every other call under one meter policy: a `check`, a cost 0, a cost beyond what the meter can ever
 * admit. None changes anything (the model's `decide` writes nothing for them), so the statement only reads
 * the row, without locking it, as the decide function reads the rows of a `check`, and gives its verdict.
 *
 * Parameters: `$1` the row key, `$2` room (as for the write statement; `-Infinity` for a cost beyond τ,
 * which nothing admits), with the caller's clock `$3` now µs. Returns `{now,blockedUntil,tat,verdict}`,
 * `{now,NULL,NULL,verdict}` for a key that holds no state.
 */
export function meterReadStatement(n: SqlNames, clock: MeterClock): string {
  const now = clock === 'server' ? SERVER_NOW : '$3::float8';
  const m = METER_SQL;
  return `SELECT ARRAY[v.now, v.b, v.x,
    CASE WHEN ${m.blocked('v.b', 'v.now')} THEN 0 WHEN ${m.admits('v.x', 'v.now', '$2::float8')} THEN 1 ELSE 0 END
  ]::bigint[]::text AS r
FROM (SELECT ${now} AS now, t.state[1] AS b, t.state[2] AS x
  FROM (SELECT) o LEFT JOIN ${n.qualified} t ON t.key = $1::text
  WHERE ${literal(`${n.fn('prune')}(double precision,integer)`)}::regprocedure IS NOT NULL OFFSET 0) v`;
}
