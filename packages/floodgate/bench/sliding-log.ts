// A sliding log under a flood of tiny costs: `slidingLog({ limit: 5, windowMs: 3_600_000 })`, N calls of cost
// 1e-7, one every millisecond (all inside the hour), on one key. Reports, per store, the time of the whole
// run and of one decision at the end, the calls admitted, and what the key holds afterwards (entries, and
// bytes: the Redis value's STRLEN and MEMORY USAGE, PostgreSQL's pg_column_size of the state).
//
//   npm run build && node --import tsx packages/floodgate/bench/sliding-log.ts
//
// Redis runs on a server of the benchmark's own (a spare port), so `INFO commandstats` counts only these
// calls: its EVALSHA figures are the Lua time, during which Redis serves nobody else. PostgreSQL is the
// server at 127.0.0.1:5432 (database `test`), in a schema of its own that is dropped at the end.
//
// Then, for each size L of BENCH_SIZES (default 1,100,300,1000,3000), the work of one decision on a full log:
// `slidingLog({ limit: L, windowMs: 3_600_000, countDenied: true })` filled with L events of cost 1, then
// calls that are denied and logged (the most a decision does: read, sum, log the attempt, trim, coalesce,
// write back L + 1 entries). Redis: µs of Lua per EVALSHA; PostgreSQL and memory: wall time per call.
//
// Environment: BENCH_CALLS (memory and SQLite, default 20000), BENCH_REDIS_CALLS (default 5000),
// BENCH_PG_CALLS (default 5000), BENCH_COUNT_DENIED=1 (log denied attempts too), BENCH_STORES
// (memory,sqlite,redis,postgres).
import Database from 'better-sqlite3';
import { createLimiter, type Limiter, memoryStore, slidingLog } from 'floodgate';
import { fromPg, postgresStore } from 'floodgate/postgres';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { sqliteStore } from 'floodgate/sqlite';
import { manualClock } from 'floodgate/testing';
import { Redis } from 'ioredis';
import pg from 'pg';
import { HOST, startRedisServer } from './redis-server.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 20_000);
const REDIS_CALLS = Number(process.env.BENCH_REDIS_CALLS ?? 5000);
const PG_CALLS = Number(process.env.BENCH_PG_CALLS ?? 5000);
const COUNT_DENIED = process.env.BENCH_COUNT_DENIED === '1';
const STORES = (process.env.BENCH_STORES ?? 'memory,sqlite,redis,postgres').split(',');
const COST = 1e-7;
const policy = slidingLog({ limit: 5, windowMs: 3_600_000, countDenied: COUNT_DENIED, name: 'log' });

interface Run {
  admitted: number;
  totalMs: number;
  lastMs: number;
}

/** N calls of the tiny cost, one per ms of the manual clock; the last call timed on its own. */
async function flood(limiter: Limiter, clock: ReturnType<typeof manualClock>, calls: number): Promise<Run> {
  let admitted = 0;
  const started = performance.now();
  let lastMs = 0;
  for (let i = 0; i < calls; i++) {
    clock.advance(1);
    const t = performance.now();
    if ((await limiter.limit('victim', { cost: COST })).allowed) admitted++;
    lastMs = performance.now() - t;
  }
  return { admitted, totalMs: performance.now() - started, lastMs };
}

function line(store: string, calls: number, run: Run, held: string): void {
  console.log(
    `${store.padEnd(10)} ${String(calls).padStart(6)} calls: ${run.admitted} admitted, ${run.totalMs.toFixed(0)} ms in all, last decision ${run.lastMs.toFixed(3)} ms; ${held}`,
  );
}

