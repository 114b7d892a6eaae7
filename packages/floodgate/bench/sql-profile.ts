// Instructions a PostgreSQL backend spends per sequential decision, counted by callgrind (deterministic,
// whatever the load), for floodgate's meter statement and what it is measured against:
//
//   node --import tsx packages/floodgate/bench/sql-profile.ts [decisions]
//
// Creates a scratch cluster (initdb, PostgreSQL's default settings) in a temporary directory and starts it
// under `valgrind --tool=callgrind --trace-children=yes` on a spare port (PROFILE_PORT, default 5491;
// PROFILE_LOG=1 shows the server's log). Each contender first calls every one of KEYS keys (default 1000)
// once, so that every counted call updates a row; then it makes 200 calls on a new connection, and 200 +
// `decisions` (default 2000) on another, one at a time over the keys as bench:sql's sequential rows do.
// Callgrind writes each backend's count when its connection closes; the difference of the two, divided by
// `decisions`, is what a call costs the server, without the connection's start and the first calls'
// planning. TOP=n prints where the longer run's instructions went (callgrind_annotate, inclusive). Needs
// valgrind and PostgreSQL's server binaries (`pg_config --bindir`); as root, the cluster runs as the
// `postgres` user.
//
// Contenders (ONLY=<regular expression> runs those it matches, and the peer): floodgate (`limiter.limit`,
// GCRA, its meter statement on the server's clock), floodgate's fixed window (the peer's algorithm) on the
// server's clock and on the caller's (the peer's whole work), floodgate with
// `fastPath: false` (the decide function), rate-limiter-flexible's RateLimiterPostgres (`consume`, a fixed
// window counted on the caller's clock), the minimal upsert of bench:sql, and the GCRA floor: the least a
// statement deciding GCRA on the server's clock does on floodgate's table (read the clock, test and move
// the TAT, write the expiry) and no more, admitting only (no blocked or denied branch, no state returned,
// no pruning); the same on the caller's clock, and on a table with the TAT in a column of its own; the
// fixed-window floor: the least a statement deciding a fixed window (denied calls not counted) does on
// floodgate's table on the caller's clock, as the peer's statement runs, and the same returning the state
// it decided on (what floodgate's statements return for the client's model to write the report and check
// the verdict).
import { execFile, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createLimiter, fixedWindow, gcra, systemClock } from 'floodgate';
import { fromPg, postgresStore } from 'floodgate/postgres';
import pg from 'pg';
import { RateLimiterPostgres } from 'rate-limiter-flexible';

const run = promisify(execFile);
/** A pool whose idle connections may be ended by the server stopping (at the end): not an error here. */
function quiet(pool: pg.Pool): pg.Pool {
  pool.on('error', () => undefined);
  return pool;
}
const DECISIONS = Number(process.argv[2] ?? 2000);
const KEYS = Number(process.env.KEYS ?? 1000);
const PORT = Number(process.env.PROFILE_PORT ?? 5491);
const TOP = Number(process.env.TOP ?? 0);
/** Only the contenders whose name matches this (a regular expression); the peer always runs. */
const ONLY = process.env.ONLY === undefined ? undefined : new RegExp(process.env.ONLY);
const LIMIT = 1_000_000;

const bindir = (await run('pg_config', ['--bindir'])).stdout.trim();
const asRoot = process.getuid?.() === 0;
const dir = mkdtempSync(join(tmpdir(), 'floodgate-sql-callgrind-'));
if (asRoot) chownSync(dir, Number((await run('id', ['-u', 'postgres'])).stdout), 0);
const as = (command: string, args: string[]): [string, string[]] =>
  asRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];

