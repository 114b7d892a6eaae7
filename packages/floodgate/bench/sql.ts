// Decisions per second and sequential latency of the SQL stores, against the ceiling of one statement
// per decision (pgbench running a minimal upsert) and rate-limiter-flexible's PostgreSQL and SQLite
// stores, in one run.
//
//   npm run bench:sql        (builds, then runs this file)
//
// PostgreSQL: 127.0.0.1:5432, database `test`, user postgres, with the server's settings as they are
// (durable commits by default); everything is created in a schema of its own and dropped at the end.
// Every contender makes the same calls: a key drawn from 10 000, a policy that admits nearly all of them
// (1 000 000 per second), so that every call writes. "in flight" keeps that many calls outstanding at
// once; "sequential" makes one call at a time and reports the 50th and 99th percentile latency. A call
// alone goes through floodgate's meter statement; the row with `fastPath: false` makes the same sequential
// calls on the same table through the decide function. The sequential figures of floodgate, of
// rate-limiter-flexible and of a minimal upsert sent through node-postgres are then measured again from
// one interleaved sample (one call of each in turn), whose ratios hold on a busy machine, with floodgate
// once more on connections set to `synchronous_commit=off` (commits that do not wait for the disk).
//
// What the server spends per sequential call, whatever the machine's load: bench/sql-profile.ts counts a
// backend's instructions under callgrind, for the same contenders and a floor.
//
// Environment: BENCH_SECONDS (per measurement, default 5), BENCH_ROUNDS (best of, default 2),
// BENCH_POOL (connections per pool and pgbench clients, default 10), BENCH_IN_FLIGHT (default 100),
// BENCH_SEQUENTIAL (calls for the latency figures, default 1000), BENCH_ONLY (`postgres` or `sqlite`),
// BENCH_CONCURRENCY (floodgate's `concurrency` option; its default otherwise).
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { createLimiter, fixedWindow, gcra, systemClock } from 'floodgate';
import { fromPg, postgresStore } from 'floodgate/postgres';
import { sqliteStore } from 'floodgate/sqlite';
import pg from 'pg';
import { RateLimiterPostgres, RateLimiterSQLite } from 'rate-limiter-flexible';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const POOL = Number(process.env.BENCH_POOL ?? 10);
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 100);
const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 1000);
const CONCURRENCY = process.env.BENCH_CONCURRENCY === undefined ? undefined : Number(process.env.BENCH_CONCURRENCY);
const DISTINCT = 10_000;
const LIMIT = 1_000_000;
const PG = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' } as const;
const SCHEMA = `fg_bench_${process.pid}`;
const run = promisify(execFile);
const keys = Array.from({ length: DISTINCT }, (_, i) => `client-${i}`);
const randomKey = () => keys[Math.floor(Math.random() * DISTINCT)] as string;

type Call = (key: string) => Promise<unknown>;

