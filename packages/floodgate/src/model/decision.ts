import type { CompiledPolicy } from './compile.js';
import type { Reservation } from './reservation.js';
import type { Settlement } from './settle.js';
import type { Evaluation } from './types.js';

/** Why a call was denied, or made without the store. */
export type DecisionReason = 'limit' | 'blocked' | 'exceeds-capacity' | 'degraded';

/** One policy's part of a {@link Decision}. Durations are whole milliseconds, rounded up. */
export interface PolicyDecision {
  /** The policy's name. */
  policy: string;
  allowed: boolean;
  /** Largest cost this policy admits at once. */
  limit: number;
  /** How many cost-1 calls this policy would admit right now, after this call. */
  remaining: number;
  /**
   * ms until this same call could pass this policy; `Infinity` when it never can. 0 when allowed, but
   * for a `countDenied` policy when another policy denied the call: this one admitted it, counted the
   * attempt, and this is the wait that attempt imposes (part of the decision's `retryAfterMs`).
   */
  retryAfterMs: number;
  /** ms until the key is back to untouched under this policy. */
  resetAfterMs: number;
  /** Admitted, but proceed after this many ms (queue mode, reservations). */
  delayMs?: number;
  reason?: DecisionReason;
}

/**
 * The permit a call admitted under a concurrency policy holds, as data: what `limiter.permit(decision)`,
 * `limiter.release(decision)` and `limiter.refresh(decision)` need (from a copy of the decision too), and
 * what another process needs to release it (`permits.release(key, leaseId)`).
 */
export interface PermitGrant {
  /** The concurrency policy's name. */
  policy: string;
  key: string;
  /** The lease's id in the permit store. */
  leaseId: string;
  /** The cost held. */
  cost: number;
  /** The grant's fencing token: larger than every earlier grant's on this key. */
  fence: number;
  /** How long the lease lasts without a refresh, ms. */
  leaseMs: number;
}

/**
 * The answer to a call. A denial is data, not an exception. Every limiter returns plain data: spread,
 * `structuredClone` and `JSON.stringify` keep every field.
 *
 * Its own fields are those of the binding policy: the one that denied (the longest wait of those), or else
 * the one with least left; `remaining` is then the tightest policy's count, and `resetAfterMs` (ms until
 * the key is back to its full, untouched state under that policy) is never before `retryAfterMs`.
 */
export interface Decision extends PolicyDecision {
  /** One entry per policy, in the order the policies were given (under one policy, the decision's own fields). */
  policies: PolicyDecision[];
  /** Admitted with a delay: what `limiter.cancel` needs to give the booked capacity back. */
  reservation?: Reservation;
  /** Admitted with `settle: true`: what `limiter.settle` needs to charge the call's actual cost. */
  settlement?: Settlement;
  /**
   * Admitted under a concurrency policy: the permit it holds until `limiter.release(decision)` (or until
   * its lease runs out). The live handle (its `signal`, `refresh`, `await using`) is `limiter.permit(decision)`.
   */
  permit?: PermitGrant;
}

/** Below this, whole µs are rounded up to ms in 32-bit integer arithmetic (`wholeUsToMs`). */
const INT_US = 2 ** 31 - 1000;

/** Whole milliseconds, rounded up, from µs; Infinity stays Infinity. */
export function usToMs(us: number): number {
  if (us <= 0) return 0;
  return Number.isInteger(us) ? wholeUsToMs(us) : Math.ceil(us / 1000);
}

/**
 * `usToMs` of a whole number of µs ≥ 0. Below 2^31, the common case, it divides 32-bit integers: exact,
 * and several times cheaper than a division of doubles, which every in-process decision would pay twice.
 */
export function wholeUsToMs(us: number): number {
  return us < INT_US ? ((us + 999) / 1000) | 0 : Math.ceil(us / 1000);
}

