import { FloodgateError, invalid } from '../../errors.js';
import type { Store } from '../store.js';
import { type CallFailure, callFailed, createBatcher } from './batcher.js';
import type { StoreCall } from './calls.js';
import { policyId, recordKey } from './keys.js';
import { checkOptionsObject, hasMethods, wholeOption } from './options.js';
import {
  applyCall,
  type CallOutcome,
  decodeRecord,
  encodeRecord,
  storeOfCalls,
  type WorkingSet,
} from './working-set.js';

/** A record as a {@link CasClient} reads it: its text and its version. */
export interface Versioned<V> {
  readonly value: string;
  /** Whatever the database compares on write: a version number, a revision, an ETag, the old value. */
  readonly version: V;
}

/**
 * What a database must offer for {@link casStore}: a read that returns a version, and a write that
 * succeeds only if the record is still at that version (DynamoDB's conditional writes, etcd's
 * transactions on `mod_revision`, Consul's `?cas=`, an `UPDATE … WHERE version = $n`).
 */
export interface CasClient<V = unknown> {
  /** The record under `key` and its version; undefined when there is none. */
  get(key: string): Promise<Versioned<V> | undefined>;
  /**
   * Writes `value` under `key` if the record is still at `expected` (`undefined`: only if there is none),
   * to expire at `expiresAtMs` (ms since the epoch: the database may delete it from then on); resolves to
   * false when another writer came first.
   */
  compareAndSet(key: string, expected: V | undefined, value: string, expiresAtMs: number): Promise<boolean>;
  /**
   * Optional: deletes the record if it is still at `expected`; false when another writer came first.
   * Without it, a record whose every state was reset is written empty, expiring at once.
   */
  compareAndDelete?(key: string, expected: V): Promise<boolean>;
}

/** Options of {@link casStore}. */
export interface CasStoreOptions<V> {
  /** The database, through its compare-and-swap. */
  readonly client: CasClient<V>;
  /** The store's name in logs, metrics and errors. @default 'cas' */
  readonly name?: string;
  /**
   * Writes of one record to try before giving up on its calls with `ERR_STORE_REJECTED` (every lost write
   * means another process wrote that record: calls in this process on one key never compete, they share
   * a write). @default 16
   */
  readonly maxAttempts?: number;
  /** Batches in flight at once: each reads and writes each of its keys once, in parallel. @default 32 */
  readonly maxInFlight?: number;
  /** Most calls in one batch. @default 128 */
  readonly maxBatchSize?: number;
  /** Most calls waiting for a batch; one more is refused with `ERR_QUEUE_FULL`. @default 100000 */
  readonly maxQueued?: number;
  /**
   * Added to every record's expiry, ms: a database that expires records on its own clock must not
   * forget a state while the callers' clocks (which decide) still need it. @default 60000
   */
  readonly expiryGraceMs?: number;
}

/** A store built by {@link casStore}. */
export interface CasStore extends Store {
  /** Refuses new calls and resolves once the calls already made are answered. The client stays open. */
  close(): Promise<void>;
}

interface Queued {
  readonly call: StoreCall;
  /** The record of the call's user key. */
  readonly record: string;
  /** The policies' ids in the record, in policy order. */
  readonly ids: readonly string[];
}

/**
 * A store on any database with a compare-and-swap. One record per user key holds every policy's state,
 * so one write commits a whole call, all-or-nothing. A call reads the record, runs the model on it and
 * writes it back only if nobody wrote in between; else it runs again on what the other writer left. The
 * decision is exactly the model's; contention costs retries, never correctness.
 *
 * Calls on one key in this process never race each other: while a write of a record is in flight, the
 * calls on it wait, then run together on one read and one write (in the order they were made). So only
 * other processes cause retries. Offers `decide`, `cancel`, `refund` and `reset`; no clock of its own
 * (the limiter passes the caller's).
 *
 * @example
 * ```ts
 * const store = casStore({ client: { get, compareAndSet } }); // your database's versioned read and write
 * const limiter = createLimiter({ store, policies: [gcra({ limit: 100, periodMs: 60_000 })] });
 * ```
 */
