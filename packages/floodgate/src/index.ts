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
  type ChargeOptions,
  createLimiter,
  type FailurePolicy,
  type KeyOptions,
  Limiter,
  type LimiterEvents,
  type LimiterOptions,
  type SettleOptions,
} from './limiter/limiter.js';
export { SyncedLimiter, type SyncedOptions, type SyncedStats, syncedLimiter } from './limiter/synced.js';
export { type Throttled, type ThrottleOptions, throttle } from './limiter/throttle.js';
export {
  type Decision,
  type DecisionReason,
  MAX_COST,
  MIN_COST,
  type PermitGrant,
  type PolicyDecision,
  type Quota,
  type Reservation,
  type Settlement,
} from './model/index.js';
// The policies: every algorithm's factory, policy and options types, `definePolicy`, `quotaOf`.
export * from './model/policy.js';
export { type DeniedTracker, type TrackDeniedOptions, trackDenied } from './observe/denied.js';
export { type TopKey, TopKeys, type TopKeysOptions, type TopKeysReport } from './observe/top-keys.js';
export {
  type MemoryPermitStore,
  type MemoryPermitStoreOptions,
  memoryPermitStore,
} from './permits/memory-permit-store.js';
export type { AcquireReply, LeaveReply, RefreshReply, ReleaseReply, WaitReply, Wake } from './permits/model.js';
export { Permit } from './permits/permit.js';
export {
  createPermits,
  type PermitCallOptions,
  type PermitDecision,
  Permits,
  type PermitsOptions,
  type WithPermitResult,
} from './permits/permits.js';
export {
  type ConcurrencyOptions,
  type ConcurrencyPolicy,
  concurrency,
  MAX_LEASE_MS,
  MAX_PERMIT_LIMIT,
  MAX_QUEUE,
} from './permits/policy.js';
export type {
  PermitAcquireArgs,
  PermitLeaveArgs,
  PermitRefreshArgs,
  PermitReleaseArgs,
  PermitStore,
  PermitUnwatch,
  PermitWaitArgs,
} from './permits/store.js';
export type { PermitAcquireOptions } from './permits/waiting.js';
export { type MemoryStore, type MemoryStoreOptions, memoryStore } from './stores/memory/memory-store.js';
export type { HeldResult, PermitClaim, Store } from './stores/store.js';
export { configureTelemetry, type TelemetryOptions, telemetryReady } from './telemetry/otel.js';