await run(...as(join(bindir, 'initdb'), ['-D', join(dir, 'data'), '-A', 'trust', '-U', 'postgres']));
const server = spawn(
  ...as('valgrind', [
    '--tool=callgrind',
    '--trace-children=yes',
    '--vgdb=no',
    `--callgrind-out-file=${dir}/cg.%p`,
    join(bindir, 'postgres'),
    '-D',
    join(dir, 'data'),
    '-p',
    String(PORT),
    '-k',
    dir,
    '-c',
    'listen_addresses=127.0.0.1',
  ]),
  { stdio: ['ignore', 'ignore', process.env.PROFILE_LOG === '1' ? 'inherit' : 'ignore'] },
);
const PG = { host: '127.0.0.1', port: PORT, user: 'postgres', database: 'postgres' } as const;
for (;;) {
  const probe = new pg.Client(PG);
  const up = await probe.connect().then(
    () => true,
    () => false,
  );
  await probe.end().catch(() => undefined);
  if (up) break;
  await new Promise((resolve) => setTimeout(resolve, 500));
}

const keys = Array.from({ length: KEYS }, (_, i) => `client-${i}`);
const admin = quiet(new pg.Pool({ ...PG, max: 1 }));
await postgresStore({ client: fromPg(admin), table: 'fg' }).migrate();
await postgresStore({ client: fromPg(admin), table: 'fg_fn' }).migrate();
await postgresStore({ client: fromPg(admin), table: 'fg_fw' }).migrate();
await postgresStore({ client: fromPg(admin), table: 'floor' }).migrate();
await postgresStore({ client: fromPg(admin), table: 'fw_floor' }).migrate();
await admin.query('CREATE TABLE floor_columns (key text PRIMARY KEY, tat float8, expires_at bigint NOT NULL)');
await admin.query('CREATE INDEX ON floor_columns (expires_at)');
await admin.query('CREATE TABLE upsert (key text PRIMARY KEY, n bigint NOT NULL, expires_at bigint)');

/** A contender on a connection of its own: `call` makes one decision. */
type Open = (pool: pg.Pool) => Promise<(key: string) => Promise<unknown>>;

/** A server under callgrind answers its first calls slowly (its functions are compiled): no timeout. */
const SLOW = 600_000;
const gcraPolicy = [gcra({ limit: LIMIT, periodMs: 1000 })];
const CLOCK = `round(date_part('epoch', clock_timestamp()) * 1000000)`;
// On floodgate's table layout: `state` = [blockedUntil, TAT], `expires_at` in µs, a minute's grain.
const FLOOR = `INSERT INTO floor AS t (key, state, expires_at)
VALUES ($1::text, ARRAY[0, ${CLOCK} + $2::float8], 0)
ON CONFLICT (key) DO UPDATE SET
  state = ARRAY[0, greatest(t.state[2] + $2::float8, excluded.state[2])],
  expires_at = (ceil((excluded.state[2] + $3::float8) / 60000000) * 60000000)::bigint
WHERE t.state[2] <= excluded.state[2] + $3::float8`;
// The same on a table holding the TAT in a column of its own rather than in an array.
const FLOOR_COLUMNS = `INSERT INTO floor_columns AS t (key, tat, expires_at)
VALUES ($1::text, ${CLOCK} + $2::float8, 0)
ON CONFLICT (key) DO UPDATE SET
  tat = greatest(t.tat + $2::float8, excluded.tat),
  expires_at = (ceil((excluded.tat + $3::float8) / 60000000) * 60000000)::bigint
WHERE t.tat <= excluded.tat + $3::float8`;
// The fixed window's floor, on floodgate's table layout (`state` = [blockedUntil, windowStart, count]) and
// the caller's clock as the peer's statement: the window's start `$3` and the expiry `$4` come from the
// caller, a call is admitted when the window's count plus the cost `$2` is within the limit `$5`, and a
// denied call changes nothing and returns no row (the verdict is the row count). No blocked branch, no
// pruning, no state read returned: the least a statement deciding the fixed window does.
const FW_FLOOR = `INSERT INTO fw_floor AS t (key, state, expires_at)
VALUES ($1::text, ARRAY[0, $3::float8, $2::float8], $4::bigint)
ON CONFLICT (key) DO UPDATE SET
  state = ARRAY[0, $3::float8, CASE WHEN t.state[2] = $3::float8 THEN t.state[3] ELSE 0 END + $2::float8],
  expires_at = $4::bigint
WHERE CASE WHEN t.state[2] = $3::float8 THEN t.state[3] ELSE 0 END + $2::float8 <= $5::float8
RETURNING state[3]`;
// The same returning the state it decided on, as floodgate's statements do for the client's model to write
// the report and check the verdict: kept for the RETURNING in a transaction-local setting.
const FW_FLOOR_READ = FW_FLOOR.replace(
  'expires_at = $4::bigint',
  "expires_at = CASE WHEN set_config('fw.read', t.state::text, true) IS NULL THEN 0 ELSE $4::bigint END",
).replace('RETURNING state[3]', "RETURNING state[3], current_setting('fw.read', true)");
const MINIMAL = `INSERT INTO upsert AS t (key, n, expires_at) VALUES ($1, 1, 0)
  ON CONFLICT (key) DO UPDATE SET n = t.n + 1 RETURNING n`;

