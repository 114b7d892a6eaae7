import { FloodgateError, invalid } from '../../errors.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { decide, inspect } from '../../model/decide.js';
import { refundPolicy } from '../../model/refund.js';
import { cancelReservation } from '../../model/reservation.js';
import { type Evaluation, emptyEvaluation, type State } from '../../model/types.js';
import { expiryOf, PRUNE_GRACE_US, quoteIdentifier, stateKeys, validateIdentifier } from '../sql/common.js';
import type { CancelRequest, RefundRequest, StoreRequest, StoreResult, SyncStore } from '../store.js';

/** The part of a better-sqlite3 statement the store uses. */
export interface SqliteStatement {
  run(...params: unknown[]): unknown;
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/** The part of a better-sqlite3 `Database` the store uses (a structural seam: any compatible object works). */
export interface SqliteDatabase {
  prepare(sql: string): SqliteStatement;
  exec(sql: string): unknown;
  /** True while a transaction is open on this connection; the store then nests in a savepoint. */
  readonly inTransaction?: boolean;
}

/** Options of {@link sqliteStore}. */
export interface SqliteStoreOptions {
  /** An open better-sqlite3 database (the store never closes it). */
  database: SqliteDatabase;
  /** Table holding the state, created by `migrate()`: `[a-z_][a-z0-9_]*`, at most 40 characters. @default 'floodgate_state' */
  table?: string;
  /** How long a decision waits for another process's write lock before failing, ms. @default 5000 */
  busyTimeoutMs?: number;
}

/** The SQLite store: synchronous, so limiters on it offer `limitSync` as well as `limit`. */
export interface SqliteStore extends SyncStore {
  readonly name: 'sqlite';
  /** The table name. */
  readonly table: string;
  /**
   * Creates the table if missing and turns on WAL mode (several processes read and write one file
   * concurrently). Idempotent; call it once at startup, before the first decision.
   */
  migrate(): void;
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
 * State in a SQLite file through better-sqlite3. Each decision is one short `BEGIN IMMEDIATE` transaction
 * that reads the key's rows, runs the TypeScript model itself (so it is exact by construction) and
 * writes the new states: the write lock makes decisions from several processes on one file strictly
 * serial, and WAL mode keeps readers unblocked. State survives restarts.
 *
 * Expired rows are deleted by a sweep that moves through the table in key order, a few rows at a time,
 * each time a decision creates a row (only new rows make the table grow, so it keeps up), a minute after
 * they expire. There is no index on expiry: every write would have to update it, and pages written are
 * what a SQLite commit costs.
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
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'sqliteStore options', options, 'an object');
  }
  const database = options.database;
  if (
    typeof database !== 'object' ||
    database === null ||
    typeof database.prepare !== 'function' ||
    typeof database.exec !== 'function'
  ) {
    throw invalid('ERR_INVALID_OPTION', 'database', database, 'a better-sqlite3 Database');
  }
  const table = validateIdentifier('table', options.table ?? 'floodgate_state');
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
  if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
    throw invalid('ERR_INVALID_OPTION', 'busyTimeoutMs', options.busyTimeoutMs, 'an integer number of ms ≥ 0');
  }
  return new SqliteStoreImpl(database, table, busyTimeoutMs);
}

class SqliteStoreImpl implements SqliteStore {
  readonly name = 'sqlite' as const;
  readonly hasOwnClock = false;
  private statements: Statements | undefined;
  private readonly quoted: string;
  /** Where the sweep for expired rows goes on (the key it stopped after). */
  private sweepFrom = '';
  /** Reused by `decideSync`: the limiter reads them before the next call. */
  private readonly scratch: Evaluation[] = [];
  /** The verdict of the last `apply`. */
  private allowed = false;

