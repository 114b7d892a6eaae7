import { FIXED_WINDOW_SQL } from './kinds/fixed-window.js';
import { type MeterClock, SERVER_NOW, STASH } from './meter-fast.js';
import { expiryAt, literal, type SqlNames } from './sql.js';

/*
 * Plain statements for a lone `limit` or `check` under a single fixed-window policy, as meter-fast.ts has
 * for a meter, and for the same reasons: one plain statement, prepared once per connection, instead of a
 * call of the decide function. They compute the verdict, the next state and the expiry from the fixed
 * window's one SQL definition (`FIXED_WINDOW_SQL`, kinds/fixed-window.ts, which the decide function's
 * port is generated from too) and return the state they decided on, the time and the verdict; the client
 * runs the model on that state to write the report and checks the verdict (`decodeStatement`, replies.ts).
 * One statement per alignment (`c`: 0 clock, 1 first request) and clock; they read and write the rows the
 * decide function reads and writes (state `[blockedUntil, windowStart, count]`), so both paths interoperate.
 *
 * The count is a sum of costs, which need not be whole: the reply, a bigint[] as text so that no session
 * setting (`extra_float_digits`) changes a digit, carries a whole count as itself and any other as the
 * negated bits of its float8 (`countBits`), which the client reads back exactly.
 */

/** A count (≥ 0, or NULL) as a bigint: itself when whole, else minus the bits of its float8. */
function countBits(count: string): string {
  return `CASE WHEN ${count} = trunc(${count}) THEN ${count}::bigint
    ELSE -('x' || encode(float8send(${count}), 'hex'))::bit(64)::bigint END`;
}

/** Where the insert keeps the time it decided a new key at, for its `RETURNING` (see `STASH`). */
const INSERTED_AT = 'floodgate.inserted_at';

/** Which form of the write statement: the policy's alignment, and what a denial writes. */
export interface WindowForm {
  /** `c`: 0 clock-aligned, 1 from the first request. */
  readonly aligned: 0 | 1;
  /** A penalty box (`blockMs` > 0). */
  readonly box: boolean;
  /** Denied calls count (`countDenied`). */
  readonly counts: boolean;
}

/**
 * A committed call of cost > 0 that the window can admit at all (a cost beyond the limit is read only,
 * unless denied calls count: then the decide function takes it). Ports, for that one policy,
 * `evaluatePolicy` + `evaluateFixedWindow` + `decide` + `settleDenied` (model/decide.ts,
 * model/fixed-window.ts), as far as they change the state:
 *
 * - blocked (`blockedUntil > now`): nothing changes;
 * - admitted (`count + cost ≤ limit` in the window `now` falls in): `[0, start, count + cost]`;
 * - denied: with countDenied, the window's count plus the cost (at most MAX_COST), `[0, start, counted]`
 *   (a blocked call changes nothing here, and a cost above the limit, which is counted even when blocked,
 *   goes to the decide function: so no block is live to keep); with `blockMs`, the penalty box:
 *   `[now + blockUs, …]` on that state, or on the state read (`[0, 0, 0]` for none); with neither,
 *   nothing changes.
 *
 * One statement per form (`WindowForm`) and clock: what a denial writes is fixed by the policy, and
 * PostgreSQL builds the executor's state of every expression of a prepared statement again on each
 * execution, taken or not (meter-fast.ts), so each form carries only its own branches. The plain form (no
 * box, denials not counted, the default and the commonest) decides in one subquery level over the row read;
 * the others keep the levels their denial needs. The plain form costs the server about 14 % less per call
 * than one statement for every form did (bench/sql-profile.ts).
 *
 * The expiry is the moment the state written is untouched (`FIXED_WINDOW_SQL.untouchedAt`): the window's
 * end when admitted, the later of the block's end and the end of a window with a count when denied. A call
 * that changes nothing writes the row back as it was (it is locked either way).
 *
 * Parameters: `$1` the row key, `$2` the cost, `$3` the limit, `$4` the window (µs), with a box `$5`
 * blockUs, and with the caller's clock now µs after them. Clock and concurrency as the meter's write
 * statement (the server's clock read once the row is locked; a new key's before its insert).
 *
 * Returns `{now,blockedUntil,windowStart,count,verdict}`, the state decided on (`countBits`) and the
 * verdict (1 admitted), or, for a key that held nothing, `{now,pruned}` (inserted, always admitted: the
 * cost fits the limit), as the meter's.
 */
