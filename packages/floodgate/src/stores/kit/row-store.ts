import { invalid } from '../../errors.js';
import type { State } from '../../model/types.js';
import type { Store } from '../store.js';
import { callFailed, createBatcher } from './batcher.js';
import type { StoreCall } from './calls.js';
import { recordKey, stateKeys } from './keys.js';
import { checkGrain, checkName, checkOptionsObject, hasMethods } from './options.js';
import { expiryOf } from './time.js';
import { applyCall, type CallOutcome, storeOfCalls, type WorkingSet } from './working-set.js';

/** One policy's state of one user key, as a row store reads it. */
export interface StoredRow {
  readonly state: State;
  /**
   * When it was written, µs on the writer's clock: a call on it runs at this time if the caller's clock
   * lags, so time never goes back on a key. 0 when unknown.
   */
  readonly atUs: number;
}

/** One row to write (insert or replace). */
export interface RowWrite extends StoredRow {
  /** Its key: `stateKey(prefix, encodeKey(key), policy)`. */
  readonly key: string;
  /** When it may be deleted, µs on the writer's clock: its state is untouched again by then. */
  readonly expiresAtUs: number;
}

/** The rows of one transaction, as {@link RowDatabase.transaction} hands them to the builder. */
export interface RowTransaction {
  /** The rows under `keys` (sorted), in that order; undefined for a key without one. */
  read(keys: readonly string[]): Promise<readonly (StoredRow | undefined)[]>;
  /** Inserts or replaces rows (sorted by key). */
  write(rows: readonly RowWrite[]): Promise<void>;
  /** Deletes the rows under `keys` (sorted). */
  remove(keys: readonly string[]): Promise<void>;
  /** Optional: called once, last, in a transaction that created a row: delete a few expired rows. */
  afterCreate?(nowUs: number): Promise<void>;
}

/** What a database must offer for {@link rowStore}: transactions over rows. */
export interface RowDatabase {
  /**
   * Runs `body` in one transaction, commits it when `body` resolves and rolls it back when it rejects
   * (then rejects with that error). With `write`, no other writer may change the rows of `users` (the
   * user keys of the calls, as `recordKey` gives them, sorted) until it ends, not even create one: take
   * a lock on each in this order (`pg_advisory_xact_lock(hashtextextended(key, 0))`, `BEGIN IMMEDIATE`),
   * since `SELECT … FOR UPDATE` locks no row that does not exist yet. Without `write`, the reads need
   * only be consistent with each other (one statement is).
   */
  transaction<T>(write: boolean, users: readonly string[], body: (rows: RowTransaction) => Promise<T>): Promise<T>;
}

/** Options of {@link rowStore}. */
export interface RowStoreOptions {
  readonly database: RowDatabase;
  /** The store's name in logs, metrics and errors. @default 'rows' */
  readonly name?: string;
  /** Expiries are rounded up to a multiple of this many µs (fewer index updates for busy keys). @default 1 */
  readonly expiryGrainUs?: number;
  /** Transactions in flight at once (keep it at most the pool's size). @default 4 */
  readonly maxInFlight?: number;
  /** Most calls in one transaction. @default 64 */
  readonly maxBatchSize?: number;
  /** Most calls waiting for a transaction; one more is refused with `ERR_QUEUE_FULL`. @default 100000 */
  readonly maxQueued?: number;
}

/** A store built by {@link rowStore}. */
export interface RowStore extends Store {
  /** Refuses new calls and resolves once the calls already made are answered. The database stays open. */
  close(): Promise<void>;
}

interface Queued {
  readonly call: StoreCall;
  /** The call's user key, as `recordKey` gives it. */
  readonly user: string;
  /** The rows of its policies, in policy order. */
  readonly keys: readonly string[];
}

/**
 * A store on any database with transactions that lock (SQL databases: `BEGIN`, locks, `COMMIT`). One
 * row per policy and user key; a transaction locks the user keys of its calls, reads their rows, runs
 * the model on them, writes what changed, and commits, so each call is decided all-or-nothing and calls
 * from several processes on one key are strictly serial. Calls that arrive while `maxInFlight`
 * transactions are in flight wait and go together in the next one (one commit for all of them); calls on
 * one key are decided in the order they were made. No clock of its own: the limiter passes the caller's.
 *
 * For a database reached synchronously (SQLite through better-sqlite3), {@link syncRowStore} does the same
 * without promises.
 */
export function rowStore(options: RowStoreOptions): RowStore {
  checkOptionsObject(options, 'rowStore options');
  const database = options.database;
  if (!hasMethods(database, 'transaction')) {
    throw invalid('ERR_INVALID_OPTION', 'database', database, 'an object with transaction()');
  }
  const name = checkName(options.name ?? 'rows');
  const grainUs = checkGrain(options.expiryGrainUs ?? 1);

  async function run(tx: RowTransaction, batch: readonly Queued[]): Promise<unknown[]> {
    const keys = [...new Set(batch.flatMap((q) => q.keys))].sort();
    const rows = await tx.read(keys);
    const slots: WorkingSet = new Map();
    let at = 0;
    keys.forEach((key, i) => {
      const row = rows[i];
      if (row !== undefined) slots.set(key, { state: row.state, untilUs: 0, atUs: row.atUs, dirty: false });
    });
    const outcomes = batch.map((q) => {
      try {
        return applyCall(q.call, q.keys, slots);
      } catch (error) {
        return callFailed(error);
      }
    });
    const writes: RowWrite[] = [];
    const removes: string[] = [];
    let created = false;
    keys.forEach((key, i) => {
      const slot = slots.get(key);
      if (slot === undefined || !slot.dirty) return;
      if (slot.state === undefined) {
        removes.push(key);
        return;
      }
      writes.push({ key, state: slot.state, expiresAtUs: expiryOf(slot.untilUs, 0, grainUs), atUs: slot.atUs });
      if (slot.atUs > at) at = slot.atUs;
      if (rows[i] === undefined) created = true;
    });
    if (removes.length > 0) await tx.remove(removes);
    if (writes.length > 0) await tx.write(writes);
    if (created) await tx.afterCreate?.(at);
    return outcomes;
  }

  const batcher = createBatcher<Queued, CallOutcome>({
    name,
    key: (q) => q.user,
    maxInFlight: options.maxInFlight ?? 4,
    maxBatchSize: options.maxBatchSize ?? 64,
    ...(options.maxQueued === undefined ? {} : { maxQueued: options.maxQueued }),
    send(batch) {
      const write = batch.some((q) => q.call.op !== 'decide' || q.call.request.commit);
      const users = [...new Set(batch.map((q) => q.user))].sort();
      return database.transaction(write, users, (tx) => run(tx, batch)) as Promise<CallOutcome[]>;
    },
  });

  return storeOfCalls(
    name,
    (call) =>
      batcher.submit({
        call,
        user: recordKey(call.request.prefix, call.request.key),
        keys: stateKeys(call.request.prefix, call.request.key, call.request.policies),
      }),
    () => batcher.close(),
  );
}
