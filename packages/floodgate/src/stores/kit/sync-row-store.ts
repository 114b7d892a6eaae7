import { invalid } from '../../errors.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { type Evaluation, emptyEvaluation, type State } from '../../model/types.js';
import type { CancelRequest, RefundRequest, SettleRequest, StoreRequest, StoreResult, SyncStore } from '../store.js';
import { type LateCall, runCall, type StoreCall } from './calls.js';
import { stateKeys } from './keys.js';
import { checkGrain, checkName, checkOptionsObject, hasMethods } from './options.js';
import { promised } from './promised.js';
import type { RowWrite, StoredRow } from './row-store.js';
import { callerNowUs, expiryOf } from './time.js';

/**
 * What a database reached synchronously must offer for {@link syncRowStore}: transactions, and rows read,
 * written and deleted on the connection that runs them.
 */
export interface SyncRowDatabase {
  /**
   * Runs `body` in one transaction: commits when it returns, rolls back when it throws (and throws on).
   * With `write`, no other writer may change the rows it reads until it ends, not even create one
   * (SQLite: `BEGIN IMMEDIATE`); without, its reads need only be consistent with each other (`BEGIN`).
   * Nested in a transaction of the caller's, a savepoint.
   */
  transaction<T>(write: boolean, body: () => T): T;
  /** The row under `key`, or undefined. Its state may be the database's own buffer until the next call. */
  read(key: string): StoredRow | undefined;
  /** Inserts or replaces a row. Its `state` is valid during the call only: encode it, never keep it. */
  write(row: RowWrite): void;
  /** Deletes the row under `key`, if any. */
  remove(key: string): void;
  /** Optional: called once, last, in a transaction that created a row: delete a few expired rows. */
  afterCreate?(nowUs: number): void;
}

/** Options of {@link syncRowStore}. */
export interface SyncRowStoreOptions {
  readonly database: SyncRowDatabase;
  /** The store's name in logs, metrics and errors. @default 'rows' */
  readonly name?: string;
  /** Expiries are rounded up to a multiple of this many µs (fewer index updates for busy keys). @default 1 */
  readonly expiryGrainUs?: number;
}

/** A store built by {@link syncRowStore}: every operation synchronous too. */
export interface SyncRowStore extends SyncStore {
  cancel(request: CancelRequest): Promise<boolean>;
  refund(request: RefundRequest): Promise<void>;
  cancelSync(request: CancelRequest): boolean;
  refundSync(request: RefundRequest): void;
  settle(request: SettleRequest): Promise<void>;
  settleSync(request: SettleRequest): void;
  /** Nothing to release: the database is the caller's. */
  close(): Promise<void>;
}

/**
 * The transaction (row lock) store for a database reached synchronously (SQLite through better-sqlite3):
 * one row per policy and user key; each call is one transaction that reads its rows, runs the model and
 * writes what changed, so it is exact by construction and decided all-or-nothing. A `check` of one
 * policy reads one row, consistent by itself, without a transaction. Limiters on it offer `limitSync`.
 * No clock of its own: the limiter passes the caller's, and a call runs at the latest of that time and
 * the times its rows were written, so time never goes back on a key.
 */
