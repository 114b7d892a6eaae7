/**
 * `floodgate/store`: what writing a store takes. The contract (`Store`, its requests and results), the
 * key layout every store with keys shares, and how store errors are classified. The model a store runs
 * is `floodgate/model`; the conformance suite that proves it is `floodgate/testing`. See
 * docs/architecture.md, "How to write a store".
 */
export { encodeKey, HASH_KEYS_LONGER_THAN, MAX_KEY_LENGTH, storageKey } from '../keys.js';
export {
  type CancelRequest,
  isSyncStore,
  type RefundRequest,
  type Store,
  type StoreRequest,
  type StoreResult,
  type SyncStore,
} from './store.js';
export { classifyStoreError, type StoreErrorClass } from './store-errors.js';
