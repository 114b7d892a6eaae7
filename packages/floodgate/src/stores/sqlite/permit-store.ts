import { resolve } from 'node:path';
import { FloodgateError, invalid } from '../../errors.js';
import { LocalWakes } from '../../permits/local-wakes.js';
import {
  type AcquireReply,
  acquirePermit,
  type LeaveReply,
  leaveQueue,
  type PermitLease,
  type PermitState,
  type PermitWaiter,
  type RefreshReply,
  type ReleaseReply,
  refreshPermit,
  releasePermit,
  type WaitReply,
  waitPermit,
} from '../../permits/model.js';
import type * as Port from '../../permits/store.js';
import { checkPermitCall } from '../../permits/store-args.js';
import { EXPIRY_GRAIN_US, PRUNE_GRACE_US, quoteIdentifier } from '../sql/common.js';
import { type SqliteDatabase, type SqliteStatement, sqliteOptions } from './options.js';

/** Options of {@link sqlitePermitStore}. */
export interface SqlitePermitStoreOptions {
  /** An open better-sqlite3 database (the store never closes it). */
  database: SqliteDatabase;
  /**
   * Table of the leases, created by `migrate()`: `[a-z_][a-z0-9_]*`, at most 40 characters, not
   * containing `__fg_`; the fences live beside it in `<table>__fg_keys`, the waiters in
   * `<table>__fg_queue`. Not the table of a rate store.
   * @default 'floodgate_permits'
   */
  table?: string;
  /** How long a call waits for another process's write lock before failing, ms. @default 5000 */
  busyTimeoutMs?: number;
}

/** The SQLite permit store: synchronous. */
export interface SqlitePermitStore extends Port.PermitStore {
  readonly name: 'sqlite';
  readonly table: string;
  acquire(key: string, args: Port.PermitAcquireArgs): AcquireReply;
  refresh(key: string, args: Port.PermitRefreshArgs): RefreshReply;
  release(key: string, args: Port.PermitReleaseArgs): ReleaseReply;
  wait(key: string, args: Port.PermitWaitArgs): WaitReply;
  leave(key: string, args: Port.PermitLeaveArgs): LeaveReply;
  /**
   * Wakes within this process only: the calls of every store of this process on the same file and table
   * tell its waiters. Another process's release is heard at the waiter's next poll (`pollMs`): SQLite
   * has no notification between processes.
   */
  watch(key: string, listener: (ticket: number) => void): Port.PermitUnwatch;
  /** Creates the tables if missing and turns on WAL mode. Idempotent; call it once at startup. */
  migrate(): void;
}

interface Statements {
  now: SqliteStatement;
  fence: SqliteStatement;
  leases: SqliteStatement;
  putKey: SqliteStatement;
  putLease: SqliteStatement;
  dropLease: SqliteStatement;
  pruneFrom: SqliteStatement;
  dropKey: SqliteStatement;
  dropKeyLeases: SqliteStatement;
  waiters: SqliteStatement;
  putWaiter: SqliteStatement;
  dropWaiter: SqliteStatement;
  dropKeyWaiters: SqliteStatement;
  begin: SqliteStatement;
  commit: SqliteStatement;
  rollback: SqliteStatement;
  savepoint: SqliteStatement;
  release: SqliteStatement;
  rollbackTo: SqliteStatement;
}

interface KeyRow {
  fence: number | bigint;
  expires_at: number | bigint;
}

interface LeaseRow {
  lease_id: string;
  cost: number | bigint;
  expires_at: number | bigint;
}

interface WaiterRow {
  waiter_id: string;
  cost: number | bigint;
  ticket: number | bigint;
  expires_at: number | bigint;
}

/** Key rows looked at for idle ones each time a call creates a key row. */
const PRUNE_ROWS = 16;

/**
 * Concurrency permits in a SQLite file through better-sqlite3. Each call is one `BEGIN IMMEDIATE`
 * transaction (the write lock makes the calls of every process on the file strictly serial) that reads
 * the key's leases and fence, runs the permit model itself (src/permits/model.ts: sweep, then decide,
 * so it is exact by construction) and writes back what changed: expired leases deleted, the new lease,
 * the fence. A key holds at most `limit` lease rows.
 *
 * The clock is SQLite's own (`julianday('now')`, whole ms), read inside the transaction: the clock of
 * the machine holding the file, which every process on it shares, whatever a process's JavaScript clock
 * says; a `clock` option on the permits gives the caller's time instead.
 *
 * @example
 * ```ts
 * import Database from 'better-sqlite3';
 * import { concurrency, createPermits } from 'floodgate';
 * import { sqlitePermitStore } from 'floodgate/sqlite';
 *
 * const store = sqlitePermitStore({ database: new Database('permits.db') });
 * store.migrate();
 * const permits = createPermits({ store, policy: concurrency({ limit: 4, leaseMs: 30_000 }) });
 * ```
 */
