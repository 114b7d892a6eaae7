export { type CompiledPolicy, compilePolicy, toUs } from './compile.js';
export { MAX_COST, MIN_COST, validateCost } from './cost.js';
export { type DecideOptions, decide, evaluatePolicy, inspect, settleDenied } from './decide.js';
export {
  type Decision,
  type DecisionReason,
  type PolicyDecision,
  toDecision,
  toPolicyDecision,
  usToMs,
} from './decision.js';
export type {
  AlgorithmDescriptor,
  CompiledNumbers,
  FieldReader,
  KindDescriptor,
  PolicyBase,
  StateField,
  StateLayout,
  StateReading,
} from './descriptor.js';
export {
  emptyStateLength,
  exceedsCapacity,
  KIND_LIST,
  KIND_METER,
  KINDS,
  type Kind,
  type KindName,
  kindConstant,
  kindOf,
  readState,
} from './kinds.js';
export { meterCharge } from './meter.js';
export {
  ALGORITHMS,
  type Algorithm,
  type Algorithms,
  algorithmOf,
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
  MAX_DURATION_US,
  MAX_LIMIT,
  MAX_SLIDING_LOG_LIMIT,
  MAX_WINDOW_BUCKETS,
  type Policy,
  type PolicyInput,
  type SlidingLogOptions,
  type SlidingLogPolicy,
  type SlidingWindowOptions,
  type SlidingWindowPolicy,
  slidingLog,
  slidingWindow,
  type TokenBucketOptions,
  type TokenBucketPolicy,
  tokenBucket,
} from './policy.js';
export { leaseRefusal, refundPolicy } from './refund.js';
export { cancelReservation, isReservable, type Reservation } from './reservation.js';
export { maxLogEntries } from './sliding-log.js';
export { type Evaluation, emptyEvaluation, type Reason, type State } from './types.js';
