import { systemClock } from '../../clock.js';
import { FloodgateError, invalid } from '../../errors.js';
import type { State } from '../../model/types.js';
import { decideWithPermitSync, detachedResult } from '../kit/holding.js';
import type { StoredRow } from '../kit/row-store.js';
import { type SyncRowDatabase, type SyncRowStore, syncRowStore } from '../kit/sync-row-store.js';
import { EXPIRY_GRAIN_US, PRUNE_GRACE_US, quoteIdentifier, validateIdentifier } from '../sql/common.js';
import type { HeldResult, PermitClaim, StoreRequest } from '../store.js';
import { type SqliteDatabase, type SqliteStatement, sqliteOptions } from './options.js';
import { type SqlitePermitStore, sqlitePermitStore } from './permit-store.js';

export type { SqliteDatabase, SqliteStatement } from './options.js';

/** Options of {@link sqliteStore}. */
export interface SqliteStoreOptions {
  /** An open better-sqlite3 database (the store never closes it). */
  database: SqliteDatabase;
  /** Table holding the state, created by `migrate()`: `[a-z_][a-z0-9_]*`, at most 40 characters. @default 'floodgate_state' */
  table?: string;
  /** How long a decision waits for another process's write lock before failing, ms. @default 5000 */
  busyTimeoutMs?: number;
  /**
   * Table of the store's own permit store (`store.permits`, as `sqlitePermitStore({ database, table })`
   * names it), created by `store.permits.migrate()`. @default 'floodgate_permits'
   */
  permitsTable?: string;
}

/** The SQLite store: synchronous, so limiters on it offer `limitSync` as well as `limit`. */
export interface SqliteStore extends SyncRowStore {
  readonly name: 'sqlite';
  /** The table name. */
  readonly table: string;
  /**
   * Creates the table if missing and turns on WAL mode (several processes read and write one file
   * concurrently). Idempotent; call it once at startup, before the first decision.
   */
  migrate(): void;
  /**
   * The store's own permit store, on the same database (`sqlitePermitStore` on `permitsTable`; its
   * `migrate()` creates its tables): a limiter with a concurrency policy and no `permits` keeps its
   * permits here, and decides each `limit` in one transaction (`decideWithPermit`).
   */
  readonly permits: SqlitePermitStore;
  /** A `limit` and a permit of `permits`, all or nothing in one `BEGIN IMMEDIATE` transaction. */
  decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult>;
}

interface Statements {
  select: SqliteStatement;
  upsert: SqliteStatement;
  remove: SqliteStatement;
  sweepEnd: SqliteStatement;
  sweepRange: SqliteStatement;
  sweepRest: SqliteStatement;
  beginWrite: SqliteStatement;
  beginRead: SqliteStatement;
  commit: SqliteStatement;
  rollback: SqliteStatement;
  savepoint: SqliteStatement;
  release: SqliteStatement;
  rollbackTo: SqliteStatement;
}

/** Rows a decision that creates a row looks at for expired ones: small, so no decision pays for a sweep. */
const SWEEP_ROWS = 32;

/**
 * State in a SQLite file through better-sqlite3: the kit's synchronous transaction store
 * (`syncRowStore`) on one table. Each decision is one short `BEGIN IMMEDIATE` transaction that reads the
 * key's rows, runs the TypeScript model itself (so it is exact by construction) and writes the new
 * states: the write lock makes decisions from several processes on one file strictly serial, and WAL
 * mode keeps readers unblocked. State survives restarts.
 *
 * Expired rows are deleted by a sweep that moves through the table in key order, a few rows at a time,
 * each time a decision creates a row (only new rows make the table grow, so it keeps up), a minute after
 * they expire (on the earlier of the deciding call's clock and the system clock, so a limiter whose clock
 * runs ahead never deletes a row another limiter still counts on). There is no index on expiry: every
 * write would have to update it, and pages written are what a SQLite commit costs.
 *
 * SQLite has no clock of its own: the limiter passes the system clock (or the one you give it). Every row
 * keeps the time it was written at, and a decision runs at the latest of its own clock and the times of
 * the rows it reads: processes whose clocks disagree a little (each process's clock has its own offset)
 * never take a key back in time, which would hand out a window's quota twice.
 *
 * @example
 * ```ts
 * import Database from 'better-sqlite3';
 * import { createLimiter, gcra } from 'floodgate';
 * import { sqliteStore } from 'floodgate/sqlite';
 *
 * const store = sqliteStore({ database: new Database('limits.db') });
 * store.migrate();
 * const limiter = createLimiter({ store, policies: [gcra({ limit: 10, periodMs: 1000 })] });
 * const decision = limiter.limitSync('client-1');
 * ```
 */
