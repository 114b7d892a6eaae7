import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  isFloodgateError,
  leasedLimiter,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { encodeKey } from '../../src/keys.js';
import { compilePolicy } from '../../src/model/compile.js';
import { stateKey } from '../../src/stores/sql/common.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import {
  manualClock,
  runConformanceSuite,
  runFastPathSuite,
  runPlainDataSuite,
  SCENARIO_START_MS,
  uniquePrefix,
} from '../../src/testing/index.js';

const run = promisify(execFile);
const directory = mkdtempSync(join(tmpdir(), 'floodgate-sqlite-'));
const worker = fileURLToPath(new URL('./fixtures/sqlite-worker.ts', import.meta.url));
const openDatabases: Database.Database[] = [];

function open(name = 'state.db'): Database.Database {
  const database = new Database(join(directory, name));
  openDatabases.push(database);
  return database;
}

function spawnWorker(...args: string[]): Promise<string> {
  return run(process.execPath, ['--import', 'tsx', worker, ...args], { encoding: 'utf8' }).then((r) => r.stdout);
}

afterAll(() => {
  for (const database of openDatabases) database.close();
  rmSync(directory, { recursive: true, force: true });
});

describe('sqlite store (file on disk)', () => {
  const database = open();
  const store = sqliteStore({ database, table: 'conformance' });
  store.migrate();
  runConformanceSuite({ describe, it }, { store: () => store, randomRuns: 24 });
  runPlainDataSuite({ describe, it }, { store: () => store });
  // A limit alone under one meter policy takes the meter statement (and the general path when it does not
  // admit); every call of the store with fastPath: false, the general path's transaction.
  const general = sqliteStore({ database, table: 'conformance', fastPath: false });
  runFastPathSuite(
    { describe, it },
    {
      variants: [
        { name: 'meter statement', store: () => store },
        { name: 'general path (fastPath: false)', store: () => general },
      ],
      randomOperations: 120,
    },
  );
});