/** Turns one policy's evaluation into its public form. */
export function toPolicyDecision(c: CompiledPolicy, e: Evaluation): PolicyDecision {
  const d: PolicyDecision = {
    policy: c.name,
    allowed: e.allowed,
    limit: c.limit,
    remaining: e.remaining,
    retryAfterMs: usToMs(e.retryAfterUs),
    resetAfterMs: usToMs(e.resetAfterUs),
  };
  if (e.delayUs > 0) d.delayMs = usToMs(e.delayUs);
  if (e.reason !== 'ok') d.reason = e.reason;
  return d;
}

/** Assembles the decision of a call from its policies' evaluations. */
export function toDecision(
  policies: readonly CompiledPolicy[],
  evaluations: readonly Evaluation[],
  allowed: boolean,
): Decision {
  if (policies.length === 1)
    return singleDecision(policies[0] as CompiledPolicy, evaluations[0] as Evaluation, allowed);
  const parts = new Array<PolicyDecision>(policies.length);
  let binding = 0;
  let remaining = Number.POSITIVE_INFINITY;
  let retryAfterMs = 0;
  let delayMs = 0;
  for (let i = 0; i < policies.length; i++) {
    const part = toPolicyDecision(policies[i] as CompiledPolicy, evaluations[i] as Evaluation);
    parts[i] = part;
    const current = parts[binding] as PolicyDecision;
    if (allowed) {
      if (part.remaining < current.remaining) binding = i;
    } else if (!part.allowed && (current.allowed || part.retryAfterMs > current.retryAfterMs)) {
      binding = i;
    }
    if (part.remaining < remaining) remaining = part.remaining;
    if (part.retryAfterMs > retryAfterMs) retryAfterMs = part.retryAfterMs;
    if (part.delayMs !== undefined && part.delayMs > delayMs) delayMs = part.delayMs;
  }
  const bound = parts[binding] as PolicyDecision;
  const decision: Decision = {
    allowed,
    limit: bound.limit,
    remaining: allowed ? remaining : Math.min(remaining, bound.remaining),
    retryAfterMs: allowed ? 0 : retryAfterMs,
    // A wait of another policy (a countDenied log that logged this attempt) can outlast the binding one's.
    resetAfterMs:
      allowed || !Number.isFinite(retryAfterMs) ? bound.resetAfterMs : Math.max(bound.resetAfterMs, retryAfterMs),
    policy: bound.policy,
    policies: parts,
  };
  if (allowed && delayMs > 0) decision.delayMs = delayMs;
  if (!allowed && bound.reason !== undefined) decision.reason = bound.reason;
  return decision;
}

/**
 * The decision of a call under one policy, the common case: that policy's own report, with the same
 * report as its one entry in `policies`. Plain data, like every decision.
 */
function singleDecision(c: CompiledPolicy, e: Evaluation, allowed: boolean): Decision {
  const part = toPolicyDecision(c, e);
  const decision: Decision = {
    allowed,
    limit: part.limit,
    remaining: part.remaining,
    retryAfterMs: part.retryAfterMs,
    resetAfterMs: part.resetAfterMs,
    policy: part.policy,
    policies: [part],
  };
  if (part.delayMs !== undefined) decision.delayMs = part.delayMs;
  if (part.reason !== undefined) decision.reason = part.reason;
  return decision;
}

/**
 * A fast path's admitted decision under one policy (no delay, no reason): what `toDecision` builds for
 * such an evaluation, field for field and in the same order, in two object literals and one array.
 */
export function admittedDecision(policy: string, limit: number, remaining: number, resetAfterMs: number): Decision {
  return {
    allowed: true,
    limit,
    remaining,
    retryAfterMs: 0,
    resetAfterMs,
    policy,
    policies: [{ policy, allowed: true, limit, remaining, retryAfterMs: 0, resetAfterMs }],
  };
}

/** A fast path's denial by one policy's limit (no delay): what `toDecision` builds for that evaluation. */
export function deniedDecision(
  policy: string,
  limit: number,
  remaining: number,
  retryAfterMs: number,
  resetAfterMs: number,
): Decision {
  return {
    allowed: false,
    limit,
    remaining,
    retryAfterMs,
    resetAfterMs,
    policy,
    policies: [{ policy, allowed: false, limit, remaining, retryAfterMs, resetAfterMs, reason: 'limit' }],
    reason: 'limit',
  };
}