const contenders: { name: string; open: Open }[] = [
  {
    name: 'floodgate (meter statement)',
    open: async (pool) => {
      const limiter = createLimiter({
        store: postgresStore({ client: fromPg(pool), table: 'fg' }),
        policies: gcraPolicy,
        timeoutMs: SLOW,
      });
      return (key) => limiter.limit(key);
    },
  },
  {
    // The peer's algorithm: the same work, on the server's clock.
    name: 'floodgate fixed window',
    open: async (pool) => {
      const limiter = createLimiter({
        store: postgresStore({ client: fromPg(pool), table: 'fg_fw' }),
        policies: [fixedWindow({ limit: LIMIT, windowMs: 1000 })],
        timeoutMs: SLOW,
      });
      return (key) => limiter.limit(key);
    },
  },
  {
    // The same work as the peer's statement, clock included: the caller's.
    name: "floodgate fixed window, caller's clock",
    open: async (pool) => {
      const limiter = createLimiter({
        store: postgresStore({ client: fromPg(pool), table: 'fg_fw' }),
        policies: [fixedWindow({ limit: LIMIT, windowMs: 1000 })],
        timeoutMs: SLOW,
        clock: systemClock,
      });
      return (key) => limiter.limit(key);
    },
  },
  {
    name: 'floodgate, fastPath: false',
    open: async (pool) => {
      const store = postgresStore({ client: fromPg(pool), table: 'fg_fn', fastPath: false });
      const limiter = createLimiter({ store, policies: gcraPolicy, timeoutMs: SLOW });
      return (key) => limiter.limit(key);
    },
  },
  {
    name: 'rate-limiter-flexible',
    open: async (pool) => {
      const rlf = await new Promise<RateLimiterPostgres>((resolve, reject) => {
        const limiter: RateLimiterPostgres = new RateLimiterPostgres(
          { storeClient: pool, tableName: 'rlf', points: LIMIT, duration: 1, clearExpiredByTimeout: false },
          (error?: Error) => (error ? reject(error) : resolve(limiter)),
        );
      });
      return (key) => rlf.consume(key).catch(() => undefined);
    },
  },
  {
    name: 'minimal upsert',
    open: async (pool) => (key) => pool.query({ name: 'minimal', text: MINIMAL, values: [key] }),
  },
  {
    name: 'fixed-window floor',
    open: async (pool) => (key) => pool.query({ name: 'fw_floor', text: FW_FLOOR, values: fixedWindowFloor(key) }),
  },
  {
    name: 'fixed-window floor, state read returned',
    open: async (pool) => (key) =>
      pool.query({ name: 'fw_floor_read', text: FW_FLOOR_READ, values: fixedWindowFloor(key) }),
  },
  {
    name: 'gcra-floor',
    open: async (pool) => (key) => pool.query({ name: 'floor', text: FLOOR, values: [key, '1', '999999'] }),
  },
  {
    name: "gcra-floor, caller's clock",
    open: async (pool) => (key) =>
      pool.query({
        name: 'floor_at',
        text: FLOOR.replace(CLOCK, '$4::float8'),
        values: [key, '1', '999999', String(Date.now() * 1000)],
      }),
  },
  {
    name: 'gcra-floor, TAT in a column',
    open: async (pool) => (key) =>
      pool.query({ name: 'floor_columns', text: FLOOR_COLUMNS, values: [key, '1', '999999'] }),
  },
];