describe('sqlite meter statement', () => {
  /** A database whose statements count their runs. */
  function counted(database: Database.Database): { database: Database.Database; runs: string[] } {
    const runs: string[] = [];
    const proxy = new Proxy(database, {
      get(target, property) {
        if (property !== 'prepare') {
          const value = Reflect.get(target, property, target);
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return (sql: string) => {
          const statement = target.prepare(sql);
          const label = sql.trim().split(/\s+/).slice(0, 2).join(' ');
          const counting =
            (method: 'run' | 'get' | 'all') =>
            (...params: unknown[]): unknown => {
              runs.push(label);
              return statement[method](...params);
            };
          return { run: counting('run'), get: counting('get'), all: counting('all') };
        };
      },
    });
    return { database: proxy, runs };
  }

  it('an admitted limit alone is one statement; the TAT is kept as a number', () => {
    const database = open('meter-one.db');
    const { database: watched, runs } = counted(database);
    const store = sqliteStore({ database: watched, table: 'one' });
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 3, periodMs: 3000, name: 'g' })] });
    // A new key: the statement inserts, then the sweep looks at a few rows (as the general path does).
    runs.length = 0;
    expect(limiter.limitSync('k')).toMatchObject({ allowed: true, remaining: 2 });
    expect(runs).toEqual(['INSERT INTO', 'SELECT key', 'DELETE FROM']);
    runs.length = 0;
    clock.advance(10);
    expect(limiter.limitSync('k')).toMatchObject({ allowed: true, remaining: 1 });
    expect(runs).toEqual(['INSERT INTO']);
    const row = database.prepare('SELECT typeof(state) AS type, state FROM one').get() as {
      type: string;
      state: number;
    };
    expect(row).toEqual({ type: 'real', state: SCENARIO_START_MS * 1000 + 2_000_000 });
    // A denial: the statement writes nothing, and the row read alone decides it (nothing to write).
    limiter.limitSync('k');
    runs.length = 0;
    expect(limiter.limitSync('k')).toMatchObject({ allowed: false, remaining: 0 });
    expect(runs).toEqual(['INSERT INTO', 'SELECT state,']);
  });

  it('a denial that starts a penalty box goes the transaction, which writes it', () => {
    const database = open('meter-box.db');
    const { database: watched, runs } = counted(database);
    const store = sqliteStore({ database: watched, table: 'box' });
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({
      store,
      clock,
      policies: [gcra({ limit: 1, periodMs: 1000, blockMs: 5000, name: 'g' })],
    });
    expect(limiter.limitSync('k').allowed).toBe(true);
    runs.length = 0;
    expect(limiter.limitSync('k')).toMatchObject({ allowed: false, retryAfterMs: 5000 });
    expect(runs).toEqual(['INSERT INTO', 'SELECT state,', 'BEGIN IMMEDIATE', 'SELECT state,', 'INSERT INTO', 'COMMIT']);
    expect(database.prepare('SELECT typeof(state) AS type FROM box').get()).toEqual({ type: 'blob' });
    // Blocked: the statement reads no BLOB; the row read alone denies, nothing to write.
    clock.advance(2000);
    runs.length = 0;
    expect(limiter.limitSync('k')).toMatchObject({ allowed: false, retryAfterMs: 3000 });
    expect(runs).toEqual(['INSERT INTO', 'SELECT state,']);
  });

  it('a row an earlier version wrote (a BLOB of doubles) is decided by the general path, then kept as a number', () => {
    const database = open('meter-blob.db');
    const store = sqliteStore({ database, table: 'blob' });
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const policy = gcra({ limit: 3, periodMs: 3000, name: 'g' });
    const key = stateKey('floodgate', encodeKey('k'), compilePolicy(policy));
    const nowUs = SCENARIO_START_MS * 1000;
    // Two calls' worth of TAT ahead, as [0, tat] in little-endian doubles.
    const blob = Buffer.alloc(16);
    blob.writeDoubleLE(0, 0);
    blob.writeDoubleLE(nowUs + 2_000_000, 8);
    database
      .prepare('INSERT INTO blob (key, state, expires_at, at_us) VALUES (?, ?, ?, ?)')
      .run(key, blob, nowUs + 60_000_000, nowUs);
    const limiter = createLimiter({ store, clock, policies: [policy] });
    expect(limiter.limitSync('k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(database.prepare('SELECT typeof(state) AS type FROM blob').get()).toEqual({ type: 'real' });
    expect(limiter.limitSync('k')).toMatchObject({ allowed: false });
  });
});

