export {
  type CompiledPolicy,
  compilePolicy,
  KIND_FIXED_WINDOW,
  KIND_METER,
  KIND_SLIDING_LOG,
  KIND_SLIDING_WINDOW,
  KIND_TOKEN_INTERVAL,
  type Kind,
  toUs,
} from './compile.js';
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
export {
  type Algorithm,
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
