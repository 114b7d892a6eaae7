// The tiny-cost attack, full size, on every store: a client sends costs outside the cost domain
// (5e-324 first, then the other refused costs) on its own key, then another client makes 20 calls on a
// different key under a limit of 3 per minute. A limiter with `failure: 'open'` must still admit exactly
// 3 of those 20, with its breaker closed and no store error reported.
//
//   node --import tsx packages/floodgate/bench/hostile-cost.ts [path to a floodgate dist folder]
//
// The argument picks the build to attack (default: this checkout's `packages/floodgate/dist`), so the
// same script measures another checkout's build ("before") and this one ("after"). Needs Redis on
// 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (database `test`, user postgres); it works in a schema
// and a key prefix of its own and removes them. ATTACK_CALLS sets the attacker's calls (default 1000).
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import postgres from 'postgres';

const dist = resolve(process.argv[2] ?? new URL('../dist', import.meta.url).pathname);
const load = (path: string) => import(pathToFileURL(`${dist}/${path}`).href);
const floodgate = await load('index.js');
const { fromPg, fromPostgres, postgresStore } = await load('stores/postgres/index.js');
const { fromIoredis, redisStore } = await load('stores/redis/index.js');
const { sqliteStore } = await load('stores/sqlite/index.js');

const ATTACK_CALLS = Number(process.env.ATTACK_CALLS ?? 1000);
const COSTS: unknown[] = [5e-324, 4.9e-322, 2.2250738585072014e-308, 1e-10, 2 ** 53, Number.NaN, -1];
const PG_CONFIG = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' } as const;
const schema = `fg_hostile_cost_${process.pid}`;

const redis = new Redis({ host: '127.0.0.1', port: 6379 });
const pool = new pg.Pool({ ...PG_CONFIG, max: 4 });
const sql = postgres({ ...PG_CONFIG, max: 4, onnotice: () => {}, fetch_types: false });
const sqlite = sqliteStore({ database: new Database(':memory:') });
sqlite.migrate();
const stores: [string, () => Promise<unknown>][] = [
  ['memory', async () => floodgate.memoryStore()],
  ['sqlite', async () => sqlite],
  ['redis', async () => redisStore({ client: fromIoredis(redis) })],
  [
    'postgres (pg)',
    async () => {
      const store = postgresStore({ client: fromPg(pool), schema, table: 'a' });
      await store.migrate();
      return store;
    },
  ],
  [
    'postgres (Postgres.js)',
    async () => {
      const store = postgresStore({ client: fromPostgres(sql), schema, table: 'b' });
      await store.migrate();
      return store;
    },
  ],
];

console.log(`attacking ${dist} with ${ATTACK_CALLS} calls of refused costs (5e-324 first), failure 'open'`);
console.log(
  '| store | attacker calls answered | attacker calls thrown (codes) | storeError events | breaker after | victim admitted of 20 (limit 3) |',
);
console.log('| --- | ---: | --- | ---: | --- | ---: |');
for (const [name, make] of stores) {
  const store = await make();
  const prefix = `hostile-cost-${process.pid}-${name.replace(/\W+/g, '-')}`;
  const policies = [
    floodgate.gcra({ limit: 3, periodMs: 60_000 }),
    floodgate.leakyBucket({ capacity: 3, leakPerSecond: 0.05 }),
  ];
  const limiter = floodgate.createLimiter({ store, policies, prefix, failure: 'open' });
  let storeErrors = 0;
  limiter.on('storeError', () => storeErrors++);
  let answered = 0;
  const codes = new Map<string, number>();
  for (let i = 0; i < ATTACK_CALLS; i++) {
    const cost = COSTS[i < ATTACK_CALLS / 2 ? 0 : i % COSTS.length];
    try {
      await limiter.limit('attacker', { cost });
      answered++;
    } catch (error) {
      const code = String((error as { code?: unknown }).code);
      codes.set(code, (codes.get(code) ?? 0) + 1);
    }
  }
  const breaker = limiter.breakerState;
  let admitted = 0;
  for (let i = 0; i < 20; i++) if ((await limiter.limit('victim')).allowed) admitted++;
  const thrown = [...codes].map(([code, n]) => `${code} × ${n}`).join(', ') || 'none';
  console.log(`| ${name} | ${answered} | ${thrown} | ${storeErrors} | ${breaker} | ${admitted} |`);
  await limiter.reset('victim');
  await limiter.reset('attacker');
}
await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
await pool.end();
await sql.end();
redis.disconnect();
