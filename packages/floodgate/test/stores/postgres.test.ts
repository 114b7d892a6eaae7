import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  isFloodgateError,
  leasedLimiter,
  slidingLog,
  tokenBucket,
} from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { encodeKey } from '../../src/stores/index.js';
import { fromPg, type PostgresClient, type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { stateKey } from '../../src/stores/sql/common.js';
import {
  manualClock,
  runConformanceSuite,
  runFastPathSuite,
  runPlainDataSuite,
  SCENARIO_START_MS,
  uniquePrefix,
} from '../../src/testing/index.js';
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
    runPlainDataSuite({ describe, it }, { store: () => store });

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

    it('keys stay data one call at a time too (the meter statements: insert, update, read)', async () => {
      const policy = gcra({ limit: 3, periodMs: 60_000 });
      const prefix = uniquePrefix('hostile-alone');
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({ store, policies: [policy], prefix, clock });
      for (const key of hostileKeys) {
        expect((await limiter.limit(key)).remaining).toBe(2);
        expect((await limiter.limit(key)).remaining).toBe(1);
        expect((await limiter.status(key)).remaining).toBe(1);
        expect((await limiter.check(key)).allowed).toBe(true);
      }
      const rows = await connection.sql(`SELECT key FROM "${schema}"."${table}" WHERE starts_with(key, $1)`, [prefix]);
      const expected = hostileKeys.map((key) => stateKey(prefix, encodeKey(key), compilePolicy(policy)));
      expect(rows.map((r) => r.key).sort()).toEqual([...expected].sort());
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

describe.skipIf(!available)('postgres store, pg, every call through the decide function (fastPath: false)', () => {
  let connection: Connection;
  let store: PostgresStore;
  beforeAll(async () => {
    connection = connect('pg');
    store = postgresStore({ client: connection.client, schema, table: 'conformance_function', fastPath: false });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await connection?.close();
  });

  runConformanceSuite({ describe, it }, { store: () => store, randomRuns: 8, seed: 500 });
});

describe.skipIf(!available)('postgres store: every path decides as the model', () => {
  // A lone call under one meter or one fixed window takes that kind's plain statements; every other call,
  // and every call with fastPath: false, the decide function.
  let connection: Connection;
  let statement: PostgresStore;
  let decideFunction: PostgresStore;
  /** The statements the first store ran, by the name they are prepared under (either clock's alike). */
  const ran: Record<string, number> = {};
  beforeAll(async () => {
    connection = connect('pg', 2);
    const client: PostgresClient = {
      query(text, params, name) {
        // The statement and its form (a penalty box, denied calls counted): `window0_box_counted`.
        const match = /_(meter|meter_read|window[01]|window_read[01]|decide)((?:_box)?(?:_counted)?)(?:_at)?$/.exec(
          name ?? '',
        );
        if (match !== null) ran[`${match[1]}${match[2]}`] = (ran[`${match[1]}${match[2]}`] ?? 0) + 1;
        return connection.client.query(text, params, name);
      },
    };
    statement = postgresStore({ client, schema, table: 'paths_statement' });
    decideFunction = postgresStore({ client: connection.client, schema, table: 'paths_function', fastPath: false });
    await statement.migrate();
    await decideFunction.migrate();
  });
  afterAll(async () => {
    await statement?.close();
    await decideFunction?.close();
    await connection?.close();
  });

  runFastPathSuite(
    { describe, it },
    {
      variants: [
        {
          name: 'meter and fixed-window statements',
          store: () => statement,
          calls: ['bare'],
          methods: ['promise'],
        },
        { name: 'decide function', store: () => decideFunction, calls: ['bare', 'options'], methods: ['promise'] },
      ],
      randomOperations: 120,
    },
  );

  it('the tables and the randomized comparison reached every single-policy statement', () => {
    // Runs after the suite above (vitest runs a file's tests in order): each statement decided many calls,
    // both alignments of the fixed window included, so a change to any of them fails a test above.
    // (Every form of the write statements, both alignments, is also sent many times by the random
    // comparison of postgres-window.test.ts and postgres-meter.test.ts.)
    for (const what of ['meter', 'meter_box', 'meter_read', 'window0', 'window_read0', 'window_read1']) {
      expect(ran[what] ?? 0, what).toBeGreaterThan(20);
    }
    for (const what of ['window0_counted', 'window1_box', 'window1_box_counted']) {
      expect(ran[what] ?? 0, what).toBeGreaterThan(20);
    }
  });
});

describe.skipIf(!available)('postgres store', () => {
  for (const fastPath of [true, false]) {
    it(`decides a new key again on the row another transaction created meanwhile (${fastPath ? 'meter statement' : 'decide function'})`, async () => {
      const connection = connect('pg', 2);
      const other = new pg.Pool({ ...PG_CONFIG, max: 1 });
      const holder = await other.connect();
      try {
        const store = postgresStore({ client: connection.client, schema, table: 'race', fastPath });
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
        // The decision found no row, went on to insert it and now waits on the other insert: let it through.
        let waited = false;
        for (let i = 0; i < 2000 && !waited; i++) {
          const waiting = await connection.sql(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
            [`%${schema}"."race%`],
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
  }

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

  for (const [path, policy] of [
    ['the decide function', fixedWindow({ limit: 5, windowMs: 1000, align: 'first-request' })],
    ['the meter statement', gcra({ limit: 5, periodMs: 1000 })],
  ] as const) {
    it(`deletes expired rows in small batches as new keys arrive (${path})`, async () => {
      const connection = connect('pg', 2);
      const table = `prune_${path.endsWith('function') ? 'function' : 'meter'}`;
      try {
        const store = postgresStore({ client: connection.client, schema, table });
        await store.migrate();
        // Behind the server's clock: rows are pruned once expired on the earlier of the two clocks.
        const clock = manualClock({ startMs: Date.now() - 86_400_000 });
        const limiter = createLimiter({ store, clock, policies: [policy] });
        for (let i = 0; i < 40; i++) await limiter.limit(`idle-${i}`);
        const count = async () =>
          Number((await connection.sql(`SELECT count(*) AS n FROM "${schema}"."${table}"`))[0]?.n);
        expect(await count()).toBe(40);
        // Expired (in whole minutes, EXPIRY_GRAIN_US) for more than a minute (PRUNE_GRACE_US): due for deletion.
        clock.advance(125_000);
        // Only new rows make the table grow: each call that creates one deletes at least 16 expired rows.
        await limiter.limit('new-1');
        expect(await count()).toBe(40 - 16 + 1);
        await limiter.limit('new-1');
        expect(await count()).toBe(25);
        await limiter.limit('new-2');
        await limiter.limit('new-3');
        expect(await count()).toBe(3);
        const plan = await connection.sql(
          `EXPLAIN SELECT x.key FROM "${schema}"."${table}" x WHERE x.expires_at <= 0 ORDER BY x.expires_at LIMIT 16 FOR UPDATE SKIP LOCKED`,
        );
        expect(plan.map((p) => p['QUERY PLAN']).join('\n')).toMatch(
          new RegExp(`Index Scan using ${table}__fg_expires_at`),
        );
      } finally {
        await connection.close();
      }
    });
  }

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

  it('prunes through the expiry index: the bound is compared as a bigint, never a table scan', async () => {
    const setup = connect('pg', 1);
    const session = new pg.Client(PG_CONFIG);
    await session.connect();
    try {
      const store = postgresStore({ client: fromPg(session), schema, table: 'prune_plan' });
      await store.migrate();
      // Many live rows, none expired: a prune must not look at them.
      await setup.sql(
        `INSERT INTO "${schema}".prune_plan (key, state, expires_at)
         SELECT 'live-' || i, '{0,1}', 9000000000000000 FROM generate_series(1, 5000) AS i`,
      );
      await setup.sql(`ANALYZE "${schema}".prune_plan`);
      // The plans of the statements the decide function runs, as notices to this session.
      const plans: string[] = [];
      session.on('notice', (notice) => plans.push(String(notice.message)));
      await session.query("LOAD 'auto_explain'");
      await session.query(
        'SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice; SET client_min_messages = notice',
      );
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 1, periodMs: 1000 })] });
      for (let i = 0; i < 8; i++) await limiter.limit(`new-${i}`); // each creates a row, so each prunes
      const prunes = plans.filter((plan) => plan.includes('SKIP LOCKED'));
      expect(prunes.length).toBeGreaterThanOrEqual(8);
      for (const plan of prunes) {
        expect(plan).toMatch(/Index Cond: \(expires_at <= /);
        expect(plan).not.toMatch(/double precision/);
      }
    } finally {
      await session.end();
      await setup.close();
    }
  });

  it('a table may be named like the objects another table gets (x and x_state, x_pkey, x_expires_at)', async () => {
    const connection = connect('pg', 2);
    const names = uniqueSchema('names');
    try {
      const orders = [
        ['x', 'x_state', 'x_pkey', 'x_expires_at'],
        ['y_state', 'y_expires_at', 'y_pkey', 'y'],
        ['floodgate_state', 'floodgate'],
      ];
      for (const order of orders) {
        for (const table of order) await postgresStore({ client: connection.client, schema: names, table }).migrate();
        for (const table of order) {
          const store = postgresStore({ client: connection.client, schema: names, table });
          await store.migrate();
          const limiter = createLimiter({ store, policies: [slidingLog({ limit: 2, windowMs: 60_000 })] });
          expect((await limiter.limit('k')).remaining).toBe(1);
          const rows = await connection.sql(`SELECT count(*)::int AS n FROM "${names}"."${table}"`);
          expect(rows[0]?.n).toBe(1);
        }
      }
      // Tables never take the names the objects beside them get.
      expect(() => postgresStore({ client: connection.client, table: 'x__fg_state' })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'table' }),
      );
    } finally {
      await connection.sql(`DROP SCHEMA IF EXISTS "${names}" CASCADE`);
      await connection.close();
    }
  });

  it('migrates a table made by an earlier version: the old <table>_state type goes, the index and primary key are renamed, not rebuilt', async () => {
    const connection = connect('pg', 2);
    try {
      await connection.sql(
        `CREATE TABLE "${schema}".legacy (key text COLLATE "C" PRIMARY KEY, state float8[], expires_at bigint NOT NULL)`,
      );
      await connection.sql(`CREATE TYPE "${schema}".legacy_state AS (s float8[])`);
      await connection.sql(`CREATE INDEX legacy_expires_at ON "${schema}".legacy (expires_at)`);
      const oids = async () =>
        (
          await connection.sql(
            `SELECT c.relname AS name, c.oid::int8::text AS oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname LIKE 'legacy%' AND c.relkind = 'i' ORDER BY c.oid`,
            [schema],
          )
        ).map((o) => [String(o.name), String(o.oid)]);
      const before = await oids();
      expect(before.map(([name]) => name).sort()).toEqual(['legacy_expires_at', 'legacy_pkey']);
      const store = postgresStore({ client: connection.client, schema, table: 'legacy' });
      await store.migrate();
      const objects = await connection.sql(
        `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname LIKE 'legacy%' ORDER BY 1`,
        [schema],
      );
      expect(objects.map((o) => o.name)).toEqual([
        'legacy',
        'legacy__fg_expires_at',
        'legacy__fg_pkey',
        'legacy__fg_state',
      ]);
      // The same indexes (same oids), under their new names.
      const renamed = (name: string) => name.replace('legacy_', 'legacy__fg_');
      expect(await oids()).toEqual(before.map(([name, oid]) => [renamed(name as string), oid]));
      const constraints = await connection.sql(
        `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`,
        [`"${schema}".legacy`],
      );
      expect(constraints.map((c) => c.conname)).toEqual(['legacy__fg_pkey']);
      const limiter = createLimiter({ store, policies: [gcra({ limit: 2, periodMs: 60_000 })] });
      expect((await limiter.limit('k')).remaining).toBe(1);
      // Idempotent: a second migrate changes nothing and keeps the state.
      const after = await oids();
      await store.migrate();
      expect(await oids()).toEqual(after);
      expect((await limiter.limit('k')).remaining).toBe(0);
      await postgresStore({ client: connection.client, schema, table: 'legacy_state' }).migrate();
    } finally {
      await connection.close();
    }
  });

  it('results keep every digit whatever the session’s extra_float_digits (cancel and refund on server time)', async () => {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 2, options: '-c extra_float_digits=0' });
    try {
      expect((await pool.query('SHOW extra_float_digits')).rows[0]?.extra_float_digits).toBe('0');
      const store = postgresStore({ client: fromPg(pool), schema, table: 'digits' });
      await store.migrate();
      const prefix = uniquePrefix('digits');
      const limiter = createLimiter({ store, policies: [gcra({ limit: 1, periodMs: 1000 })], prefix });
      const cancelled: boolean[] = [];
      for (let i = 0; i < 10; i++) {
        await limiter.limit(`k${i}`);
        const booked = await limiter.limit(`k${i}`, { maxDelayMs: 5000 });
        expect(booked.allowed).toBe(true);
        cancelled.push(await limiter.cancel(`k${i}`, booked));
      }
      expect(cancelled).toEqual(Array(10).fill(true));
      // A sliding log gives a lease back by its exact time.
      const logs = createLimiter({ store, policies: [slidingLog({ limit: 10, windowMs: 3_600_000 })], prefix });
      for (let i = 0; i < 5; i++) {
        const lease = leasedLimiter(logs, { size: 5, ttlMs: 60_000 });
        expect((await lease.limit(`log${i}`)).allowed).toBe(true);
        await lease.close();
        expect((await logs.status(`log${i}`)).remaining).toBe(9);
      }
    } finally {
      await pool.end();
    }
  });

  it('prepared statement names stay unique for long schema and table names', async () => {
    const long = `${uniqueSchema('stmt')}_${'x'.repeat(40)}`.slice(0, 40);
    const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
    try {
      const client = fromPg(pool);
      const tables = ['floodgate_state_a', 'floodgate_state_b'];
      for (const table of tables) {
        const store = postgresStore({ client, schema: long, table });
        await store.migrate();
        const limiter = createLimiter({ store, policies: [gcra({ limit: 2, periodMs: 60_000 })] });
        await limiter.limit('k');
        await limiter.limit('k');
        const booked = await limiter.limit('k', { maxDelayMs: 60_000 });
        expect(booked.allowed).toBe(true);
        expect(await limiter.cancel('k', booked)).toBe(true);
        const lease = leasedLimiter(limiter, { size: 2, ttlMs: 60_000 });
        expect((await lease.limit('leased')).allowed).toBe(true);
        await lease.close();
      }
      // Both ran on the one connection of the pool, each under its own name.
      const prepared = await pool.query('SELECT name FROM pg_prepared_statements ORDER BY name');
      const names = prepared.rows.map((r) => String(r.name));
      expect(names.length).toBeGreaterThanOrEqual(6);
      expect(new Set(names).size).toBe(names.length);
      for (const name of names) expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${long}" CASCADE`);
      await pool.end();
    }
  });

  it('close() twice: both calls get one promise, resolved once the statements in flight are done', async () => {
    const connection = connect('pg', 2);
    try {
      const store = postgresStore({ client: connection.client, schema, table: 'closing' });
      await store.migrate();
      const limiter = createLimiter({ store, policies: [gcra({ limit: 1, periodMs: 1000 })] });
      const inFlight = limiter.limit('k');
      const first = store.close();
      const second = store.close();
      expect(second).toBe(first);
      const timeout = new Promise((resolve) => setTimeout(() => resolve('pending'), 2000));
      expect(await Promise.race([Promise.all([first, second]).then(() => 'resolved'), timeout])).toBe('resolved');
      expect((await inFlight).allowed).toBe(true);
    } finally {
      await connection.close();
    }
  });

  describe('cancel and refund order', () => {
    const table = 'side';
    beforeAll(async () => {
      if (admin !== undefined) {
        const connection = connect('pg', 1);
        await postgresStore({ client: connection.client, schema, table }).migrate();
        await connection.close();
      }
    });

    /** A client that records what it sends and, once armed, holds the next statement until released. */
    function holdingClient(connection: Connection) {
      const control = {
        sent: [] as string[],
        armed: false,
        release: () => {},
        throwOnCancel: false,
      };
      let gate = Promise.resolve();
      const client: PostgresClient = {
        query(text, params, name) {
          const what = /_cancel_v\w+"\(/.test(text) ? 'cancel' : /_refund_v\w+"\(/.test(text) ? 'refund' : 'decide';
          control.sent.push(what);
          if (what === 'cancel' && control.throwOnCancel) throw new Error('driver bug');
          if (control.armed) {
            control.armed = false;
            gate = new Promise<void>((resolve) => {
              control.release = resolve;
            });
            const held = gate;
            return held.then(() => connection.client.query(text, params, name));
          }
          return connection.client.query(text, params, name);
        },
      };
      return { client, control };
    }

    const tick = () => new Promise((resolve) => setTimeout(resolve, 20));

    it.skipIf(!available)('a cancel never overtakes a call made before it on its key', async () => {
      const connection = connect('pg', 2);
      try {
        const { client, control } = holdingClient(connection);
        const store = postgresStore({ client, schema, table });
        const clock = manualClock({ startMs: SCENARIO_START_MS });
        const limiter = createLimiter({
          store,
          clock,
          prefix: uniquePrefix('same'),
          policies: [gcra({ limit: 1, periodMs: 1000 })],
        });
        await limiter.limit('k');
        const booked = await limiter.limit('k', { maxDelayMs: 5000 });
        expect(booked.allowed).toBe(true);
        control.armed = true;
        control.sent.length = 0;
        const later = limiter.limit('k', { maxDelayMs: 5000 }); // books after the reservation, held
        await tick();
        const cancel = limiter.cancel('k', booked);
        const after = limiter.limit('k', { maxDelayMs: 5000 }); // made after the cancel: waits for it
        await tick();
        expect(control.sent).toEqual(['decide']);
        control.release();
        expect((await later).allowed).toBe(true);
        // In arrival order the later booking moved the TAT, so the reservation is no longer the last one.
        expect(await cancel).toBe(false);
        expect((await after).allowed).toBe(true);
        expect(control.sent).toEqual(['decide', 'cancel', 'decide']);
        await store.close();
      } finally {
        await connection.close();
      }
    });

    it.skipIf(!available)(
      'a cancel or a refund waits for no other key, and later calls on its key wait for it',
      async () => {
        const connection = connect('pg', 2);
        try {
          const { client, control } = holdingClient(connection);
          const store = postgresStore({ client, schema, table }); // one lane: every key shares it
          const clock = manualClock({ startMs: SCENARIO_START_MS });
          const limiter = createLimiter({
            store,
            clock,
            prefix: uniquePrefix('other'),
            policies: [gcra({ limit: 1, periodMs: 1000 })],
          });
          await limiter.limit('k');
          const booked = await limiter.limit('k', { maxDelayMs: 5000 });
          const leases = createLimiter({
            store,
            clock,
            prefix: uniquePrefix('lease'),
            policies: [gcra({ limit: 10, periodMs: 10_000 })],
          });
          const lease = leasedLimiter(leases, { size: 3, ttlMs: 60_000 });
          expect((await lease.limit('leased')).allowed).toBe(true);
          control.sent.length = 0;
          const busy = limiter.limit('other'); // held: the lane has a statement in flight
          control.armed = true;
          await tick();
          control.armed = false;
          const cancel = limiter.cancel('k', booked);
          const refund = lease.close();
          const after = limiter.limit('k', { maxDelayMs: 5000 }); // made after the cancel: waits for it
          expect(await cancel).toBe(true);
          await refund;
          expect(control.sent).toEqual(['decide', 'cancel', 'refund']);
          control.release();
          // The lane's next statement carries the call made after the cancel: it books the freed slot.
          expect((await after).delayMs).toBe(1000);
          expect((await busy).allowed).toBe(true);
          await store.close();
        } finally {
          await connection.close();
        }
      },
    );

    it.skipIf(!available)(
      'a client that throws instead of rejecting fails that call only: the key goes on',
      async () => {
        const connection = connect('pg', 2);
        try {
          const { client, control } = holdingClient(connection);
          const store = postgresStore({ client, schema, table });
          const clock = manualClock({ startMs: SCENARIO_START_MS });
          const limiter = createLimiter({
            store,
            clock,
            prefix: uniquePrefix('throws'),
            policies: [gcra({ limit: 1, periodMs: 1000 })],
            breaker: false,
          });
          await limiter.limit('k');
          const booked = await limiter.limit('k', { maxDelayMs: 5000 });
          control.throwOnCancel = true;
          const first = limiter.limit('k', { maxDelayMs: 5000 });
          const cancel = limiter.cancel('k', booked);
          const after = limiter.limit('k', { maxDelayMs: 5000 });
          expect((await first).allowed).toBe(true);
          await expect(cancel).rejects.toThrow(/driver bug/);
          expect((await after).delayMs).toBe(3000);
          const closed = await Promise.race([store.close().then(() => 'closed'), tick().then(() => 'pending')]);
          expect(closed).toBe('closed');
        } finally {
          await connection.close();
        }
      },
    );
  });
});