export function syncRowStore(options: SyncRowStoreOptions): SyncRowStore {
  checkOptionsObject(options, 'syncRowStore options');
  const db = options.database;
  if (!hasMethods(db, 'transaction', 'read', 'write', 'remove')) {
    throw invalid('ERR_INVALID_OPTION', 'database', db, 'an object with transaction(), read(), write() and remove()');
  }
  const name = checkName(options.name ?? 'rows');
  const grainUs = checkGrain(options.expiryGrainUs ?? 1);
  /** Reused by `decideSync`: the limiter reads them before the next call. */
  const scratch: Evaluation[] = [];
  /** The time the last call ran at: the caller's, or a later one a row was written at. */
  let decidedAt = 0;
  /** Reused: how long after the call each state it writes is untouched again. */
  const untouchedAfterUs: number[] = [];

  /** Runs one call inside its transaction (or alone, for a read of one row). */
  function apply(call: StoreCall, keys: readonly string[], requested: number, outs: Evaluation[]): boolean | undefined {
    const states = new Array<State | undefined>(keys.length);
    let nowUs = requested;
    for (let i = 0; i < keys.length; i++) {
      const row = db.read(keys[i] as string);
      states[i] = row?.state;
      if (row !== undefined && row.atUs > nowUs) nowUs = row.atUs;
    }
    decidedAt = nowUs;
    const verdict = runCall(call, states, nowUs, outs, untouchedAfterUs);
    if (call.op === 'decide' && !call.request.commit) return verdict;
    let created = false;
    for (let i = 0; i < keys.length; i++) {
      const out = outs[i] as Evaluation;
      if (out.next === undefined) continue;
      db.write({
        key: keys[i] as string,
        state: out.next,
        expiresAtUs: expiryOf(nowUs, untouchedAfterUs[i] as number, grainUs),
        atUs: nowUs,
      });
      if (states[i] === undefined) created = true;
    }
    if (created) db.afterCreate?.(nowUs);
    return verdict;
  }

  function decideSync(request: StoreRequest): StoreResult {
    const requested = callerNowUs(name, request.nowUs);
    const keys = stateKeys(request.prefix, request.key, request.policies);
    const outs = scratch;
    while (outs.length < keys.length) outs.push(emptyEvaluation());
    outs.length = keys.length;
    const call: StoreCall = { op: 'decide', request };
    const allowed = (
      request.commit || keys.length > 1
        ? db.transaction(request.commit, () => apply(call, keys, requested, outs))
        : apply(call, keys, requested, outs)
    ) as boolean;
    return decidedAt === requested ? { allowed, evaluations: outs } : { allowed, evaluations: outs, nowUs: decidedAt };
  }

  function cancelSync(request: CancelRequest): boolean {
    const requested = callerNowUs(name, request.nowUs);
    const keys = stateKeys(request.prefix, request.key, request.policies);
    const outs = keys.map(() => emptyEvaluation());
    const call: StoreCall = { op: 'cancel', request };
    return db.transaction(true, () => apply(call, keys, requested, outs)) as boolean;
  }

  function refundSync(request: RefundRequest): void {
    lateSync({ op: 'refund', request });
  }

  function settleSync(request: SettleRequest): void {
    lateSync({ op: 'settle', request });
  }

  function lateSync(call: LateCall): void {
    const requested = callerNowUs(name, call.request.nowUs);
    const keys = stateKeys(call.request.prefix, call.request.key, call.request.policies);
    const outs = keys.map(() => emptyEvaluation());
    db.transaction(true, () => apply(call, keys, requested, outs));
  }

  function resetSync(prefix: string, key: string, policies: readonly CompiledPolicy[]): void {
    if (policies.length === 0) return;
    const keys = stateKeys(prefix, key, policies);
    db.transaction(true, () => {
      for (const k of keys) db.remove(k);
    });
  }

  return withPromises({ name, hasOwnClock: false, decideSync, cancelSync, refundSync, settleSync, resetSync });
}

/** The promise methods of a synchronous store, over its synchronous ones. */
function withPromises(
  sync: Pick<
    SyncRowStore,
    'name' | 'hasOwnClock' | 'decideSync' | 'cancelSync' | 'refundSync' | 'settleSync' | 'resetSync'
  >,
): SyncRowStore {
  return {
    ...sync,
    decide: (request) =>
      promised(() => {
        const result = sync.decideSync(request);
        // The async caller may hold the result across other calls: its own copies of the evaluations.
        const evaluations = result.evaluations.map((e) => ({ ...e, next: undefined }));
        return result.nowUs === undefined
          ? { allowed: result.allowed, evaluations }
          : { allowed: result.allowed, evaluations, nowUs: result.nowUs };
      }),
    cancel: (request) => promised(() => sync.cancelSync(request)),
    refund: (request) => promised(() => sync.refundSync(request)),
    settle: (request) => promised(() => sync.settleSync(request)),
    reset: (prefix, key, policies) => promised(() => sync.resetSync(prefix, key, policies)),
    close: () => Promise.resolve(),
  };
}