/** The fixed-window floors' parameters for a call of cost 1 now: key, cost, window start, expiry, limit. */
function fixedWindowFloor(key: string): string[] {
  const windowUs = 1_000_000;
  const start = Math.floor((Date.now() * 1000) / windowUs) * windowUs;
  return [key, '1', String(start), String(Math.ceil((start + windowUs) / 60_000_000) * 60_000_000), String(LIMIT)];
}

/**
 * Runs `count` calls on a new connection, closes it and returns its backend's instructions, which
 * callgrind writes when the backend exits.
 */
async function backendInstructions(open: Open, count: number, top: number): Promise<number> {
  const pool = quiet(new pg.Pool({ ...PG, max: 1 }));
  const pid = Number(((await pool.query('SELECT pg_backend_pid() AS pid')).rows[0] as { pid: number }).pid);
  const call = await open(pool);
  let seed = 1;
  for (let i = 0; i < count; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    await call(keys[seed % KEYS] as string);
  }
  await pool.end();
  const dump = join(dir, `cg.${pid}`);
  while (existsSync(`/proc/${pid}`) || !existsSync(dump)) await new Promise((resolve) => setTimeout(resolve, 200));
  const annotate = (await run('callgrind_annotate', ['--inclusive=yes', dump], { maxBuffer: 1 << 26 })).stdout;
  if (top > 0) {
    const lines = annotate.split('\n').filter((line) => /^\s*[\d,]+ \(/.test(line));
    console.log(lines.slice(0, top).join('\n'));
  }
  return Number(/([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS/.exec(annotate)?.[1]?.replaceAll(',', ''));
}

const WARM = 200;
const results: { name: string; perCall: number }[] = [];
try {
  for (const c of contenders) {
    if (ONLY !== undefined && c.name !== 'rate-limiter-flexible' && !ONLY.test(c.name)) continue;
    // Every key holds a row first, so that every counted call updates one.
    const warm = quiet(new pg.Pool({ ...PG, max: 1 }));
    const first = await c.open(warm);
    for (const key of keys) await first(key);
    await warm.end();
    if (TOP > 0) console.log(`\n${c.name}, the whole backend (${WARM + DECISIONS} calls):`);
    const base = await backendInstructions(c.open, WARM, 0);
    const more = await backendInstructions(c.open, WARM + DECISIONS, TOP);
    results.push({ name: c.name, perCall: (more - base) / DECISIONS });
  }
} finally {
  await admin.end();
  await run(...as(join(bindir, 'pg_ctl'), ['-D', join(dir, 'data'), 'stop', '-m', 'fast'])).catch(() => undefined);
  if (server.exitCode === null && server.signalCode === null)
    await new Promise((resolve) => server.once('exit', resolve));
  rmSync(dir, { recursive: true, force: true });
}

const peer = results.find((r) => r.name === 'rate-limiter-flexible')?.perCall ?? Number.NaN;
console.log(`\nPostgreSQL backend instructions per sequential call (callgrind, ${DECISIONS} calls, ${KEYS} keys):`);
for (const r of results) {
  console.log(
    `${r.name.padEnd(30)} ${String(Math.round(r.perCall)).padStart(9)}   ${(r.perCall / peer).toFixed(2)}× peer`,
  );
}