export function sqlitePermitStore(options: SqlitePermitStoreOptions): SqlitePermitStore {
  const { database, table, busyTimeoutMs } = sqliteOptions(options, 'sqlitePermitStore', 'floodgate_permits');
  if (table.includes('__fg_')) throw invalid('ERR_INVALID_OPTION', 'table', table, 'an identifier without "__fg_"');
  const rows = new SqlitePermitRows(database, table, busyTimeoutMs);
  const wakes = wakesOf(database, table);
  // Waiters are told after the call returned (never from inside its transaction), as a message would arrive.
  const told = <R extends { wake?: number }>(key: string, reply: R): R => wakes.tell(key, reply);
  return {
    name: 'sqlite',
    table,
    migrate: () => rows.migrate(),
    acquire(key, a) {
      checkPermitCall(key, a, 'acquire');
      const reply = rows.run(key, a.nowUs, true, (state, nowUs) =>
        acquirePermit(state, nowUs, a.limit, a.leaseUs, a.cost, a.leaseId),
      ) as AcquireReply;
      return told(key, reply);
    },
    refresh(key, a) {
      checkPermitCall(key, a, 'refresh');
      const reply = rows.run(key, a.nowUs, false, (state, nowUs) =>
        refreshPermit(state, nowUs, a.leaseUs, a.leaseId, a.limit),
      );
      return told(key, reply ?? { refreshed: false, expiresAtUs: 0, nowUs: rows.lastNowUs, wake: 0 });
    },
    release(key, a) {
      checkPermitCall(key, a, 'release');
      const reply = rows.run(key, a.nowUs, false, (state, nowUs) => releasePermit(state, nowUs, a.leaseId, a.limit));
      return told(key, reply ?? { released: false, nowUs: rows.lastNowUs, wake: 0 });
    },
    wait(key, a) {
      checkPermitCall(key, a, 'wait');
      const reply = rows.run(key, a.nowUs, true, (state, nowUs) =>
        waitPermit(state, nowUs, a.limit, a.leaseUs, a.cost, a.leaseId, a.maxQueue, a.waiterUs),
      ) as WaitReply;
      return told(key, reply);
    },
    leave(key, a) {
      checkPermitCall(key, a, 'leave');
      const reply = rows.run(key, a.nowUs, false, (state, nowUs) => leaveQueue(state, nowUs, a.limit, a.leaseId));
      return told(key, reply ?? { left: false, nowUs: rows.lastNowUs, wake: 0 });
    },
    watch: (key, listener) => wakes.watch(key, listener),
  };
}

/** The listeners of each key, per database file and table: shared by every store of this process on them. */
const wakesByFile = new Map<string, LocalWakes>();
const wakesByDatabase = new WeakMap<object, Map<string, LocalWakes>>();

/**
 * The wakes of `table` in `database`: by the file's absolute path for a file (two connections of this
 * process on one file hear each other), by the connection for an in-memory or temporary database.
 */
function wakesOf(database: SqliteDatabase, table: string): LocalWakes {
  const { name, memory } = database as { name?: unknown; memory?: unknown };
  const onFile = typeof name === 'string' && name !== '' && name !== ':memory:' && memory !== true;
  let tables: Map<string, LocalWakes> | undefined;
  let id = table;
  if (onFile) {
    tables = wakesByFile;
    id = `${resolve(name)}\0${table}`;
  } else {
    tables = wakesByDatabase.get(database);
    if (tables === undefined) {
      tables = new Map();
      wakesByDatabase.set(database, tables);
    }
  }
  let wakes = tables.get(id);
  if (wakes === undefined) {
    wakes = new LocalWakes();
    tables.set(id, wakes);
  }
  return wakes;
}

class SqlitePermitRows {
  private statements: Statements | undefined;
  private readonly leases: string;
  private readonly keys: string;
  private readonly queue: string;
  /** Where the prune goes on (the key it stopped after). */
  private pruneFrom = '';
  /** The time of the last call (for the answer of a call on a key without a row). */
  lastNowUs = 0;

  constructor(
    private readonly database: SqliteDatabase,
    private readonly table: string,
    private readonly busyTimeoutMs: number,
  ) {
    this.leases = quoteIdentifier(table);
    this.keys = quoteIdentifier(`${table}__fg_keys`);
    this.queue = quoteIdentifier(`${table}__fg_queue`);
  }

