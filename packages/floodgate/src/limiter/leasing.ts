import type { Decision } from '../model/decision.js';
import { toStoreError } from '../stores/store-errors.js';
import { type CallOptions, internalsOf, type KeyOptions, type Limiter } from './limiter.js';
import { decisionOf } from './reservation.js';
import { isDegraded, isPending } from './store-call.js';

/**
 * Leases over a limiter's store-call path, for this package's leased limiter and the HTTP middleware
 * (which gives a request's cost back after the response). Not part of the public API: a limiter's own
 * methods are `limit`, `check` and the rest.
 */

/** What a lease call got: the decision, and for a store decision each policy's reset and the time it was decided at. */
export interface LeaseGrant {
  readonly decision: Decision;
  /** Per policy, µs until the key is untouched (absent when the failure policy decided). */
  readonly resetAfterUs?: readonly number[];
  /** The clock reading the store decided at, µs. */
  readonly atUs?: number;
}

/**
 * A lease: one committed call of cost `size` under the limiter's (or the given) policies, through its
 * store-call path (timeout, breaker, events), with the clock reading it was decided at. Without the store,
 * the `failure` option decides a call of cost `cost` instead (no lease then).
 */
export async function takeLease(
  limiter: Limiter,
  key: string,
  size: number,
  cost: number,
  options?: KeyOptions,
): Promise<LeaseGrant> {
  const internals = internalsOf(limiter);
  const call: CallOptions =
    options?.policies === undefined ? { cost: size } : { cost: size, policies: options.policies };
  const request = internals.request(key, call, true);
  const pending = internals.calls.decide(request, call, 'promise', {
    request: { ...request, cost },
    options: { ...call, cost },
  });
  // A synchronous store's evaluations are reused by its next call: read them before any await.
  const outcome = isPending(pending) ? await pending : pending;
  if (isDegraded(outcome)) return { decision: internals.decided(outcome.request, outcome.decision, 'degraded') };
  const atUs = outcome.nowUs ?? request.nowUs;
  const decision = internals.decided(request, decisionOf(request, outcome), 'store');
  const resetAfterUs = outcome.evaluations.map((e) => e.resetAfterUs);
  return atUs === undefined ? { decision, resetAfterUs } : { decision, resetAfterUs, atUs };
}

/**
 * Gives back `unused` units of a lease of `leased` taken at `leasedAtUs`, under the limiter's (or the
 * given) policies. Never rejects: a failure is reported as a `storeError` event, and the units come back on
 * their own when the lease expires in the store. Resolves to whether they came back.
 */
export async function giveBack(
  limiter: Limiter,
  key: string,
  leased: number,
  leasedAtUs: number,
  unused: number,
  options?: KeyOptions,
): Promise<boolean> {
  const store = limiter.store;
  const refund = store.refund;
  if (refund === undefined || limiter.breakerState === 'open') return false;
  const internals = internalsOf(limiter);
  const request = {
    prefix: limiter.prefix,
    key,
    policies: options?.policies === undefined ? internals.compiled : internals.policiesFor(options.policies),
    leased,
    leasedAtUs,
    unused,
    nowUs: internals.clock?.nowUs(),
  };
  try {
    await internals.calls.bounded(refund.call(store, request));
    // A denial remembered before the refund may no longer hold.
    limiter.blockedCache?.forget(key);
    return true;
  } catch (error) {
    // Never rejects, so every failure (a rejection too) is reported as an event; none reaches the breaker.
    internals.storeError({ key, error: toStoreError(store.name, error) });
    return false;
  }
}