describe('sqlite store', () => {
  it('migrate() twice is harmless and keeps state; the file is in WAL mode', () => {
    const database = open('migrate.db');
    const store = sqliteStore({ database, table: 'twice' });
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 2, periodMs: 60_000 })] });
    limiter.limitSync('k');
    store.migrate();
    expect(limiter.limitSync('k').remaining).toBe(0);
    expect(database.pragma('journal_mode', { simple: true })).toBe('wal');
  });

  it('migrate() adds the time column to a table made by an earlier version', () => {
    const database = open('legacy.db');
    database.exec(
      'CREATE TABLE legacy (key TEXT PRIMARY KEY NOT NULL, state BLOB NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID',
    );
    const store = sqliteStore({ database, table: 'legacy' });
    store.migrate();
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 2, periodMs: 60_000 })] });
    expect(limiter.limitSync('k').remaining).toBe(1);
    const row = database.prepare('SELECT at_us FROM legacy').get() as { at_us: number };
    expect(row.at_us).toBe(clock.nowUs());
  });

  it('refuses a hostile table name with a typed error naming the option', () => {
    for (const table of ['x; DROP TABLE users', 'a"b', 'Upper', '', 'x'.repeat(41), 'select-1', 42]) {
      let caught: unknown;
      try {
        sqliteStore({ database: open('hostile.db'), table: table as string });
      } catch (error) {
        caught = error;
      }
      expect(isFloodgateError(caught)).toBe(true);
      expect(caught).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'table' });
    }
  });

  it('asks for migrate() when the table is missing', async () => {
    const store = sqliteStore({ database: open('empty.db'), table: 'missing' });
    const limiter = createLimiter({ store, policies: [gcra({ limit: 1, periodMs: 1000 })] });
    await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(limiter.limit('k')).rejects.toThrow(/migrate\(\)/);
  });

  it('stores keys holding quotes, semicolons, backslashes, Unicode and SQL as data', () => {
    const database = open('keys.db');
    const store = sqliteStore({ database, table: 'keys' });
    store.migrate();
    const policy = gcra({ limit: 3, periodMs: 60_000 });
    const prefix = uniquePrefix('quote');
    const limiter = createLimiter({
      store,
      policies: [policy],
      prefix,
      clock: manualClock({ startMs: SCENARIO_START_MS }),
    });
    const keys = [
      "o'brien",
      'a"b',
      "'; DROP TABLE keys; --",
      'back\\slash\\',
      'semi;colon',
      'ключ 🔑 鍵',
      "x' OR '1'='1",
      '%{}#',
      'k'.repeat(500),
    ];
    keys.forEach((key, i) => {
      for (let n = 0; n <= i % 3; n++) limiter.limitSync(key);
    });
    keys.forEach((key, i) => {
      expect(limiter.statusSync(key).remaining).toBe(3 - ((i % 3) + 1));
    });
    const rows = database.prepare('SELECT key FROM keys ORDER BY key').all() as { key: string }[];
    const expected = keys.map((key) => stateKey(prefix, encodeKey(key), compilePolicy(policy))).sort();
    expect(rows.map((r) => r.key).sort()).toEqual(expected);
    expect(database.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all()).toEqual([{ name: 'keys' }]);
  });

  it('deletes expired rows a few at a time as new keys arrive, sweeping in key order', () => {
    const database = open('prune.db');
    const store = sqliteStore({ database, table: 'prune' });
    store.migrate();
    // A day behind the system clock: pruning runs on the earlier of the two, so here on this one.
    const clock = manualClock({ startMs: Date.now() - 24 * 3_600_000 });
    const limiter = createLimiter({
      store,
      clock,
      policies: [tokenBucket({ capacity: 5, refillAmount: 5, refillIntervalMs: 1000 })],
    });
    for (let i = 0; i < 40; i++) limiter.limitSync(`idle-${i}`);
    const count = () => (database.prepare('SELECT count(*) AS n FROM prune').get() as { n: number }).n;
    expect(count()).toBe(40);
    // Expired (in whole minutes, EXPIRY_GRAIN_US) for more than a minute (PRUNE_GRACE_US): due for deletion.
    clock.advance(125_000);
    limiter.limitSync('idle-0');
    expect(count()).toBe(40);
    // Each decision that creates a row looks at the next 32 rows in key order and deletes the expired.
    limiter.limitSync('new-1');
    const deleted = 41 - count();
    expect(deleted).toBeGreaterThan(0);
    expect(deleted).toBeLessThanOrEqual(32);
    for (let i = 2; i <= 4; i++) limiter.limitSync(`new-${i}`);
    // Four sweeps of 32 have gone round the table: only live rows are left.
    expect(count()).toBe(5);
    const plan = database
      .prepare("EXPLAIN QUERY PLAN SELECT key, expires_at FROM prune WHERE key > '' ORDER BY key LIMIT 32")
      .all() as { detail: string }[];
    expect(plan.map((p) => p.detail).join(' ')).toMatch(/USING PRIMARY KEY \(key>\?\)/);
  });

  // Pruning never deletes a live row: a limiter whose clock runs two hours ahead once swept the rows of
  // another limiter (on the system clock) that it saw as expired an hour ago, and that key got 5 more of 5.
  // Rows are now deleted once expired on the earlier of the deciding call's clock and the system clock.
  for (const [name, policy] of [
    ['fixed window', fixedWindow({ limit: 5, windowMs: 3_600_000 })],
    ['gcra', gcra({ limit: 5, periodMs: 3_600_000 })],
  ] as [string, Policy][]) {
    it(`a limiter two hours ahead deletes none of another limiter's live rows (${name})`, () => {
      const database = open(`prune-ahead-${name.replace(' ', '-')}.db`);
      const store = sqliteStore({ database, table: 'ahead' });
      store.migrate();
      const rows = (prefix: string) =>
        (
          database
            .prepare("SELECT count(*) AS n FROM ahead WHERE key LIKE ? ESCAPE '\\'")
            .get(`${prefix.replaceAll('_', '\\_')}%`) as { n: number }
        ).n;
      const victimPrefix = uniquePrefix('victim');
      const victim = createLimiter({ store, prefix: victimPrefix, policies: [policy] });
      let admitted = 0;
      for (let i = 0; i < 5; i++) if (victim.limitSync('v').allowed) admitted++;
      expect(admitted).toBe(5);
      expect(rows(victimPrefix)).toBe(1);

      // On its clock the victim's row expired an hour ago. Each of its 40 new keys sweeps the next 32 rows
      // in key order, so the sweep goes round the table (41 rows at most) many times.
      const ahead = createLimiter({
        store,
        prefix: uniquePrefix('ahead'),
        clock: manualClock({ startMs: Date.now() + 2 * 3_600_000 }),
        policies: [policy],
      });
      for (let i = 0; i < 40; i++) ahead.limitSync(`new-${i}`);

      expect(rows(victimPrefix)).toBe(1);
      let extra = 0;
      for (let i = 0; i < 5; i++) if (victim.limitSync('v').allowed) extra++;
      expect(extra).toBe(0);
    });
  }

  it('joins a transaction the caller has open (savepoint), and rolls back with it', () => {
    const database = open('nested.db');
    const store = sqliteStore({ database, table: 'nested' });
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 2, periodMs: 60_000 })] });
    const rolledBack = database.transaction(() => {
      limiter.limitSync('k');
      throw new Error('undo');
    });
    expect(() => rolledBack()).toThrow('undo');
    expect(limiter.statusSync('k').remaining).toBe(2);
    database.transaction(() => limiter.limitSync('k'))();
    expect(limiter.statusSync('k').remaining).toBe(1);
  });

  it('keeps state across a restart of the process', async () => {
    const file = join(directory, 'restart.db');
    const setup = new Database(file);
    sqliteStore({ database: setup, table: 'restart' }).migrate();
    setup.close();
    const nowUs = String(SCENARIO_START_MS * 1000);
    expect(await spawnWorker('limit', file, 'restart', 'user-1', '7', nowUs)).toBe('7');
    const status = JSON.parse(await spawnWorker('status', file, 'restart', 'user-1', nowUs));
    expect(status.remaining).toBe(93);
    expect(status.policies.map((p: { remaining: number }) => p.remaining)).toEqual([93, 113]);
  });

  it('admits exactly the limit when several processes hammer one key', async () => {
    const file = join(directory, 'concurrent.db');
    const setup = new Database(file);
    sqliteStore({ database: setup, table: 'hot' }).migrate();
    setup.close();
    const key = uniquePrefix('hot');
    const admitted = await Promise.all([1, 2, 3, 4].map(() => spawnWorker('limit', file, 'hot', key, '60')));
    // 240 calls on a key that admits 100 a day (and 120 in its log): exactly 100, whatever the interleaving.
    expect(admitted.map(Number).reduce((a, b) => a + b, 0)).toBe(100);
  }, 60_000);
});

