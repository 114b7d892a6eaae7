export type { AlgorithmDescriptor, Gauge, PolicyBase, PolicyBaseOptions, Quota } from './algorithm.js';
export { type CompiledPolicy, compilePolicy, toUs } from './compile.js';
export { checkResolution, countResolution, MAX_COST, MIN_COST, type Resolved, validateCost } from './cost.js';
export { type DecideOptions, decide, evaluatePolicy, inspect, settleDenied } from './decide.js';
export {
  type Decision,
  type DecisionReason,
  type PermitGrant,
  type PolicyDecision,
  toDecision,
  toPolicyDecision,
  usToMs,
} from './decision.js';
export type {
  CompiledNumbers,
  DeniedCount,
  Evaluate,
  KindDescriptor,
  StateField,
  StateLayout,
  StateReading,
} from './descriptor.js';
export type { FieldReader } from './fields.js';
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
  maxStateLength,
  readState,
} from './kinds.js';
export { meterCharge } from './meter.js';
export * from './policy.js';
export { leaseRefusal, refundPolicy } from './refund.js';
export { cancelReservation, isReservable, type Reservation } from './reservation.js';
export { MAX_DEBT_US, type Settlement, settlePolicy, settleRefusal } from './settle.js';
export { maxLogEntries } from './sliding-log.js';
export { type Evaluation, emptyEvaluation, type Reason, type State } from './types.js';
