import { systemClock } from '../../clock.js';
import { FloodgateError, invalid } from '../../errors.js';
import { encodeKey } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { decide } from '../../model/decide.js';
import { KIND_METER } from '../../model/kinds.js';
import { meterCharge } from '../../model/meter.js';
import type { State } from '../../model/types.js';
import { type Evaluation, emptyEvaluation } from '../../model/types.js';
import { decideWithPermitSync, detachedResult } from '../kit/holding.js';
import { stateKey } from '../kit/keys.js';
import { booleanOption } from '../kit/options.js';
import { promised } from '../kit/promised.js';
import type { StoredRow } from '../kit/row-store.js';
import { type SyncRowDatabase, type SyncRowStore, syncRowStore } from '../kit/sync-row-store.js';
import { callerNowUs } from '../kit/time.js';
import { EXPIRY_GRAIN_US, expiryOf, PRUNE_GRACE_US, quoteIdentifier, validateIdentifier } from '../sql/common.js';
import type { HeldResult, PermitClaim, StoreRequest, StoreResult } from '../store.js';
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
  /**
   * A `limit` under a single meter policy (GCRA, token bucket with continuous refill, leaky bucket) that
   * the meter admits runs as one statement instead of a transaction of four (see `meterStatement`); it
   * decides exactly the same. @default true
   */
  fastPath?: boolean;
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
  meter: SqliteStatement;
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
  const fastPath = booleanOption('fastPath', options.fastPath ?? true);
  const rows = new SqliteRows(database, table, busyTimeoutMs);
  const general = syncRowStore({ name: 'sqlite', database: rows, expiryGrainUs: EXPIRY_GRAIN_US });
  let own: SqlitePermitStore | undefined;
  const permits = () => {
    own ??= sqlitePermitStore({ database, table: permitsTable, busyTimeoutMs });
    return own;
  };
  const decideSync = fastPath
    ? (request: StoreRequest): StoreResult => meterDecide(rows, request) ?? general.decideSync(request)
    : general.decideSync;
  return {
    ...general,
    name: 'sqlite',
    table,
    get permits() {
      return permits();
    },
    migrate: () => rows.migrate(),
    decideSync,
    decide: fastPath
      ? (request) =>
          promised(() => {
            const result = decideSync(request);
            // The async caller may hold the result across other calls: its own copies of the evaluations.
            const evaluations = result.evaluations.map((e) => ({ ...e, next: undefined }));
            return result.nowUs === undefined
              ? { allowed: result.allowed, evaluations }
              : { allowed: result.allowed, evaluations, nowUs: result.nowUs };
          })
      : general.decide,
    // One write transaction around both: the permit's and the decision's own nest in it as savepoints.
    decideWithPermit(request, claim) {
      try {
        const decide = (r: StoreRequest) => detachedResult(general.decideSync(r));
        return Promise.resolve(rows.transaction(true, () => decideWithPermitSync(decide, permits(), request, claim)));
      } catch (error) {
        return Promise.reject(error);
      }
    },
  };
}

/**
 * A meter call the statement did not admit, most often a denial that writes nothing: the row read alone
 * (one statement, consistent by itself, as a `check` reads it) and decided by the model. A denial that
 * writes nothing is a decision at the time of that read; anything else (admitted after all, the state
 * having changed meanwhile; a penalty box to start) is undefined, and the general path decides the call.
 */
function meterDenied(rows: SqliteRows, request: StoreRequest, key: string, requested: number): StoreResult | undefined {
  const row = rows.read(key);
  const nowUs = row === undefined || row.atUs <= requested ? requested : row.atUs;
  const allowed = decide(
    request.policies,
    [row?.state],
    nowUs,
    request.cost,
    { commit: true, maxDelayUs: request.maxDelayUs },
    METER_OUTS,
  );
  if (allowed || (METER_OUTS[0] as Evaluation).next !== undefined) return undefined;
  return nowUs === requested ? { allowed, evaluations: METER_OUTS } : { allowed, evaluations: METER_OUTS, nowUs };
}

/** The model's scratch room for the meter statement's report, reused: the limiter reads it before the next call. */
const METER_OUTS: Evaluation[] = [emptyEvaluation()];

/**
 * A `limit` under one meter policy, decided by the meter statement when it can: the result, or undefined
 * when the call is of another shape, or the statement did not admit it and it is no denial that writes
 * nothing (`meterDenied`): a penalty box to start, a row of an earlier version (a BLOB) the meter admits.
 * The general path then decides the call, in a transaction of its own: nothing was written.
 */