async function main(): Promise<void> {
  console.log(
    `slidingLog({ limit: 5, windowMs: 3_600_000${COUNT_DENIED ? ', countDenied: true' : ''} }), cost ${COST}`,
  );
  if (STORES.includes('memory')) {
    const clock = manualClock();
    const limiter = createLimiter({ store: memoryStore(), clock, policies: [policy] });
    line('memory', CALLS, await flood(limiter, clock, CALLS), '');
  }
  if (STORES.includes('sqlite')) {
    const database = new Database(':memory:');
    const store = sqliteStore({ database });
    store.migrate();
    const clock = manualClock();
    const limiter = createLimiter({ store, clock, policies: [policy] });
    const run = await flood(limiter, clock, CALLS);
    const row = database.prepare('SELECT length(state) AS bytes, state FROM floodgate_state').get() as {
      bytes: number;
      state: unknown;
    };
    line('sqlite', CALLS, run, `state ${row.bytes} bytes`);
    database.close();
  }
  if (STORES.includes('redis')) {
    const server = await startRedisServer(6500, 6600);
    const client = new Redis({ host: HOST, port: server.port });
    try {
      const clock = manualClock();
      const limiter = createLimiter({ store: redisStore({ client: fromIoredis(client) }), clock, policies: [policy] });
      await limiter.limit('warm-up', { cost: 0 });
      await client.config('RESETSTAT');
      const run = await flood(limiter, clock, REDIS_CALLS);
      const stats = await client.info('commandstats');
      const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
      const [key] = await client.keys('*victim*');
      const value = (await client.get(key as string)) as string;
      const usage = await client.call('MEMORY', 'USAGE', key as string);
      const entries = value.trim().split(/\s+/).length / 2;
      line(
        'redis',
        REDIS_CALLS,
        run,
        `Lua ${evalsha ? `${(Number(evalsha[2]) / 1e6).toFixed(2)} s over ${evalsha[1]} EVALSHA, ${evalsha[3]} µs each` : '?'}; value ${value.length} bytes (STRLEN), MEMORY USAGE ${String(usage)}, ${entries} entries`,
      );
    } finally {
      client.disconnect();
      await server.stop();
    }
  }
  if (STORES.includes('postgres')) {
    const pool = new pg.Pool({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test', max: 2 });
    const schema = `bench_log_${process.pid}`;
    try {
      const store = postgresStore({ client: fromPg(pool), schema, table: 'log', unlogged: true });
      await store.migrate();
      const clock = manualClock();
      const limiter = createLimiter({ store, clock, policies: [policy] });
      const run = await flood(limiter, clock, PG_CALLS);
      const { rows } = await pool.query(
        `SELECT pg_column_size(state) AS bytes, array_length(state, 1) AS n FROM ${schema}.log WHERE key LIKE '%victim%'`,
      );
      const row = rows[0] as { bytes: number; n: number };
      line('postgres', PG_CALLS, run, `state ${row.bytes} bytes (pg_column_size), ${(row.n - 1) / 2} entries`);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pool.end();
    }
  }
}

const SIZES = (process.env.BENCH_SIZES ?? '1,100,300,1000,3000').split(',').map(Number);
const FULL_CALLS = 200;

/** Fills a log of limit `size` with `size` events of cost 1, then times FULL_CALLS denied, logged calls. */
async function fullLog(limiter: Limiter, clock: ReturnType<typeof manualClock>, size: number): Promise<number> {
  for (let i = 0; i < size; i++) {
    clock.advance(1);
    await limiter.limit('full');
  }
  const started = performance.now();
  for (let i = 0; i < FULL_CALLS; i++) {
    clock.advance(1);
    if ((await limiter.limit('full')).allowed) throw new Error('the full log admitted a call');
  }
  return ((performance.now() - started) * 1000) / FULL_CALLS;
}

async function fullLogs(): Promise<void> {
  console.log(`\nfull logs, countDenied, ${FULL_CALLS} denied calls each (µs per decision)`);
  const full = (size: number) => slidingLog({ limit: size, windowMs: 3_600_000, countDenied: true, name: 'full' });
  const server = STORES.includes('redis') ? await startRedisServer(6500, 6600) : undefined;
  const client = server && new Redis({ host: HOST, port: server.port });
  const pool = STORES.includes('postgres')
    ? new pg.Pool({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test', max: 2 })
    : undefined;
  const schema = `bench_full_${process.pid}`;
  try {
    for (const size of SIZES) {
      const parts = [`limit ${String(size).padStart(5)}:`];
      if (STORES.includes('memory')) {
        const clock = manualClock();
        const limiter = createLimiter({ store: memoryStore(), clock, policies: [full(size)] });
        parts.push(`memory ${(await fullLog(limiter, clock, size)).toFixed(1)}`);
      }
      if (client) {
        const clock = manualClock();
        const limiter = createLimiter({
          store: redisStore({ client: fromIoredis(client) }),
          clock,
          policies: [full(size)],
        });
        await fullLog(limiter, clock, size);
        await client.config('RESETSTAT');
        const timed = await fullLog(limiter, clock, 0);
        const stats = await client.info('commandstats');
        const lua = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats)?.[3];
        const [key] = await client.keys('*full*');
        const bytes = await client.strlen(key as string);
        parts.push(`redis Lua ${lua} (call ${timed.toFixed(0)}), value ${bytes} bytes`);
        await client.flushall();
      }
      if (pool) {
        const clock = manualClock();
        const store = postgresStore({ client: fromPg(pool), schema, table: `full_${size}`, unlogged: true });
        await store.migrate();
        const limiter = createLimiter({ store, clock, policies: [full(size)] });
        const timed = await fullLog(limiter, clock, size);
        const { rows } = await pool.query(
          `SELECT pg_column_size(state) AS bytes FROM ${schema}.full_${size} WHERE key LIKE '%full%'`,
        );
        parts.push(`postgres call ${timed.toFixed(0)}, state ${(rows[0] as { bytes: number }).bytes} bytes`);
      }
      console.log(parts.join('; '));
    }
  } finally {
    client?.disconnect();
    await server?.stop();
    if (pool) {
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pool.end();
    }
  }
}

if (process.env.BENCH_SKIP_FLOOD !== '1') await main();
await fullLogs();
