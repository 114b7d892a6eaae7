export { type Clock, systemClock } from './clock.js';
export { FloodgateError, type FloodgateErrorCode, isFloodgateError } from './errors.js';
export type { AcquireOptions } from './limiter/acquire.js';
export type { BlockedCache, BlockedCacheOptions } from './limiter/blocked-cache.js';
export type { BreakerOptions, BreakerState } from './limiter/breaker.js';
export {
  LeasedLimiter,
  type LeaseOptions,
  type LeaseStats,
  leasedLimiter,
} from './limiter/lease.js';
export {
  type CallOptions,
  createLimiter,
  type FailurePolicy,
  type KeyOptions,
  Limiter,
  type LimiterEvents,
  type LimiterOptions,
} from './limiter/limiter.js';
export { SyncedLimiter, type SyncedOptions, type SyncedStats, syncedLimiter } from './limiter/synced.js';
export { type Throttled, type ThrottleOptions, throttle } from './limiter/throttle.js';
export {
  type Algorithm,
  type Decision,
  type DecisionReason,
  definePolicy,
  type FixedWindowOptions,
  type FixedWindowPolicy,
  fixedWindow,
  type GcraOptions,
  type GcraPolicy,
  gcra,
  isPolicy,
  type LeakyBucketOptions,
  type LeakyBucketPolicy,
  leakyBucket,
  MAX_COST,
  MAX_SLIDING_LOG_LIMIT,
  MAX_WINDOW_BUCKETS,
  MIN_COST,
  type Policy,
  type PolicyDecision,
  type PolicyInput,
  type Reservation,
  type SlidingLogOptions,
  type SlidingLogPolicy,
  type SlidingWindowOptions,
  type SlidingWindowPolicy,
  slidingLog,
  slidingWindow,
  type TokenBucketOptions,
  type TokenBucketPolicy,
  tokenBucket,
} from './model/index.js';
export { type MemoryStore, type MemoryStoreOptions, memoryStore } from './stores/memory/memory-store.js';
export type { Store } from './stores/store.js';