function meterDecide(rows: SqliteRows, request: StoreRequest): StoreResult | undefined {
  const policies = request.policies;
  if (policies.length !== 1 || !request.commit || !(request.cost > 0)) return undefined;
  const c = policies[0] as CompiledPolicy;
  if (c.kind !== KIND_METER) return undefined;
  const charge = meterCharge(request.cost, c.a);
  if (!(charge <= c.b)) return undefined;
  const requested = callerNowUs('sqlite', request.nowUs);
  const room = c.b + (c.c === 1 ? 0 : request.maxDelayUs) - charge;
  const key = stateKey(request.prefix, encodeKey(request.key), c);
  const written = rows.meterWrite(key, requested, charge, room);
  if (written === undefined) return meterDenied(rows, request, key, requested);
  const nowUs = written.atUs;
  // The state decided on: its TAT is the one written less the charge (the model's max(TAT, now), which
  // decides exactly as the TAT read).
  const allowed = decide(
    policies,
    [[0, written.tat - charge]],
    nowUs,
    request.cost,
    { commit: true, maxDelayUs: request.maxDelayUs },
    METER_OUTS,
  );
  if (!allowed) {
    throw new FloodgateError(
      'ERR_STORE_PROTOCOL',
      `the sqlite meter statement admitted a call the model denies (TAT ${String(written.tat)} at ${String(nowUs)} µs)`,
    );
  }
  if (written.created) rows.afterCreate(nowUs);
  return nowUs === requested ? { allowed, evaluations: METER_OUTS } : { allowed, evaluations: METER_OUTS, nowUs };
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
   * One admitted meter call, as one statement (`meterStatement`): the TAT written, the time decided at,
   * and whether the row was created; undefined when the statement wrote nothing.
   */
  meterWrite(
    key: string,
    requestedUs: number,
    charge: number,
    room: number,
  ): { tat: number; atUs: number; created: boolean } | undefined {
    const fresh = requestedUs + charge;
    const row = this.ready().meter.get(key, fresh, expiryOf(requestedUs, charge), requestedUs, room) as
      | { type: string; state: number | bigint; at_us: number | bigint }
      | undefined;
    if (row === undefined) return undefined;
    return { tat: Number(row.state), atUs: Number(row.at_us), created: row.type === 'integer' };
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
        meter: db.prepare(meterStatement(t)),
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

/**
 * A state as SQLite keeps it: `[0, x]` with x a whole number (a meter's TAT, untouched by a penalty box)
 * as the number x itself, which the meter statement computes with; any other as a BLOB of little-endian
 * doubles: exact, and cheap to read back.
 */
function encodeState(state: State): Buffer | number {
  if (state.length === 2 && state[0] === 0 && Number.isSafeInteger(state[1])) return state[1] as number;
  const buffer = Buffer.allocUnsafe(state.length * 8);
  for (let i = 0; i < state.length; i++) buffer.writeDoubleLE(state[i] as number, i * 8);
  return buffer;
}

/** A row as `select` reads it. */
interface Row {
  state: Uint8Array | number | bigint;
  /** When the row was last written, µs on the clock of the process that wrote it. */
  at_us: number | bigint;
}

function decodeState(blob: Uint8Array | number | bigint): State {
  if (typeof blob !== 'object') return [0, Number(blob)];
  const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  const state = new Array<number>(blob.byteLength >>> 3);
  for (let i = 0; i < state.length; i++) state[i] = view.getFloat64(i * 8, true);
  return state;
}

/**
 * The meter statement: a `limit` under one meter policy that the meter admits, in one statement instead
 * of a transaction of four (`BEGIN IMMEDIATE`, read, write, `COMMIT`): three quarters of what such a call
 * cost was SQLite's work on those four statements. One statement is a transaction of its own, and one that
 * writes takes the write lock before it reads, so it is as serial as `BEGIN IMMEDIATE`.
 *
 * It computes the model's transition for an admitted call (model/meter.ts, as the PostgreSQL meter
 * statement does, stores/postgres/meter-fast.ts): at `now`, the later of the caller's time and the time
 * the row was written (`at_us`, so time never goes back on a key), the call is admitted when
 * `max(TAT, now) + charge − now − τ ≤ slack`, that is `TAT ≤ now + room` with `room = τ + slack − charge`
 * (at least 0: a charge beyond τ never comes here), and the TAT becomes `max(TAT, now) + charge`, the row
 * expiring at the TAT rounded up to the minute, as `expiryOf` rounds it. Every number is a whole µs below
 * 2^53, so SQLite's doubles and integers compute them exactly.
 *
 * It writes only what it admits, and only on a state it reads: a TAT kept as a number (`encodeState`). A
 * denial, a penalty box or a state kept as a BLOB leave the row as it was and return no row, and the call
 * goes the general path. A key that holds nothing gets its row inserted, admitted (the charge fits τ).
 *
 * Returns the row written: its TAT, its time, and `type`: SQLite's `RETURNING` sees only the row written,
 * so the insert keeps the TAT as an INTEGER and the update as a REAL (the same number), which tells a row
 * created (a few expired rows are then swept, as the general path does) from one updated.
 *
 * Parameters: the key; the TAT, the expiry and the time of a new row (the caller's time, plus the charge);
 * room. The charge is the new row's TAT less its time.
 */
function meterStatement(table: string): string {
  const now = 'max(at_us, excluded.at_us)';
  const tat = `max(state, ${now}) + (excluded.state - excluded.at_us)`;
  return `INSERT INTO ${table} (key, state, expires_at, at_us) VALUES (?, CAST(? AS INTEGER), ?, ?)
ON CONFLICT (key) DO UPDATE SET state = CAST(${tat} AS REAL),
  expires_at = (CAST(${tat} AS INTEGER) + ${EXPIRY_GRAIN_US - 1}) / ${EXPIRY_GRAIN_US} * ${EXPIRY_GRAIN_US},
  at_us = ${now}
WHERE typeof(state) IN ('integer', 'real') AND state <= ${now} + ?
RETURNING typeof(state) AS type, state, at_us`;
}
