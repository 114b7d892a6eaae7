import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  encodeKey,
  fixedWindow,
  gcra,
  isFloodgateError,
  slidingLog,
  tokenBucket,
} from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { stateKey } from '../../src/stores/sql/common.js';
import { manualClock, runConformanceSuite, SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, DRIVERS, PG_CONFIG, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

const available = await requirePostgres();
const schema = uniqueSchema('pg');
const run = promisify(execFile);
const worker = fileURLToPath(new URL('./sql/postgres-worker.ts', import.meta.url));

let admin: Connection | undefined;
beforeAll(() => {
  if (available) admin = connect('pg', 2);
});
afterAll(async () => {
  await admin?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin?.close();
});

const hostileKeys = [
  "o'brien",
  'a"b',
  "'; DROP TABLE floodgate_state; --",
  "x' OR '1'='1",
  'back\\slash\\',
  '\\"',
  'semi;colon',
  '$1',
  '$$; SELECT 1; $$',
  '{a,b}',
  'NULL',
  'ключ 🔑 鍵',
  'e\u0301',
  '\ud800',
  '%{}#',
  'k'.repeat(5000),
];

for (const driver of DRIVERS) {
  describe.skipIf(!available)(`postgres store, ${driver}`, () => {
    let connection: Connection;
    let store: PostgresStore;
    const table = `conformance_${driver}`;
    beforeAll(async () => {
      connection = connect(driver);
      store = postgresStore({ client: connection.client, schema, table });
      await store.migrate();
    });
    afterAll(async () => {
      await store?.close();
      await connection?.close();
    });

    runConformanceSuite({ describe, it }, { store: () => store, randomRuns: 12, seed: driver === 'pg' ? 1 : 101 });

    it('stores keys holding quotes, semicolons, backslashes, Unicode and SQL as data', async () => {
      const policy = gcra({ limit: 3, periodMs: 60_000 });
      const prefix = uniquePrefix('hostile');
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({ store, policies: [policy], prefix, clock });
      await Promise.all(
        hostileKeys.map((key, i) => Promise.all(Array.from({ length: (i % 3) + 1 }, () => limiter.limit(key)))),
      );
      const statuses = await Promise.all(hostileKeys.map((key) => limiter.status(key)));
      expect(statuses.map((d) => d.remaining)).toEqual(hostileKeys.map((_, i) => 3 - ((i % 3) + 1)));
      const rows = await connection.sql(`SELECT key FROM "${schema}"."${table}" WHERE starts_with(key, $1)`, [prefix]);
      const expected = hostileKeys.map((key) => stateKey(prefix, encodeKey(key), compilePolicy(policy)));
      expect(rows.map((r) => r.key).sort()).toEqual([...expected].sort());
      const tables = await connection.sql('SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1', [schema]);
      expect(tables.map((t) => t.tablename)).toContain(table);
    });

    it('decides calls made together in few statements, each in arrival order', async () => {
      let statements = 0;
      const counting = postgresStore({
        client: {
          query: (text, params, name) => {
            statements++;
            return connection.client.query(text, params, name);
          },
        },
        schema,
        table,
      });
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({
        store: counting,
        clock,
        prefix: uniquePrefix('order'),
        policies: [gcra({ limit: 50, periodMs: 60_000 })],
      });
      const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.limit('hot')));
      expect(decisions.map((d) => d.allowed)).toEqual(Array.from({ length: 200 }, (_, i) => i < 50));
      expect(decisions.slice(0, 50).map((d) => d.remaining)).toEqual(Array.from({ length: 50 }, (_, i) => 49 - i));
      expect(statements).toBeLessThan(10);
      // A reset between two calls of one batch sits between them.
      const [first, , after] = await Promise.all([limiter.limit('r'), limiter.reset('r'), limiter.limit('r')]);
      expect([first?.remaining, after?.remaining]).toEqual([49, 49]);
      await counting.close();
    });

    it('uses the server clock when the limiter has none', async () => {
      const limiter = createLimiter({
        store,
        prefix: uniquePrefix('server'),
        policies: [gcra({ limit: 1, periodMs: 10_000 })],
      });
      expect(store.hasOwnClock).toBe(true);
      expect((await limiter.limit('k')).allowed).toBe(true);
      const denied = await limiter.limit('k');
      expect(denied.allowed).toBe(false);
      expect(denied.retryAfterMs).toBeGreaterThan(9000);
      expect(denied.retryAfterMs).toBeLessThanOrEqual(10_000);
    });
  });
}