describe('sqlite store options', () => {
  it('refuses what is not a database, and bad timeouts', () => {
    expect(() => sqliteStore({ database: {} as never })).toThrow(expect.objectContaining({ option: 'database' }));
    expect(() => sqliteStore({ database: open('x.db'), busyTimeoutMs: -1 })).toThrow(
      expect.objectContaining({ option: 'busyTimeoutMs' }),
    );
  });

  it('uses the store with a sliding log and the async API', async () => {
    const store = sqliteStore({ database: open('async.db') });
    store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store, clock, policies: [slidingLog({ limit: 2, windowMs: 1000 })] });
    expect((await limiter.limit('k')).allowed).toBe(true);
    expect((await limiter.limit('k')).allowed).toBe(true);
    expect(await limiter.limit('k')).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    await limiter.reset('k');
    expect((await limiter.limit('k')).remaining).toBe(1);
  });
});

describe('sqlite store, processes whose clocks disagree', () => {
  const algorithms: Record<string, Policy> = {
    'fixed window': fixedWindow({ limit: 10, windowMs: 1000 }),
    'sliding window': slidingWindow({ limit: 10, windowMs: 1000 }),
    gcra: gcra({ limit: 10, periodMs: 1000 }),
  };
  /** Two connections on one file, each deciding on its own clock, `skewUs` behind the other; calls alternate. */
  function admitted(file: string, policy: Policy, skewUs: number): number {
    const [first, second] = [open(file), open(file)].map((database) => {
      const store = sqliteStore({ database, table: 'skew' });
      store.migrate();
      return store;
    }) as [ReturnType<typeof sqliteStore>, ReturnType<typeof sqliteStore>];
    // Just before a window boundary, for two and a half windows, a call every 100 µs.
    const startMs = Math.ceil(SCENARIO_START_MS / 1000) * 1000 - 1;
    const ahead = manualClock({ startMs });
    const behind = manualClock({ startMs });
    const prefix = uniquePrefix('skew');
    const a = createLimiter({ store: first, clock: ahead, policies: [policy], prefix });
    const b = createLimiter({
      store: second,
      clock: { nowUs: () => behind.nowUs() - skewUs, sleep: () => Promise.resolve() },
      policies: [policy],
      prefix,
    });
    let count = 0;
    for (let i = 0; i < 25_000; i++) {
      if ((i % 2 === 0 ? a : b).limitSync('k').allowed) count++;
      ahead.advanceUs(100);
      behind.advanceUs(100);
    }
    return count;
  }

  for (const [name, policy] of Object.entries(algorithms)) {
    it(`${name}: clocks 1 ms and 1 h apart admit no more than one clock`, () => {
      const baseline = admitted(`skew-${name}-0.db`, policy, 0);
      expect(baseline).toBeGreaterThan(10);
      for (const skewUs of [1000, 3_600_000_000]) {
        const count = admitted(`skew-${name}-${skewUs}.db`, policy, skewUs);
        expect(count).toBeLessThanOrEqual(baseline);
        expect(count).toBeGreaterThanOrEqual(baseline - 10);
      }
    });
  }

  it('reports the time it decided at, so a lease taken on a lagging clock is given back', async () => {
    const [first, second] = [open('skew-lease.db'), open('skew-lease.db')].map((database) => {
      const store = sqliteStore({ database, table: 'skew' });
      store.migrate();
      return store;
    }) as [ReturnType<typeof sqliteStore>, ReturnType<typeof sqliteStore>];
    const policies = [slidingLog({ limit: 10, windowMs: 3_600_000 })];
    const prefix = uniquePrefix('skew-lease');
    const ahead = createLimiter({ store: first, clock: manualClock({ startMs: SCENARIO_START_MS }), policies, prefix });
    const behind = createLimiter({
      store: second,
      clock: manualClock({ startMs: SCENARIO_START_MS - 60_000 }),
      policies,
      prefix,
    });
    expect(ahead.limitSync('k').remaining).toBe(9);
    const lease = leasedLimiter(behind, { size: 5, ttlMs: 60_000 });
    expect((await lease.limit('k')).allowed).toBe(true);
    await lease.close();
    expect(ahead.limitSync('k').remaining).toBe(7);
  });
});