  migrate(): void {
    this.database.exec(`PRAGMA busy_timeout = ${this.busyTimeoutMs}`);
    this.database.exec('PRAGMA journal_mode = WAL');
    // A table of that name that is not a permit table (a rate store's) is refused before anything is created.
    const columns = this.database.prepare(`PRAGMA table_info(${this.leases})`).all() as { name: string }[];
    if (columns.length > 0 && !columns.some((c) => c.name === 'lease_id')) {
      throw new FloodgateError(
        'ERR_STORE_MISCONFIGURED',
        `the sqlite table ${JSON.stringify(this.table)} is not a table of concurrency permits (a rate store's?)`,
        { option: 'table' },
      );
    }
    this.database.exec(
      `CREATE TABLE IF NOT EXISTS ${this.leases} (key TEXT NOT NULL, lease_id TEXT NOT NULL, cost INTEGER NOT NULL,
expires_at INTEGER NOT NULL, PRIMARY KEY (key, lease_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ${this.keys} (key TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL,
expires_at INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ${this.queue} (key TEXT NOT NULL, waiter_id TEXT NOT NULL, cost INTEGER NOT NULL,
ticket INTEGER NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (key, waiter_id)) WITHOUT ROWID;`,
    );
  }

  /**
   * One call: the key's state read under the write lock, `step` (a model function) run on it, what
   * changed written back. Without a key row, a call that does not create one answers undefined.
   */
  run<R>(
    key: string,
    callerNowUs: number | undefined,
    create: boolean,
    step: (state: PermitState, nowUs: number) => R,
  ): R | undefined {
    const s = this.ready();
    // Inside a transaction of the caller's: a savepoint of it (undone if the caller rolls back).
    const nested = this.database.inTransaction === true;
    (nested ? s.savepoint : s.begin).run();
    const commit = nested ? s.release : s.commit;
    try {
      const nowUs = callerNowUs ?? Number((s.now.get() as { ms: number | bigint }).ms) * 1000;
      this.lastNowUs = nowUs;
      const row = s.fence.get(key) as KeyRow | undefined;
      if (row === undefined && !create) {
        commit.run();
        return undefined;
      }
      const before = new Map<string, PermitLease>();
      const waiting = new Map<string, PermitWaiter>();
      if (row !== undefined) {
        for (const lease of s.leases.all(key) as LeaseRow[]) {
          before.set(lease.lease_id, { cost: Number(lease.cost), expiresAtUs: Number(lease.expires_at) });
        }
        // In ticket order, as the model keeps its queue.
        for (const w of s.waiters.all(key) as WaiterRow[]) {
          waiting.set(w.waiter_id, {
            cost: Number(w.cost),
            ticket: Number(w.ticket),
            expiresAtUs: Number(w.expires_at),
          });
        }
      }
      const state: PermitState = {
        leases: new Map([...before].map(([id, lease]) => [id, { ...lease }])),
        fence: row === undefined ? 0 : Number(row.fence),
        queue: new Map([...waiting].map(([id, waiter]) => [id, { ...waiter }])),
      };
      const reply = step(state, nowUs);
      this.write(s, key, { leases: before, queue: waiting }, state, row);
      if (row === undefined) this.prune(s, nowUs, key);
      commit.run();
      return reply;
    } catch (error) {
      try {
        if (nested) {
          s.rollbackTo.run();
          s.release.run();
        } else if (this.database.inTransaction !== false) {
          s.rollback.run();
        }
      } catch {
        // SQLite already rolled back.
      }
      throw error;
    }
  }

  private write(
    s: Statements,
    key: string,
    was: { leases: ReadonlyMap<string, PermitLease>; queue: ReadonlyMap<string, PermitWaiter> },
    state: PermitState,
    row: KeyRow | undefined,
  ): void {
    const before = was.leases;
    let last = 0;
    for (const [id, lease] of state.leases) {
      const was = before.get(id);
      if (was === undefined || was.cost !== lease.cost || was.expiresAtUs !== lease.expiresAtUs) {
        s.putLease.run(key, id, lease.cost, lease.expiresAtUs);
      }
      if (lease.expiresAtUs > last) last = lease.expiresAtUs;
    }
    for (const id of before.keys()) if (!state.leases.has(id)) s.dropLease.run(key, id);
    // The waiters: a new place or a later expiry written, a place gone deleted; the row outlives them too.
    const queue = state.queue ?? new Map<string, PermitWaiter>();
    for (const [id, waiter] of queue) {
      const had = was.queue.get(id);
      if (had === undefined || had.expiresAtUs !== waiter.expiresAtUs) {
        s.putWaiter.run(key, id, waiter.cost, waiter.ticket, waiter.expiresAtUs);
      }
      if (waiter.expiresAtUs > last) last = waiter.expiresAtUs;
    }
    for (const id of was.queue.keys()) if (!queue.has(id)) s.dropWaiter.run(key, id);
    // The row outlives its last lease and its fence, rounded up to a minute: it is kept as it is while busy.
    const expiresAt = Math.ceil(Math.max(last, state.fence) / EXPIRY_GRAIN_US) * EXPIRY_GRAIN_US;
    if (row === undefined || Number(row.fence) !== state.fence || Number(row.expires_at) < expiresAt) {
      s.putKey.run(key, state.fence, Math.max(expiresAt, row === undefined ? 0 : Number(row.expires_at)));
    }
  }