  constructor(
    private readonly database: SqliteDatabase,
    readonly table: string,
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

  decide(request: StoreRequest): Promise<StoreResult> {
    try {
      const result = this.decideSync(request);
      const evaluations = result.evaluations.map((e) => ({ ...e }));
      return Promise.resolve(
        result.nowUs === undefined
          ? { allowed: result.allowed, evaluations }
          : { allowed: result.allowed, evaluations, nowUs: result.nowUs },
      );
    } catch (error) {
      return Promise.reject(error);
    }
  }

  decideSync(request: StoreRequest): StoreResult {
    const s = this.ready();
    const evaluations = this.scratch;
    while (evaluations.length < request.policies.length) evaluations.push(emptyEvaluation());
    evaluations.length = request.policies.length;
    // A write decision takes the write lock before reading, so no other process decides in between.
    // A read of one row is consistent by itself; several rows are read in one (deferred) transaction.
    const transaction = request.commit || request.policies.length > 1;
    const nested = transaction && this.database.inTransaction === true;
    if (transaction) (nested ? s.savepoint : request.commit ? s.beginWrite : s.beginRead).run();
    try {
      const nowUs = this.apply(s, request, evaluations);
      if (transaction) (nested ? s.release : s.commit).run();
      const allowed = this.allowed;
      return nowUs === request.nowUs ? { allowed, evaluations } : { allowed, evaluations, nowUs };
    } catch (error) {
      if (transaction) this.undo(nested);
      throw error;
    }
  }

  cancel(request: CancelRequest): Promise<boolean> {
    try {
      return Promise.resolve(this.cancelSync(request));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Gives back what the model's `cancelReservation` gives back, in one write transaction. */
  cancelSync(request: CancelRequest): boolean {
    const { policies } = request;
    if (request.nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the sqlite store needs the caller’s clock (nowUs)');
    }
    const s = this.ready();
    const keys = stateKeys(request.prefix, request.key, policies);
    const outs: Evaluation[] = policies.map(() => emptyEvaluation());
    const nested = this.database.inTransaction === true;
    (nested ? s.savepoint : s.beginWrite).run();
    try {
      const rows = keys.map((key) => s.select.get(key) as Row | undefined);
      const nowUs = latest(request.nowUs, rows);
      const states = rows.map(decodeState);
      const all = cancelReservation(policies, states, nowUs, request.reservation, outs);
      for (let i = 0; i < keys.length; i++) {
        const out = outs[i] as Evaluation;
        if (out.next !== undefined) {
          s.upsert.run(keys[i], encodeState(out.next), expiryOf(nowUs, out.resetAfterUs), nowUs);
        }
      }
      (nested ? s.release : s.commit).run();
      return all;
    } catch (error) {
      this.undo(nested);
      throw error;
    }
  }

  refund(request: RefundRequest): Promise<void> {
    try {
      this.refundSync(request);
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Gives back a lease's unused units as the model's `refundPolicy` says, in one write transaction. */
  refundSync(request: RefundRequest): void {
    const { policies } = request;
    if (request.nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the sqlite store needs the caller’s clock (nowUs)');
    }
    const s = this.ready();
    const keys = stateKeys(request.prefix, request.key, policies);
    const nested = this.database.inTransaction === true;
    (nested ? s.savepoint : s.beginWrite).run();
    try {
      const rows = keys.map((key) => s.select.get(key) as Row | undefined);
      const nowUs = latest(request.nowUs, rows);
      for (let i = 0; i < keys.length; i++) {
        const c = policies[i] as CompiledPolicy;
        const state = decodeState(rows[i]);
        const next = refundPolicy(c, state, nowUs, request.leasedAtUs, request.leased, request.unused);
        if (next !== undefined) {
          s.upsert.run(keys[i], encodeState(next), expiryOf(nowUs, inspect(c, next, nowUs).resetAfterUs), nowUs);
        }
      }
      (nested ? s.release : s.commit).run();
    } catch (error) {
      this.undo(nested);
      throw error;
    }
  }

  reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
    try {
      this.resetSync(prefix, key, policies);
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  resetSync(prefix: string, key: string, policies: readonly CompiledPolicy[]): void {
    const s = this.ready();
    const nested = this.database.inTransaction === true;
    (nested ? s.savepoint : s.beginWrite).run();
    try {
      for (const row of stateKeys(prefix, key, policies)) s.remove.run(row);
      (nested ? s.release : s.commit).run();
    } catch (error) {
      this.undo(nested);
      throw error;
    }
  }

  /**
   * One decision inside an open transaction: read the rows, run the model, write what changed. Returns
   * the time it decided at (the caller's, or a later one a row was written at); the verdict is left in
   * `this.allowed`.
   */
  private apply(s: Statements, request: StoreRequest, evaluations: Evaluation[]): number {
    const { policies } = request;
    if (request.nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the sqlite store needs the caller’s clock (nowUs)');
    }
    const keys = stateKeys(request.prefix, request.key, policies);
    const rows = keys.map((key) => s.select.get(key) as Row | undefined);
    const nowUs = latest(request.nowUs, rows);
    const states = rows.map(decodeState);
    this.allowed = decide(policies, states, nowUs, request.cost, request, evaluations);
    if (request.commit) {
      let created = false;
      for (let i = 0; i < keys.length; i++) {
        const out = evaluations[i] as Evaluation;
        if (out.next === undefined) continue;
        s.upsert.run(keys[i], encodeState(out.next), expiryOf(nowUs, out.resetAfterUs), nowUs);
        if (states[i] === undefined) created = true;
      }
      if (created) this.sweep(s, nowUs);
    }
    return nowUs;
  }

  /** Never closes the database: it is the caller's. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Deletes the rows among the next few in key order that expired over a minute ago (see
   * PRUNE_GRACE_US), then remembers where it stopped; past the last row it starts again from the first.
   */
  private sweep(s: Statements, nowUs: number): void {
    const before = nowUs - PRUNE_GRACE_US;
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

/**
 * The time to decide at: the caller's, unless a row was written later (by a process whose clock runs
 * ahead). Time never goes back on a key, so a window that rolled over stays rolled over.
 */
function latest(nowUs: number, rows: readonly (Row | undefined)[]): number {
  let at = nowUs;
  for (const row of rows) {
    if (row !== undefined && Number(row.at_us) > at) at = Number(row.at_us);
  }
  return at;
}

function decodeState(row: Row | undefined): State | undefined {
  if (row === undefined || row === null) return undefined;
  const blob = row.state;
  const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  const state = new Array<number>(blob.byteLength >>> 3);
  for (let i = 0; i < state.length; i++) state[i] = view.getFloat64(i * 8, true);
  return state;
}