export function sqliteStore(options: SqliteStoreOptions): SqliteStore {
  const { database, table, busyTimeoutMs } = sqliteOptions(options, 'sqliteStore', 'floodgate_state');
  const permitsTable = validateIdentifier('permitsTable', options.permitsTable ?? 'floodgate_permits');
  if (permitsTable === table) {
    throw invalid('ERR_INVALID_OPTION', 'permitsTable', permitsTable, 'a table other than the state table');
  }
  const rows = new SqliteRows(database, table, busyTimeoutMs);
  const base = syncRowStore({ name: 'sqlite', database: rows, expiryGrainUs: EXPIRY_GRAIN_US });
  let own: SqlitePermitStore | undefined;
  const permits = () => {
    own ??= sqlitePermitStore({ database, table: permitsTable, busyTimeoutMs });
    return own;
  };
  return {
    ...base,
    name: 'sqlite',
    table,
    get permits() {
      return permits();
    },
    migrate: () => rows.migrate(),
    // One write transaction around both: the permit's and the decision's own nest in it as savepoints.
    decideWithPermit(request, claim) {
      try {
        const decide = (r: StoreRequest) => detachedResult(base.decideSync(r));
        return Promise.resolve(rows.transaction(true, () => decideWithPermitSync(decide, permits(), request, claim)));
      } catch (error) {
        return Promise.reject(error);
      }
    },
  };
}

/** The table as the kit's `syncRowStore` reads and writes it. */
class SqliteRows implements SyncRowDatabase {
  private statements: Statements | undefined;
  private readonly quoted: string;
  /** Where the sweep for expired rows goes on (the key it stopped after). */
  private sweepFrom = '';

  constructor(
    private readonly database: SqliteDatabase,
    private readonly table: string,
    private readonly busyTimeoutMs: number,
  ) {
    this.quoted = quoteIdentifier(table);
  }

  migrate(): void {
    this.configureConnection();
    // WAL is a property of the file: once set, every connection to it uses it.
    this.database.exec('PRAGMA journal_mode = WAL');
    this.database.exec(
      `CREATE TABLE IF NOT EXISTS ${this.quoted} (
        key TEXT PRIMARY KEY NOT NULL,
        state BLOB NOT NULL,
        expires_at INTEGER NOT NULL,
        at_us INTEGER NOT NULL DEFAULT 0
      ) WITHOUT ROWID;
      DROP INDEX IF EXISTS ${quoteIdentifier(`${this.table}_expires_at`)};`,
    );
    // Tables made by earlier versions lack the time of the last write.
    const columns = this.database.prepare(`PRAGMA table_info(${this.quoted})`).all() as { name: string }[];
    if (!columns.some((c) => c.name === 'at_us')) {
      try {
        this.database.exec(`ALTER TABLE ${this.quoted} ADD COLUMN at_us INTEGER NOT NULL DEFAULT 0`);
      } catch (error) {
        // Another process added it meanwhile.
        if (!/duplicate column/i.test(error instanceof Error ? error.message : String(error))) throw error;
      }
    }
  }

  /** A write transaction takes the write lock before reading, so no other process decides in between. */
  transaction<T>(write: boolean, body: () => T): T {
    const s = this.ready();
    const nested = this.database.inTransaction === true;
    (nested ? s.savepoint : write ? s.beginWrite : s.beginRead).run();
    try {
      const result = body();
      (nested ? s.release : s.commit).run();
      return result;
    } catch (error) {
      this.undo(nested);
      throw error;
    }
  }

  read(key: string): StoredRow | undefined {
    const row = this.ready().select.get(key) as Row | undefined;
    return row === undefined ? undefined : { state: decodeState(row.state), atUs: Number(row.at_us) };
  }