export function windowWriteStatement(n: SqlNames, form: WindowForm, clock: MeterClock): string {
  const { aligned, box, counts } = form;
  const blockUs = '$5::float8';
  const now = clock === 'server' ? SERVER_NOW : box ? '$6::float8' : '$5::float8';
  const w = FIXED_WINDOW_SQL;
  const a = '$4::float8';
  const read = `SELECT ${now} AS now, t.state[1] AS b, t.state[2] AS s2, t.state[3] AS s3 OFFSET 0`;
  // The state decided on and the verdict (1 admitted, else 0), kept for the RETURNING (`m` in scope).
  const stash = (verdict: string) =>
    `WHERE set_config('${STASH}', ARRAY[m.now, m.b, m.s2, ${countBits('m.s3')}, ${verdict}]::bigint[]::text, true)
    IS NOT NULL`;
  let update: string;
  if (!box && !counts) {
    // A denial changes nothing: one level over the row read gives the window, its count and the verdict.
    const start = w.start(aligned, 'z.s2', 'z.s3', 'z.now', a);
    const count = w.count(aligned, 'z.s2', 'z.s3', 'z.now', a, start);
    update = `SELECT
    CASE WHEN m.v = 1 THEN ARRAY[0, m.start, m.cnt + $2::float8] ELSE t.state END,
    CASE WHEN m.v = 1 THEN ${expiryAt(`m.start + ${a}`)} ELSE t.expires_at END
  FROM (SELECT z.*, ${start} AS start, ${count} AS cnt,
      CASE WHEN z.b > z.now THEN 0 WHEN ${w.admits(count, '$2::float8', '$3::float8')} THEN 1 ELSE 0 END AS v
    FROM (${read}) z OFFSET 0) m
  ${stash('m.v')}`;
  } else {
    const windowCount = counts ? 'm.nc' : 'm.cnt';
    update = `SELECT
    CASE WHEN m.v < 0 THEN t.state
      WHEN m.v = 1 THEN ARRAY[0, m.start, m.cnt + $2::float8]
      ELSE ARRAY[m.nb, ${counts ? 'm.start' : 'coalesce(m.s2, 0)'}, m.nc] END,
    CASE WHEN m.v < 0 THEN t.expires_at
      WHEN m.v = 1 THEN ${expiryAt(`m.start + ${a}`)}
      ELSE ${expiryAt(w.untouchedAt('m.nb', 'm.start', windowCount, 'm.now', a))} END
  FROM (SELECT x.now, x.b, x.s2, x.s3, x.start, x.cnt,
      ${box ? `x.now + ${blockUs}` : '0'} AS nb,
      ${counts ? w.counted('x.cnt', '$2::float8') : 'coalesce(x.s3, 0)'} AS nc,
      CASE WHEN x.b > x.now THEN -1 WHEN ${w.admits('x.cnt', '$2::float8', '$3::float8')} THEN 1 ELSE 0 END AS v
    FROM (SELECT y.*, ${w.count(aligned, 'y.s2', 'y.s3', 'y.now', a, 'y.start')} AS cnt
      FROM (SELECT z.*, ${w.start(aligned, 'z.s2', 'z.s3', 'z.now', a)} AS start
        FROM (${read}) z OFFSET 0) y
      OFFSET 0) x OFFSET 0) m
  ${stash('greatest(m.v, 0)')}`;
  }
  return `INSERT INTO ${n.qualified} AS t (key, state, expires_at)
SELECT $1::text, ARRAY[0, i.start, $2::float8], ${expiryAt(`i.start + ${a}`)}
FROM (SELECT n.now, ${w.fresh(aligned, 'n.now', a)} AS start FROM (SELECT ${now} AS now) n) i
WHERE set_config('${INSERTED_AT}', i.now::bigint::text, true) IS NOT NULL
ON CONFLICT (key) DO UPDATE SET (state, expires_at) = (
  ${update})
RETURNING coalesce(nullif(current_setting('${STASH}', true), ''),
  ARRAY[current_setting('${INSERTED_AT}')::bigint,
    ${n.fn('prune')}(current_setting('${INSERTED_AT}')::float8, 1)]::bigint[]::text) AS r`;
}

/**
 * Every other call under one fixed-window policy that changes nothing: a `check`, a cost 0, a cost beyond
 * the limit when denied calls do not count. Reads the row without locking it and gives its verdict.
 *
 * Parameters: `$1` the row key, `$2` the cost, `$3` the limit, `$4` the window (µs), with the caller's
 * clock `$5` now µs. Returns `{now,blockedUntil,windowStart,count,verdict}`, all of the state NULL for a
 * key that holds none.
 */
export function windowReadStatement(n: SqlNames, aligned: 0 | 1, clock: MeterClock): string {
  const now = clock === 'server' ? SERVER_NOW : '$5::float8';
  const w = FIXED_WINDOW_SQL;
  const a = '$4::float8';
  const start = w.start(aligned, 'v.s2', 'v.s3', 'v.now', a);
  return `SELECT ARRAY[v.now, v.b, v.s2, ${countBits('v.s3')},
    CASE WHEN v.b > v.now THEN 0
      WHEN ${w.admits(w.count(aligned, 'v.s2', 'v.s3', 'v.now', a, start), '$2::float8', '$3::float8')} THEN 1 ELSE 0 END
  ]::bigint[]::text AS r
FROM (SELECT ${now} AS now, t.state[1] AS b, t.state[2] AS s2, t.state[3] AS s3
  FROM (SELECT) o LEFT JOIN ${n.qualified} t ON t.key = $1::text
  WHERE ${literal(`${n.fn('prune')}(double precision,integer)`)}::regprocedure IS NOT NULL OFFSET 0) v`;
}