describe.skipIf(!available)('postgres store', () => {
  it('decides a new key again on the row another transaction created meanwhile', async () => {
    const connection = connect('pg', 2);
    const other = new pg.Pool({ ...PG_CONFIG, max: 1 });
    const holder = await other.connect();
    try {
      const store = postgresStore({ client: connection.client, schema, table: 'race' });
      await store.migrate();
      const policy = gcra({ limit: 1, periodMs: 60_000 });
      const prefix = uniquePrefix('race');
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({ store, clock, prefix, policies: [policy] });
      const row = stateKey(prefix, encodeKey('new'), compilePolicy(policy));
      // Another transaction creates the key (one call already made) and holds it uncommitted.
      await holder.query('BEGIN');
      await holder.query(`INSERT INTO "${schema}".race (key, state, expires_at) VALUES ($1, $2::float8[], 0)`, [
        row,
        `{0,${clock.nowUs() + 60_000_000}}`,
      ]);
      const pending = limiter.limit('new');
      // The decision found no row, decided optimistically and now waits on the insert: let it through.
      let waited = false;
      for (let i = 0; i < 2000 && !waited; i++) {
        const waiting = await connection.sql(
          "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%race_decide%'",
        );
        waited = waiting.length > 0;
      }
      expect(waited).toBe(true);
      await holder.query('COMMIT');
      const decision = await pending;
      expect([decision.allowed, decision.retryAfterMs]).toEqual([false, 60_000]);
    } finally {
      holder.release();
      await other.end();
      await connection.close();
    }
  });

  it('migrate() twice is harmless and keeps state', async () => {
    const connection = connect('pg', 2);
    try {
      const store = postgresStore({ client: connection.client, schema, table: 'twice' });
      await store.migrate();
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({
        store,
        clock,
        policies: [tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 60_000 })],
      });
      await limiter.limit('k');
      await Promise.all([store.migrate(), store.migrate()]);
      expect((await limiter.limit('k')).remaining).toBe(0);
    } finally {
      await connection.close();
    }
  });

  it('creates an UNLOGGED table on request, and switches an existing one', async () => {
    const connection = connect('pg', 2);
    try {
      const persistence = async () =>
        (
          await connection.sql(
            'SELECT c.relpersistence AS p FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2',
            [schema, 'fast'],
          )
        )[0]?.p;
      await postgresStore({ client: connection.client, schema, table: 'fast', unlogged: true }).migrate();
      expect(await persistence()).toBe('u');
      await postgresStore({ client: connection.client, schema, table: 'fast' }).migrate();
      expect(await persistence()).toBe('p');
    } finally {
      await connection.close();
    }
  });

  it('refuses hostile schema and table names with a typed error naming the option', () => {
    const client = { query: () => Promise.resolve([]) };
    for (const name of ['x"; DROP TABLE users; --', 'a b', 'Users', '', 'x'.repeat(41), 'a-b', 'pg_catalog"."x', 7]) {
      for (const option of ['table', 'schema'] as const) {
        let caught: unknown;
        try {
          postgresStore({ client, [option]: name as string });
        } catch (error) {
          caught = error;
        }
        expect(isFloodgateError(caught)).toBe(true);
        expect(caught).toMatchObject({ code: 'ERR_INVALID_OPTION', option });
      }
    }
    expect(() => postgresStore({ client, concurrency: 0 })).toThrow(expect.objectContaining({ option: 'concurrency' }));
    expect(() => postgresStore({ client: {} as never })).toThrow(expect.objectContaining({ option: 'client' }));
  });

  it('asks for migrate() when the table is missing', async () => {
    const connection = connect('pg', 2);
    try {
      const store = postgresStore({ client: connection.client, schema, table: 'never_migrated' });
      const limiter = createLimiter({ store, policies: [gcra({ limit: 1, periodMs: 1000 })] });
      await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
      await expect(limiter.limit('k')).rejects.toThrow(/migrate\(\)/);
    } finally {
      await connection.close();
    }
  });

  it('deletes expired rows in small batches as new keys arrive', async () => {
    const connection = connect('pg', 2);
    try {
      const store = postgresStore({ client: connection.client, schema, table: 'prune' });
      await store.migrate();
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({
        store,
        clock,
        policies: [fixedWindow({ limit: 5, windowMs: 1000, align: 'first-request' })],
      });
      for (let i = 0; i < 40; i++) await limiter.limit(`idle-${i}`);
      const count = async () => Number((await connection.sql(`SELECT count(*) AS n FROM "${schema}".prune`))[0]?.n);
      expect(await count()).toBe(40);
      // Expired (in whole minutes, EXPIRY_GRAIN_US) for more than a minute (PRUNE_GRACE_US): due for deletion.
      clock.advance(125_000);
      // Only new rows make the table grow: each batch that creates one deletes at least 16 expired rows.
      await limiter.limit('new-1');
      expect(await count()).toBe(40 - 16 + 1);
      await limiter.limit('new-1');
      expect(await count()).toBe(25);
      await limiter.limit('new-2');
      await limiter.limit('new-3');
      expect(await count()).toBe(3);
      const plan = await connection.sql(
        `EXPLAIN SELECT x.key FROM "${schema}".prune x WHERE x.expires_at <= 0 ORDER BY x.expires_at LIMIT 16 FOR UPDATE SKIP LOCKED`,
      );
      expect(plan.map((p) => p['QUERY PLAN']).join('\n')).toMatch(/Index Scan using prune_expires_at/);
    } finally {
      await connection.close();
    }
  });

  for (const driver of DRIVERS) {
    it(`admits exactly the limit when several processes with pools hammer one key (${driver})`, async () => {
      const connection = connect('pg', 2);
      try {
        await postgresStore({ client: connection.client, schema, table: 'hot' }).migrate();
      } finally {
        await connection.close();
      }
      const key = uniquePrefix(`hot-${driver}`);
      const results = await Promise.all(
        [1, 2, 3, 4].map(() =>
          run(process.execPath, ['--import', 'tsx', worker, driver, schema, 'hot', key, '150'], { encoding: 'utf8' }),
        ),
      );
      // 600 calls on a key that admits 100 a day: exactly 100, whatever the interleaving.
      expect(results.map((r) => Number(r.stdout)).reduce((a, b) => a + b, 0)).toBe(100);
    }, 60_000);
  }

  it('keeps a sliding log exact under concurrent calls from one process', async () => {
    const connection = connect('postgres', 8);
    try {
      const store = postgresStore({ client: connection.client, schema, table: 'log', concurrency: 8 });
      await store.migrate();
      const limiter = createLimiter({
        store,
        prefix: uniquePrefix('log'),
        policies: [slidingLog({ limit: 37, windowMs: 3_600_000 })],
      });
      const keys = ['a', 'b', 'c'];
      const decisions = await Promise.all(Array.from({ length: 300 }, (_, i) => limiter.limit(keys[i % 3] as string)));
      for (const key of keys) {
        expect(decisions.filter((d, i) => keys[i % 3] === key && d.allowed)).toHaveLength(37);
      }
      await store.close();
    } finally {
      await connection.close();
    }
  });
});