  write(row: { key: string; state: State; expiresAtUs: number; atUs: number }): void {
    this.ready().upsert.run(row.key, encodeState(row.state), row.expiresAtUs, row.atUs);
  }

  remove(key: string): void {
    this.ready().remove.run(key);
  }

  /**
   * Deletes the rows among the next few in key order that expired over a minute ago (see
   * PRUNE_GRACE_US), then remembers where it stopped; past the last row it starts again from the first.
   * Expired on the earlier of the deciding call's clock and the system clock: a limiter whose `clock`
   * runs ahead would otherwise delete rows that other limiters, on the system clock, still count on.
   */
  afterCreate(nowUs: number): void {
    const s = this.ready();
    const before = Math.min(nowUs, systemClock.nowUs()) - PRUNE_GRACE_US;
    const end = s.sweepEnd.get(this.sweepFrom, SWEEP_ROWS - 1) as { key: string } | undefined;
    if (end === undefined) {
      s.sweepRest.run(this.sweepFrom, before);
      this.sweepFrom = '';
    } else {
      s.sweepRange.run(this.sweepFrom, end.key, before);
      this.sweepFrom = end.key;
    }
  }

  private undo(nested: boolean): void {
    try {
      if (nested) {
        this.statements?.rollbackTo.run();
        this.statements?.release.run();
      } else if (this.database.inTransaction !== false) {
        this.statements?.rollback.run();
      }
    } catch {
      // The transaction is already gone (SQLite rolls back by itself on some errors); nothing to undo.
    }
  }

  private configureConnection(): void {
    // Per connection: wait this long for another process's lock instead of failing at once.
    this.database.exec(`PRAGMA busy_timeout = ${this.busyTimeoutMs}`);
  }

  /** Prepares the statements on first use (the table must exist: `migrate()`). */
  private ready(): Statements {
    if (this.statements !== undefined) return this.statements;
    const db = this.database;
    const t = this.quoted;
    try {
      this.configureConnection();
      this.statements = {
        select: db.prepare(`SELECT state, at_us FROM ${t} WHERE key = ?`),
        upsert: db.prepare(
          `INSERT INTO ${t} (key, state, expires_at, at_us) VALUES (?, ?, ?, ?)
           ON CONFLICT (key) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at,
             at_us = excluded.at_us`,
        ),
        remove: db.prepare(`DELETE FROM ${t} WHERE key = ?`),
        sweepEnd: db.prepare(`SELECT key FROM ${t} WHERE key > ? ORDER BY key LIMIT 1 OFFSET ?`),
        sweepRange: db.prepare(`DELETE FROM ${t} WHERE key > ? AND key <= ? AND expires_at <= ?`),
        sweepRest: db.prepare(`DELETE FROM ${t} WHERE key > ? AND expires_at <= ?`),
        beginWrite: db.prepare('BEGIN IMMEDIATE'),
        beginRead: db.prepare('BEGIN DEFERRED'),
        commit: db.prepare('COMMIT'),
        rollback: db.prepare('ROLLBACK'),
        savepoint: db.prepare('SAVEPOINT floodgate'),
        release: db.prepare('RELEASE floodgate'),
        rollbackTo: db.prepare('ROLLBACK TO floodgate'),
      };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new FloodgateError(
        'ERR_STORE_UNAVAILABLE',
        /no such table/i.test(message)
          ? `the sqlite store's table ${JSON.stringify(this.table)} does not exist: call store.migrate() first`
          : `the sqlite store could not prepare its statements: ${message}`,
        { cause: error },
      );
    }
    return this.statements;
  }
}

/** A state as a BLOB of little-endian doubles: exact, and cheap to read back. */
function encodeState(state: State): Buffer {
  const buffer = Buffer.allocUnsafe(state.length * 8);
  for (let i = 0; i < state.length; i++) buffer.writeDoubleLE(state[i] as number, i * 8);
  return buffer;
}

/** A row as `select` reads it. */
interface Row {
  state: Uint8Array;
  /** When the row was last written, µs on the clock of the process that wrote it. */
  at_us: number | bigint;
}

function decodeState(blob: Uint8Array): State {
  const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  const state = new Array<number>(blob.byteLength >>> 3);
  for (let i = 0; i < state.length; i++) state[i] = view.getFloat64(i * 8, true);
  return state;
}
