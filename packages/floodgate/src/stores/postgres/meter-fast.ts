import { clockUs, expiry, expiryAt, literal, type SqlNames } from './sql.js';

/*
 * Two plain statements for the commonest call: one `limit` or `check` under a single meter policy (GCRA,
 * token bucket with continuous refill, leaky bucket in either mode), sent when no other call waits to share
 * a statement. A call of the decide function pays for the function (its variables, its nested functions,
 * each statement in it planned and run on its own); these are one plain statement each, prepared once per
 * connection. Like the Redis store's meter scripts, the statement applies the model's verdict and next state
 * and returns the state it decided on; the client runs the model (`decide`, model/decide.ts) on that state
 * to report the decision, so the SQL holds only what the write needs.
 *
 * Both read and write the rows the decide function reads and writes (port.ts: the meter's state
 * `[blockedUntil, tat]`, `expires_at` at its untouched time rounded up to the minute), so calls of either
 * path on one key interoperate, and both fail to prepare where this version of the port is not installed
 * (they name its prune function), which the store turns into ERR_STORE_VERSION as for the decide function.
 */

/**
 * Where the write statement keeps the state it decided on between its `DO UPDATE` and its `RETURNING`
 * (which sees only the row it wrote): a setting local to the statement's own transaction (`set_config(…,
 * true)`), gone when it commits.
 */
const STASH = 'floodgate.decided_on';

/** The statement's µs: `$2`, or the server's clock (`clockUs`) when `$2` is NaN. `c.ts` holds the clock read. */
function nowUs(): string {
  return `CASE WHEN $2::float8 = 'NaN' THEN ${clockUs('c.ts')} ELSE $2::float8 END`;
}

/** One read of the server's clock, as a row source `c(ts)`. */
const CLOCK = `(SELECT clock_timestamp() AT TIME ZONE 'UTC' AS ts) c`;

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
 * later of the block's end and the TAT in the penalty box), is the later of its two numbers.
 *
 * Parameters: `$1` the row key, `$2` now µs (`NaN`: the server's clock), `$3` the charge
 * (`meterCharge(cost, T)`), `$4` room, `$5` blockUs.
 *
 * Clock: `$2`, or `clock_timestamp()` read once the row is held (in the `DO UPDATE`, after the conflict
 * locked it), so time never goes back on a key; a new key reads it before its insert.
 *
 * Concurrency: a key no transaction holds is inserted; one that exists, or that another transaction inserts
 * meanwhile, is locked by the `ON CONFLICT` and decided in its `DO UPDATE` on the row as it is then (the
 * latest committed version, which the statement's snapshot may not see), so the state returned is the one
 * the write was computed from. A call that changes nothing writes the row back as it was (it is locked
 * either way).
 *
 * Returns one row, `r`: `u<now>,<blockedUntil>,<tat>` (the state decided on, read in the `DO UPDATE`), or,
 * for a key that held nothing, `i<now>,<pruned>`: the new row was inserted, and, as the decide function does
 * for the rows it creates, the port's prune function deleted a few expired ones (how many follows).
 */
export function meterWriteStatement(n: SqlNames): string {
  return `INSERT INTO ${n.qualified} AS t (key, state, expires_at)
SELECT $1::text, ARRAY[0, f.now + $3::float8], ${expiry('f.now', '$3::float8')}
FROM (SELECT ${nowUs()} AS now, set_config('${STASH}', 'i', true) FROM ${CLOCK}) f
ON CONFLICT (key) DO UPDATE SET (state, expires_at) = (
  SELECT coalesce(d.nx, t.state), coalesce(${expiryAt('greatest(d.nx[1], d.nx[2])')}, t.expires_at)
  FROM (
    SELECT CASE
      WHEN t.state[1] > m.now THEN NULL
      WHEN t.state[2] <= m.now + $4::float8 THEN ARRAY[0, greatest(t.state[2], m.now) + $3::float8]
      WHEN $5::float8 > 0 THEN ARRAY[m.now + $5::float8, t.state[2]]
    END AS nx
    FROM (SELECT ${nowUs()} AS now,
        set_config('${STASH}', 'u' || (${nowUs()})::bigint || ',' || t.state[1]::bigint || ',' || t.state[2]::bigint, true)
      FROM ${CLOCK}) m
    OFFSET 0) d)
RETURNING CASE WHEN current_setting('${STASH}') = 'i'
  THEN 'i' || (t.state[2] - $3::float8)::bigint || ',' || ${n.fn('prune')}(t.state[2] - $3::float8, 1)
  ELSE current_setting('${STASH}') END AS r`;
}

/**
 * Every other call under one meter policy: a `check`, a cost 0, a cost beyond what the meter can ever
 * admit. None changes anything (the model's `decide` writes nothing for them), so the statement only reads
 * the row, without locking it, as the decide function reads the rows of a `check`.
 *
 * Parameters: `$1` the row key, `$2` now µs (`NaN`: the server's clock). Returns one row, `r`: `r<now>`,
 * then `,<blockedUntil>,<tat>` when the key holds a state.
 */
export function meterReadStatement(n: SqlNames): string {
  return `SELECT 'r' || (${nowUs()})::bigint || coalesce(',' || t.state[1]::bigint || ',' || t.state[2]::bigint, '') AS r
FROM ${CLOCK} LEFT JOIN ${n.qualified} t ON t.key = $1::text
WHERE ${literal(`${n.fn('prune')}(double precision,integer)`)}::regprocedure IS NOT NULL`;
}
