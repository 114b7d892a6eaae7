// The state one key holds, per algorithm and store, at its largest: after a client has sent fractional
// costs (so costs print with all their digits), pushed the key to its limit and into a penalty box (the
// box adds a number). Memory: the model's numbers × 8 bytes (the memory store holds them as doubles).
// Redis: the value's STRLEN and MEMORY USAGE, and the Lua time per decision (INFO commandstats, a server
// of the benchmark's own). PostgreSQL: pg_column_size of the state (a float8[]).
//
//   npm run build && node --import tsx packages/floodgate/bench/state-size.ts
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from 'floodgate';
import { fromPg, postgresStore } from 'floodgate/postgres';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { manualClock } from 'floodgate/testing';
import { Redis } from 'ioredis';
import pg from 'pg';
import { HOST, startRedisServer } from './redis-server.js';

const MINUTE = 60_000;
const block = { blockMs: MINUTE };
const POLICIES: [string, Policy][] = [
  ['GCRA', gcra({ limit: 10, periodMs: MINUTE, ...block, name: 'p' })],
  [
    'token bucket, continuous',
    tokenBucket({ capacity: 10, refillAmount: 10, refillIntervalMs: MINUTE, ...block, name: 'p' }),
  ],
  [
    'token bucket, interval',
    tokenBucket({ capacity: 10, refillAmount: 10, refillIntervalMs: MINUTE, refill: 'interval', ...block, name: 'p' }),
  ],
  ['leaky bucket, queue', leakyBucket({ capacity: 10, leakPerSecond: 1 / 6, mode: 'queue', ...block, name: 'p' })],
  ['fixed window', fixedWindow({ limit: 10, windowMs: MINUTE, ...block, name: 'p' })],
  ['sliding window', slidingWindow({ limit: 10, windowMs: MINUTE, ...block, name: 'p' })],
  [
    'bucketed window, 10 buckets',
    slidingWindow({ limit: 10, windowMs: MINUTE, precisionMs: MINUTE / 10, ...block, name: 'p' }),
  ],
  // One call a ms reaches the limit after 1000 calls: a count in every one of the 1000 buckets.
  [
    'bucketed window, 1000 buckets (limit 130, 1 s)',
    slidingWindow({ limit: 130, windowMs: 1000, precisionMs: 1, ...block, name: 'p' }),
  ],
  ['sliding log, limit 10', slidingLog({ limit: 10, windowMs: MINUTE, countDenied: true, ...block, name: 'p' })],
  ['sliding log, limit 1000', slidingLog({ limit: 1000, windowMs: MINUTE, countDenied: true, ...block, name: 'p' })],
];
const DECISIONS = 500;

/** Fractional costs, one every ms, until the key is blocked (at its limit and in the penalty box). */
async function drive(limiter: ReturnType<typeof createLimiter>, clock: ReturnType<typeof manualClock>): Promise<void> {
  for (let i = 0; i < 20_000; i++) {
    clock.advance(1);
    const decision = await limiter.limit('k', { cost: 0.1 + (i % 7) * 0.0123456789 });
    if (decision.reason === 'blocked') break;
  }
}

const server = await startRedisServer(6500, 6600);
const redis = new Redis({ host: HOST, port: server.port });
const pool = new pg.Pool({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test', max: 2 });
const schema = `bench_state_${process.pid}`;
try {
  console.log(
    '| algorithm | numbers | memory, bytes | Redis STRLEN | Redis MEMORY USAGE | Redis Lua µs/decision | PostgreSQL pg_column_size |',
  );
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const [label, policy] of POLICIES) {
    const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const limiter = createLimiter({ store: redisStore({ client: fromIoredis(redis) }), clock, policies: [policy] });
    await drive(limiter, clock);
    const [key] = await redis.keys('*');
    const value = (await redis.get(key as string)) as string;
    const usage = await redis.call('MEMORY', 'USAGE', key as string);
    // `<tag>[!<blockedUntil> ]<field> …`: the tag is a letter (none for the meter); without `!` the
    // penalty slot is an implicit 0.
    const body = /^[a-z]/.test(value) ? value.slice(1) : value;
    const words = body.replace(/^!/, '').split(' ').length;
    const numbers = body.startsWith('!') ? words : words + 1;
    // Decisions on the blocked key, then on a key at its limit after the block (denied, logged under countDenied).
    await redis.config('RESETSTAT');
    for (let i = 0; i < DECISIONS; i++) {
      clock.advance(1);
      await limiter.limit('k', { cost: 0.5 });
    }
    const lua = /cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(await redis.info('commandstats'))?.[1];
    await redis.flushall();

    const pgClock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const store = postgresStore({ client: fromPg(pool), schema, table: 'state', unlogged: true });
    await store.migrate();
    const pgLimiter = createLimiter({ store, clock: pgClock, policies: [policy] });
    await drive(pgLimiter, pgClock);
    const { rows } = await pool.query(`SELECT pg_column_size(state) AS bytes FROM ${schema}.state`);
    await pool.query(`TRUNCATE ${schema}.state`);
    console.log(
      `| ${label} | ${numbers} | ${numbers * 8} | ${value.length} | ${String(usage)} | ${lua} | ${(rows[0] as { bytes: number }).bytes} |`,
    );
  }
} finally {
  redis.disconnect();
  await server.stop();
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await pool.end();
}