export function casStore<V>(options: CasStoreOptions<V>): CasStore {
  const { client, name, maxAttempts, graceMs } = checkOptions(options);
  const settings = { client, name, maxAttempts, graceMs };
  const batcher = createBatcher<Queued, CallOutcome>({
    name,
    key: (q) => q.record,
    maxInFlight: options.maxInFlight ?? 32,
    maxBatchSize: options.maxBatchSize ?? 128,
    ...(options.maxQueued === undefined ? {} : { maxQueued: options.maxQueued }),
    async send(batch) {
      // One read and one write per record: the calls on one key go together, keys in parallel.
      const byRecord = new Map<string, number[]>();
      batch.forEach((q, i) => {
        const indexes = byRecord.get(q.record);
        if (indexes === undefined) byRecord.set(q.record, [i]);
        else indexes.push(i);
      });
      const outcomes = new Array<CallOutcome | CallFailure>(batch.length);
      await Promise.all(
        [...byRecord].map(async ([record, indexes]) => {
          try {
            const results = await update(
              settings,
              record,
              indexes.map((i) => batch[i] as Queued),
            );
            indexes.forEach((i, j) => {
              outcomes[i] = results[j];
            });
          } catch (error) {
            for (const i of indexes) outcomes[i] = callFailed(error);
          }
        }),
      );
      return outcomes;
    },
  });
  return storeOfCalls(
    name,
    (call) =>
      batcher.submit({
        call,
        record: recordKey(call.request.prefix, call.request.key),
        ids: call.request.policies.map(policyId),
      }),
    () => batcher.close(),
  );
}

interface Settings<V> {
  readonly client: CasClient<V>;
  readonly name: string;
  readonly maxAttempts: number;
  readonly graceMs: number;
}

function checkOptions<V>(options: CasStoreOptions<V>): Settings<V> {
  checkOptionsObject(options, 'casStore options');
  const client = options.client;
  if (
    !hasMethods(client, 'get', 'compareAndSet') ||
    (client.compareAndDelete !== undefined && typeof client.compareAndDelete !== 'function')
  ) {
    throw invalid('ERR_INVALID_OPTION', 'client', client, 'an object with get() and compareAndSet()');
  }
  const name = options.name ?? 'cas';
  if (typeof name !== 'string' || name.length === 0) {
    throw invalid('ERR_INVALID_OPTION', 'name', options.name, 'a non-empty string');
  }
  const maxAttempts = wholeOption('maxAttempts', options.maxAttempts ?? 16, 1, 1000);
  const graceMs = wholeOption('expiryGraceMs', options.expiryGraceMs ?? 60_000, 0, 2 ** 40, 'a whole number of ms ≥ 0');
  return { client, name, maxAttempts, graceMs };
}

/** Runs calls on one record, in order, until one write of the record commits them all. */
async function update<V>(
  { client, name, maxAttempts, graceMs }: Settings<V>,
  record: string,
  calls: readonly Queued[],
): Promise<(CallOutcome | CallFailure)[]> {
  for (let attempt = 1; ; attempt++) {
    const found = await client.get(record);
    const slots: WorkingSet = found === undefined ? new Map() : decodeRecord(found.value, name);
    const outcomes = calls.map((q) => {
      try {
        return applyCall(q.call, q.ids, slots);
      } catch (error) {
        return callFailed(error);
      }
    });
    let dirty = false;
    for (const slot of slots.values()) dirty ||= slot.dirty;
    if (!dirty) return outcomes;
    const { text, expiresAtUs, empty } = encodeRecord(slots);
    if (empty && found === undefined) return outcomes;
    const written =
      empty && found !== undefined && client.compareAndDelete !== undefined
        ? await client.compareAndDelete(record, found.version)
        : await client.compareAndSet(record, found?.version, text, Math.ceil(expiresAtUs / 1000) + graceMs);
    if (written) return outcomes;
    if (attempt >= maxAttempts) {
      throw new FloodgateError(
        'ERR_STORE_REJECTED',
        `the ${name} store lost ${maxAttempts} writes of one record in a row to other writers (maxAttempts)`,
      );
    }
  }
}
