/**
 * `floodgate/store`: what writing a store takes. The contract (`Store`, its requests and results), the
 * key layout every store with keys shares, how store errors are classified, and the store kit: two
 * builders that turn a few database operations into a whole store (`casStore` for a compare-and-swap,
 * `rowStore` and `syncRowStore` for transactions that lock), the helpers every store needs (keys,
 * expiry, the clock check, `runCall` for decide, cancel and refund) and the request batcher of the
 * network stores (`createBatcher`). The model a store runs is `floodgate/model`; the conformance suite
 * that proves it is `floodgate/testing`. See docs/architecture.md, "How to write a store".
 */
export { encodeKey, HASH_KEYS_LONGER_THAN, MAX_KEY_LENGTH, storageKey } from '../keys.js';
export {
  type Batch,
  type Batcher,
  type BatcherOptions,
  type BatcherStats,
  CallFailure,
  callFailed,
  createBatcher,
} from './kit/batcher.js';
export { type ResetRequest, runCall, type StoreCall } from './kit/calls.js';
export {
  type CasClient,
  type CasStore,
  type CasStoreOptions,
  casStore,
  type Versioned,
} from './kit/cas-store.js';
export { policyId, recordKey, stateKey, stateKeys } from './kit/keys.js';
export {
  type RowDatabase,
  type RowStore,
  type RowStoreOptions,
  type RowTransaction,
  type RowWrite,
  rowStore,
  type StoredRow,
} from './kit/row-store.js';
export {
  type SyncRowDatabase,
  type SyncRowStore,
  type SyncRowStoreOptions,
  syncRowStore,
} from './kit/sync-row-store.js';
export { callerNowUs, checkNowUs, expiryOf } from './kit/time.js';
export {
  type CancelRequest,
  type FastPath,
  isSyncStore,
  type RefundRequest,
  type SettleRequest,
  type Store,
  type StoreRequest,
  type StoreResult,
  type SyncStore,
  type TimedCall,
} from './store.js';
export { classifyStoreError, isPermanentStoreError, type StoreErrorClass } from './store-errors.js';