  /**
   * Deletes, with their leases, the idle key rows among the next few in key order: those whose expiry
   * passed a minute ago on the earlier of the call's clock and SQLite's (a caller clock ahead never
   * deletes a row that others still count on). Past the last row it starts again from the first.
   */
  private prune(s: Statements, nowUs: number, key: string): void {
    const sqliteUs = Number((s.now.get() as { ms: number | bigint }).ms) * 1000;
    const before = Math.min(nowUs, sqliteUs) - PRUNE_GRACE_US;
    const next = s.pruneFrom.all(this.pruneFrom, PRUNE_ROWS) as { key: string; expires_at: number | bigint }[];
    for (const candidate of next) {
      if (candidate.key !== key && Number(candidate.expires_at) < before) {
        s.dropKeyLeases.run(candidate.key);
        s.dropKeyWaiters.run(candidate.key);
        s.dropKey.run(candidate.key);
      }
    }
    this.pruneFrom = next.length < PRUNE_ROWS ? '' : (next[next.length - 1] as { key: string }).key;
  }

  private ready(): Statements {
    if (this.statements !== undefined) return this.statements;
    const db = this.database;
    const l = this.leases;
    const k = this.keys;
    const q = this.queue;
    try {
      db.exec(`PRAGMA busy_timeout = ${this.busyTimeoutMs}`);
      this.statements = {
        // SQLite's clock in whole ms (julianday keeps ms exactly; the float error is far below 0.5 ms).
        now: db.prepare(`SELECT CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) AS ms`),
        fence: db.prepare(`SELECT fence, expires_at FROM ${k} WHERE key = ?`),
        leases: db.prepare(`SELECT lease_id, cost, expires_at FROM ${l} WHERE key = ?`),
        putKey: db.prepare(`INSERT OR REPLACE INTO ${k} (key, fence, expires_at) VALUES (?, ?, ?)`),
        putLease: db.prepare(`INSERT OR REPLACE INTO ${l} (key, lease_id, cost, expires_at) VALUES (?, ?, ?, ?)`),
        dropLease: db.prepare(`DELETE FROM ${l} WHERE key = ? AND lease_id = ?`),
        pruneFrom: db.prepare(`SELECT key, expires_at FROM ${k} WHERE key > ? ORDER BY key LIMIT ?`),
        dropKey: db.prepare(`DELETE FROM ${k} WHERE key = ?`),
        dropKeyLeases: db.prepare(`DELETE FROM ${l} WHERE key = ?`),
        waiters: db.prepare(`SELECT waiter_id, cost, ticket, expires_at FROM ${q} WHERE key = ? ORDER BY ticket`),
        putWaiter: db.prepare(
          `INSERT OR REPLACE INTO ${q} (key, waiter_id, cost, ticket, expires_at) VALUES (?, ?, ?, ?, ?)`,
        ),
        dropWaiter: db.prepare(`DELETE FROM ${q} WHERE key = ? AND waiter_id = ?`),
        dropKeyWaiters: db.prepare(`DELETE FROM ${q} WHERE key = ?`),
        begin: db.prepare('BEGIN IMMEDIATE'),
        commit: db.prepare('COMMIT'),
        rollback: db.prepare('ROLLBACK'),
        savepoint: db.prepare('SAVEPOINT floodgate_permit'),
        release: db.prepare('RELEASE floodgate_permit'),
        rollbackTo: db.prepare('ROLLBACK TO floodgate_permit'),
      };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new FloodgateError(
        'ERR_STORE_UNAVAILABLE',
        /no such table/i.test(message)
          ? `the sqlite permit store's table ${JSON.stringify(this.table)} does not exist: call store.migrate() first`
          : `the sqlite permit store could not prepare its statements: ${message}`,
        { cause: error },
      );
    }
    return this.statements;
  }
}