interface Figures {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** Calls per second with `inFlight` calls outstanding at all times. */
async function throughput(call: Call, inFlight: number): Promise<number> {
  let done = 0;
  const end = performance.now() + SECONDS * 1000;
  const worker = async () => {
    while (performance.now() < end) {
      await call(randomKey());
      done++;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  return done / ((performance.now() - start) / 1000);
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

async function latency(call: Call): Promise<{ p50Ms: number; p99Ms: number }> {
  const times: number[] = [];
  for (let i = 0; i < SEQUENTIAL; i++) {
    const start = performance.now();
    await call(randomKey());
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return { p50Ms: percentile(times, 50), p99Ms: percentile(times, 99) };
}

/**
 * Sequential latency of several contenders from one sample: one call of each in turn (the order rotating),
 * SEQUENTIAL × ROUNDS calls each, so that whatever else the shared machine does lands on all of them alike
 * and their ratio holds even when the figures themselves move between runs.
 */
async function interleavedLatency(calls: readonly Call[]): Promise<{ p50Ms: number; p99Ms: number }[]> {
  const times: number[][] = calls.map(() => []);
  for (let i = 0; i < SEQUENTIAL * ROUNDS; i++) {
    const key = randomKey();
    for (let j = 0; j < calls.length; j++) {
      const c = (i + j) % calls.length;
      const start = performance.now();
      await (calls[c] as Call)(key);
      (times[c] as number[]).push(performance.now() - start);
    }
  }
  return times.map((t) => {
    t.sort((a, b) => a - b);
    return { p50Ms: percentile(t, 50), p99Ms: percentile(t, 99) };
  });
}

/** One round of one contender: throughput with `inFlight` outstanding, then sequential latency. */
async function once(call: Call, inFlight: number): Promise<Figures> {
  const perSecond = await throughput(call, inFlight);
  return { perSecond, ...(await latency(call)) };
}

/**
 * Runs every contender ROUNDS times, interleaved (A B C, A B C) so that a disturbance of the shared
 * machine does not land on one contender only; keeps each one's best throughput and lowest p50.
 */
async function compare(contenders: readonly (() => Promise<Figures | undefined>)[]): Promise<(Figures | undefined)[]> {
  const best: (Figures | undefined)[] = contenders.map(() => undefined);
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < contenders.length; i++) {
      const f = await (contenders[i] as () => Promise<Figures | undefined>)();
      const b = best[i];
      if (f === undefined) continue;
      best[i] =
        b === undefined
          ? f
          : {
              perSecond: Math.max(b.perSecond, f.perSecond),
              ...(f.p50Ms < b.p50Ms ? { p50Ms: f.p50Ms, p99Ms: f.p99Ms } : { p50Ms: b.p50Ms, p99Ms: b.p99Ms }),
            };
    }
  }
  return best;
}

function line(name: string, f: Figures): void {
  const perSecond = Number.isNaN(f.perSecond) ? '' : `${Math.round(f.perSecond)}/s`;
  console.log(
    `${name.padEnd(46)} ${perSecond.padStart(10)}   p50 ${f.p50Ms.toFixed(2).padStart(6)} ms   p99 ${f.p99Ms.toFixed(2).padStart(6)} ms`,
  );
}

const ratio = (a: number, b: number) => (b > 0 ? `${(a / b).toFixed(2)}×` : 'n/a');

/** The per-statement ceiling: pgbench clients each running a one-row upsert, as fast as they can. */
async function pgbench(): Promise<Figures | undefined> {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-pgbench-'));
  const script = join(dir, 'upsert.sql');
  writeFileSync(
    script,
    `\\set k random(1, ${DISTINCT})
INSERT INTO ${SCHEMA}.upsert AS t (key, n, expires_at) VALUES ('client-' || :k, 1, 0)
  ON CONFLICT (key) DO UPDATE SET n = t.n + 1 RETURNING n;
`,
  );
  const args = ['-n', '-h', PG.host, '-p', String(PG.port), '-U', PG.user, '-f', script];
  try {
    const many = await run('pgbench', [...args, '-c', String(POOL), '-j', '2', '-T', String(SECONDS), PG.database]);
    const perSecond = Number(/tps = ([\d.]+)/.exec(many.stdout)?.[1] ?? 0);
    const prefix = join(dir, 'sequential');
    await run('pgbench', [...args, '-c', '1', '-t', String(SEQUENTIAL), '-l', `--log-prefix=${prefix}`, PG.database]);
    const log = readdirSync(dir).find((f) => f.startsWith('sequential')) as string;
    const times = readFileSync(join(dir, log), 'utf8')
      .trim()
      .split('\n')
      .map((row) => Number(row.split(' ')[2]) / 1000)
      .sort((a, b) => a - b);
    return { perSecond, p50Ms: percentile(times, 50), p99Ms: percentile(times, 99) };
  } catch (error) {
    console.log(`pgbench could not run (${(error as Error).message.split('\n')[0]}): no ceiling figures`);
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postgresFigures(): Promise<void> {
  const admin = new pg.Pool({ ...PG, max: 1 });
  const pool = new pg.Pool({ ...PG, max: POOL });
  try {
    await admin.query(`CREATE SCHEMA ${SCHEMA}`);
    await admin.query(`CREATE TABLE ${SCHEMA}.upsert (key text PRIMARY KEY, n bigint NOT NULL, expires_at bigint)`);
    const settings = await admin.query(
      "SELECT current_setting('synchronous_commit') AS sc, current_setting('fsync') AS fs, version() AS v",
    );
    const s = settings.rows[0] as { sc: string; fs: string; v: string };
    console.log(
      `PostgreSQL: pool of ${POOL}, ${IN_FLIGHT} calls in flight, ${SECONDS} s per figure, best of ${ROUNDS}`,
    );
    console.log(`${s.v.split(' on ')[0]}, synchronous_commit=${s.sc}, fsync=${s.fs}\n`);

    const lanes = CONCURRENCY === undefined ? {} : { concurrency: CONCURRENCY };
    const durable = postgresStore({ client: fromPg(pool), schema: SCHEMA, table: 'durable', ...lanes });
    await durable.migrate();
    const floodgate = createLimiter({ store: durable, policies: [gcra({ limit: LIMIT, periodMs: 1000 })] });
    // The same table and calls, every one through the decide function: what the meter statement saves.
    const functionStore = postgresStore({ client: fromPg(pool), schema: SCHEMA, table: 'durable', fastPath: false });
    const viaFunction = createLimiter({ store: functionStore, policies: [gcra({ limit: LIMIT, periodMs: 1000 })] });
    const unloggedStore = postgresStore({
      client: fromPg(pool),
      schema: SCHEMA,
      table: 'unlogged',
      unlogged: true,
      ...lanes,
    });
    await unloggedStore.migrate();
    const unlogged = createLimiter({ store: unloggedStore, policies: [gcra({ limit: LIMIT, periodMs: 1000 })] });
    const rlfLimiter = await new Promise<RateLimiterPostgres>((resolve, reject) => {
      const limiter: RateLimiterPostgres = new RateLimiterPostgres(
        {
          storeClient: pool,
          schemaName: SCHEMA,
          tableName: 'rlf',
          points: LIMIT,
          duration: 1,
          clearExpiredByTimeout: false,
        },
        (error?: Error) => (error ? reject(error) : resolve(limiter)),
      );
    });

    const [ceiling, fg, rlf, fgUnlogged, fgFunction] = await compare([
      pgbench,
      () => once((key) => floodgate.limit(key), IN_FLIGHT),
      () => once((key) => rlfLimiter.consume(key).catch(() => undefined), IN_FLIGHT),
      () => once((key) => unlogged.limit(key), IN_FLIGHT),
      async () => ({ perSecond: Number.NaN, ...(await latency((key) => viaFunction.limit(key))) }),
    ]);
    if (fg === undefined || rlf === undefined || fgUnlogged === undefined || fgFunction === undefined) {
      throw new Error('a contender did not run');
    }
    if (ceiling !== undefined) line(`pgbench minimal upsert (${POOL} clients; sequential: 1)`, ceiling);
    line('floodgate postgres', fg);
    line('rate-limiter-flexible RateLimiterPostgres', rlf);
    line('floodgate postgres, UNLOGGED table', fgUnlogged);
    line('floodgate postgres, fastPath: false (sequential)', fgFunction);

    console.log('');
    console.log(
      `floodgate / rate-limiter-flexible, ${IN_FLIGHT} in flight:   ${ratio(fg.perSecond, rlf.perSecond)} (target ≥ 1.5×)`,
    );
    if (ceiling !== undefined) {
      console.log(`floodgate / pgbench ceiling:                        ${ratio(fg.perSecond, ceiling.perSecond)}`);
      console.log(`rate-limiter-flexible / pgbench ceiling:            ${ratio(rlf.perSecond, ceiling.perSecond)}`);
      console.log(
        `sequential p50, floodgate / minimal upsert:         ${ratio(fg.p50Ms, ceiling.p50Ms)} (target ≤ 1.2×)`,
      );
    }
    console.log(`sequential p50, floodgate / rate-limiter-flexible:  ${ratio(fg.p50Ms, rlf.p50Ms)} (target ≤ 1×)`);
    console.log(`sequential p50, floodgate / its fastPath: false:    ${ratio(fg.p50Ms, fgFunction.p50Ms)}`);
    console.log(
      `UNLOGGED / durable floodgate, ${IN_FLIGHT} in flight:      ${ratio(fgUnlogged.perSecond, fg.perSecond)}`,
    );

    // The same sequential calls again, interleaved call by call, with a minimal one-decision upsert sent
    // through the same driver and pool (pgbench's figure above is a C client's).
    const minimal: Call = (key) =>
      pool.query({
        name: 'bench-minimal-upsert',
        text: `INSERT INTO ${SCHEMA}.upsert AS t (key, n, expires_at) VALUES ($1, 1, 0)
          ON CONFLICT (key) DO UPDATE SET n = t.n + 1 RETURNING n`,
        values: [key],
      });
    // And floodgate on connections whose commits do not wait for the disk (`synchronous_commit=off`, set on
    // the pool): what the write-ahead log's flush costs a lone call (docs/stores.md, "Commits that do not wait").
    const asyncPool = new pg.Pool({ ...PG, max: POOL, options: '-c synchronous_commit=off' });
    const asyncStore = postgresStore({ client: fromPg(asyncPool), schema: SCHEMA, table: 'async_commit' });
    await asyncStore.migrate();
    const asyncCommit = createLimiter({ store: asyncStore, policies: [gcra({ limit: LIMIT, periodMs: 1000 })] });
    // And the peer's own algorithm, a fixed window, decided by floodgate (on the server's clock): the same
    // work as the peer's statement, where the GCRA rows compare unequal work.
    const fixedStore = postgresStore({ client: fromPg(pool), schema: SCHEMA, table: 'fixed' });
    await fixedStore.migrate();
    const fixed = createLimiter({ store: fixedStore, policies: [fixedWindow({ limit: LIMIT, windowMs: 1000 })] });
    // The same on the caller's clock, as the peer counts: its whole work, no more.
    const fixedCaller = createLimiter({
      store: fixedStore,
      policies: [fixedWindow({ limit: LIMIT, windowMs: 1000 })],
      clock: systemClock,
    });
    // Every key once first: the other contenders' tables hold every key from their rounds, so that the
    // sample compares an update with an update, not a new row's insert with an update.
    for (let i = 0; i < DISTINCT; i += IN_FLIGHT) {
      await Promise.all(keys.slice(i, i + IN_FLIGHT).map((key) => fixed.limit(key)));
    }
    const [fgSeq, rlfSeq, minSeq, asyncSeq, fixedSeq, fixedCallerSeq] = (await interleavedLatency([
      (key) => floodgate.limit(key),
      (key) => rlfLimiter.consume(key).catch(() => undefined),
      minimal,
      (key) => asyncCommit.limit(key),
      (key) => fixed.limit(key),
      (key) => fixedCaller.limit(key),
    ])) as [Figures, Figures, Figures, Figures, Figures, Figures];
    await fixedStore.close();
    await asyncStore.close();
    await asyncPool.end();
    const seq = (name: string, f: { p50Ms: number; p99Ms: number }) => line(name, { perSecond: Number.NaN, ...f });
    console.log(`\nSequential, interleaved call by call (${SEQUENTIAL * ROUNDS} calls each, one sample):`);
    seq('floodgate postgres', fgSeq);
    seq('rate-limiter-flexible RateLimiterPostgres', rlfSeq);
    seq('minimal upsert (node-postgres, prepared)', minSeq);
    seq('floodgate postgres, synchronous_commit=off', asyncSeq);
    seq('floodgate postgres, fixed window', fixedSeq);
    seq('floodgate postgres, fixed window, caller clock', fixedCallerSeq);
    console.log(
      `interleaved p50, floodgate / rate-limiter-flexible: ${ratio(fgSeq.p50Ms, rlfSeq.p50Ms)} (target ≤ 1×)`,
    );
    console.log(
      `interleaved p50, floodgate / minimal upsert:        ${ratio(fgSeq.p50Ms, minSeq.p50Ms)} (target ≤ 1.2×)`,
    );
    console.log(
      `same work, sequential p50, floodgate fixed window / rate-limiter-flexible: ${ratio(fixedSeq.p50Ms, rlfSeq.p50Ms)} (target ≤ 1×)`,
    );
    console.log(
      `same work and clock, sequential p50, floodgate fixed window on the caller's clock / rate-limiter-flexible: ${ratio(fixedCallerSeq.p50Ms, rlfSeq.p50Ms)}`,
    );
    console.log(
      `sequential p50, floodgate GCRA / rate-limiter-flexible's fixed window: ${ratio(fgSeq.p50Ms, rlfSeq.p50Ms)} (target ≤ 1.1×)`,
    );
    await durable.close();
    await functionStore.close();
    await unloggedStore.close();
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`).catch(() => undefined);
    await pool.end();
    await admin.end();
  }
}

async function sqliteFigures(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-sqlite-bench-'));
  // Each store gets its own file, configured the same way: WAL (floodgate's migrate() sets it; the other
  // file is set here) and synchronous=NORMAL, which better-sqlite3 gives every later connection to a WAL
  // file (the connection that switched the mode would otherwise keep FULL).
  const ours = new Database(join(dir, 'floodgate.db'));
  const theirs = new Database(join(dir, 'rlf.db'));
  theirs.pragma('journal_mode = WAL');
  try {
    const store = sqliteStore({ database: ours });
    store.migrate();
    for (const database of [ours, theirs]) database.pragma('synchronous = NORMAL');
    const limiter = createLimiter({ store, policies: [gcra({ limit: LIMIT, periodMs: 1000 })] });
    const rlfLimiter = await new Promise<RateLimiterSQLite>((resolve, reject) => {
      const l: RateLimiterSQLite = new RateLimiterSQLite(
        { storeClient: theirs, storeType: 'better-sqlite3', tableName: 'rlf', points: LIMIT, duration: 1 },
        (error?: Error) => (error ? reject(error) : resolve(l)),
      );
    });
    const synchronous = [ours, theirs].map((d) => String(d.pragma('synchronous', { simple: true }))).join('/');
    console.log(
      `\nSQLite: better-sqlite3, WAL, synchronous=${synchronous}, ${SECONDS} s per figure, best of ${ROUNDS}\n`,
    );
    const syncRound = async (): Promise<Figures> => {
      let done = 0;
      const start = performance.now();
      const end = start + SECONDS * 1000;
      while (performance.now() < end) {
        for (let i = 0; i < 100; i++) limiter.limitSync(randomKey());
        done += 100;
      }
      const perSecond = done / ((performance.now() - start) / 1000);
      return { perSecond, ...(await latency(async (key) => limiter.limitSync(key))) };
    };
    const [fgSync, fgAsync, rlf, rlfMany] = await compare([
      syncRound,
      () => once((key) => limiter.limit(key), 1),
      () => once((key) => rlfLimiter.consume(key).catch(() => undefined), 1),
      () => once((key) => rlfLimiter.consume(key).catch(() => undefined), IN_FLIGHT),
    ]);
    if (fgSync === undefined || fgAsync === undefined || rlf === undefined || rlfMany === undefined) {
      throw new Error('a contender did not run');
    }
    line('floodgate sqlite, limitSync', fgSync);
    line('floodgate sqlite, await limit() one at a time', fgAsync);
    line('rate-limiter-flexible RateLimiterSQLite', rlf);
    line(`rate-limiter-flexible RateLimiterSQLite, ${IN_FLIGHT} in flight`, rlfMany);
    const best = Math.max(rlf.perSecond, rlfMany.perSecond);
    console.log('');
    console.log(
      `floodgate limitSync / rate-limiter-flexible (its best):      ${ratio(fgSync.perSecond, best)} (target ≥ 2×)`,
    );
    console.log(`floodgate await limit() / rate-limiter-flexible (its best):  ${ratio(fgAsync.perSecond, best)}`);
  } finally {
    ours.close();
    theirs.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const only = process.env.BENCH_ONLY;
if (only !== 'sqlite') await postgresFigures();
if (only !== 'postgres') await sqliteFigures();
