import type { Clock } from '../clock.js';
import { describeValue, FloodgateError, invalid, isFloodgateError } from '../errors.js';
import { validateKey } from '../keys.js';
import type { Decision, PermitGrant, PolicyDecision } from '../model/decision.js';
import type { Policy } from '../model/policy.js';
import { newLeaseId } from '../permits/lease-id.js';
import type { Permit } from '../permits/permit.js';
import {
  createPermits,
  limitThrough,
  limitTracked,
  type PermitDecision,
  type PermitSend,
  type Permits,
} from '../permits/permits.js';
import type { ConcurrencyPolicy } from '../permits/policy.js';
import type { PermitStore } from '../permits/store.js';
import { hasMethods } from '../stores/kit/options.js';
import type { HeldResult, PermitClaim, Store } from '../stores/store.js';
import { classifyStoreError } from '../stores/store-errors.js';
import type { CallOptions, FailurePolicy } from './limiter.js';

/** How long a call refused because the permit store failed (failure `'closed'`) is told to wait, ms. */
const DEGRADED_RETRY_MS = 1000;

/** True for a concurrency policy given among a limiter's policies. */
export function isConcurrencyPolicy(policy: unknown): policy is ConcurrencyPolicy {
  return (
    typeof policy === 'object' && policy !== null && (policy as { algorithm?: unknown }).algorithm === 'concurrency'
  );
}

/** A limiter's `policies` split into its rate policies and at most one concurrency policy (and its place). */
export interface SplitPolicies {
  readonly rate: Policy | readonly Policy[] | undefined;
  readonly concurrency: ConcurrencyPolicy | undefined;
  /** The concurrency policy's index among the policies given, where its entry goes in `decision.policies`. */
  readonly index: number;
}

/** Takes the concurrency policy out of a limiter's `policies` (the rate policies are validated by the limiter). */
export function splitPolicies(policies: unknown): SplitPolicies {
  if (!Array.isArray(policies)) {
    if (isConcurrencyPolicy(policies)) return { rate: undefined, concurrency: policies, index: 0 };
    return { rate: policies as Policy | undefined, concurrency: undefined, index: 0 };
  }
  let concurrency: ConcurrencyPolicy | undefined;
  let index = 0;
  const rate: Policy[] = [];
  policies.forEach((policy: unknown, i) => {
    if (!isConcurrencyPolicy(policy)) {
      rate.push(policy as Policy);
      return;
    }
    if (concurrency !== undefined) {
      throw new FloodgateError('ERR_INVALID_POLICY', `policies[${i}] is a second concurrency policy: give one`, {
        option: `policies[${i}]`,
      });
    }
    concurrency = policy;
    index = i;
  });
  return { rate: concurrency === undefined ? (policies as readonly Policy[]) : rate, concurrency, index };
}

/** What the concurrency part of a limiter needs of the limiter. */
export interface RateSide {
  /** The rate policies' names (a concurrency policy may not share one). */
  readonly names: readonly string[];
  /** Whether the call has rate policies to decide (its own, or the limiter's). */
  hasRate(options: CallOptions | undefined): boolean;
  /** Validates the call as the rate side will see it, before any store call. */
  validate(key: string, options: CallOptions | undefined): void;
  /** The rate side's decision, charging the call when `commit`. */
  decide(key: string, options: CallOptions | undefined, commit: boolean): Promise<Decision>;
  /** The rate store: its own permit store (`permits`) decides with it in one call. */
  readonly store: Store;
  /**
   * The one store call deciding the rate policies with the permit (`Store.decideWithPermit`), with the
   * rate side's decision of it; undefined when this call must take the two calls.
   */
  withPermit(
    key: string,
    options: CallOptions | undefined,
  ): ((claim: PermitClaim) => Promise<{ held: HeldResult; decision: Decision }>) | undefined;
  readonly failure: FailurePolicy;
}

/**
 * The concurrency policy of a limiter, decided beside its rate policies, all or nothing. When the permits
 * live in the rate store's own permit store (`store.permits`) and the store can (`decideWithPermit`), one
 * store call decides both, atomically, exactly as the two calls below would in order. Otherwise two
 * stores answer a call (the rate store and the permit store) so no single store call can decide both; the
 * order makes it exact instead:
 *
 * 1. the permit first: when it is refused, the rate policies are only checked (cost 0 charged), so a
 *    concurrency refusal charges no rate;
 * 2. then the rate policies, charging the call; when they deny it, the permit just granted is released
 *    before the decision is returned, so a rate denial holds no permit.
 *
 * Between 1 and 2 the permit counts as in flight: a concurrent call on the same key may be refused by the
 * concurrency policy because of a call the rate policies then deny (a refusal too many, never a grant too
 * many).
 */
export class ConcurrencyPart {
  readonly policy: ConcurrencyPolicy;
  readonly index: number;
  readonly permits: Permits;
  readonly #rate: RateSide;
  /** Whether the permits live in the rate store's own permit store, which decides both in one call. */
  readonly #oneCall: boolean;
  /** The permits granted by this limiter and still held, by lease id (what `permitOf` answers from). */
  readonly #held = new Map<string, Permit>();

  constructor(
    split: SplitPolicies & { concurrency: ConcurrencyPolicy },
    store: PermitStore | undefined,
    prefix: string,
    clock: Clock | undefined,
    rate: RateSide,
  ) {
    const own = rate.store.permits;
    const permits = store ?? own;
    if (!hasMethods(permits, 'acquire', 'refresh', 'release')) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `a concurrency policy needs a permit store: permits: memoryPermitStore() or redisPermitStore({ client }) (the ${rate.store.name} store has none of its own), got ${describeValue(store)}`,
        { option: 'permits' },
      );
    }
    this.#oneCall = own !== undefined && permits === own && typeof rate.store.decideWithPermit === 'function';
    if (rate.names.includes(split.concurrency.name)) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `policies has two policies named ${JSON.stringify(split.concurrency.name)}`,
        { option: 'policies' },
      );
    }
    this.policy = split.concurrency;
    this.index = split.index;
    this.permits = createPermits({
      store: permits as PermitStore,
      policy: split.concurrency,
      prefix,
      ...(clock === undefined ? {} : { clock }),
    });
    this.#rate = rate;
  }

  /** Whether a `limit` decides the rate policies and the permit in one store call (when the call can). */
  get oneCall(): boolean {
    return this.#oneCall;
  }

  /** How many permits this limiter granted that are still held (not released, lease not lost). */
  get held(): number {
    return this.#held.size;
  }

  /** Decides a call under the rate policies and the concurrency policy, all or nothing. */
  async limit(key: string, options: CallOptions | undefined): Promise<Decision> {
    validateKey(key);
    const cost = permitCost(options);
    if (options?.maxDelayMs !== undefined && options.maxDelayMs !== 0) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `maxDelayMs cannot be combined with a concurrency policy (a permit is held from the moment it is granted), got ${describeValue(options.maxDelayMs)}`,
        { option: 'maxDelayMs' },
      );
    }
    const rate = this.#rate;
    const withRate = rate.hasRate(options);
    if (withRate) rate.validate(key, options);
    const leaseId = newLeaseId();
    // The permit leaves the held ones when it ends: released, or its lease lost.
    const ended = () => this.#held.delete(leaseId);
    const through = withRate && this.#oneCall ? rate.withPermit(key, options) : undefined;
    // The rate side's decision, when the one store call made it.
    let decided: Decision | undefined;
    let granted: PermitDecision;
    try {
      if (through === undefined) {
        granted = await limitTracked(this.permits, key, { cost, leaseId }, ended);
      } else {
        const send: PermitSend = (where, args) =>
          through({ key: where, args }).then(({ held, decision }) => {
            decided = decision;
            return { reply: held.permit, kept: held.permit.granted && held.result.allowed };
          });
        granted = await limitThrough(this.permits, key, { cost, leaseId }, ended, send);
      }
    } catch (error) {
      if (through !== undefined) {
        // A failed call may have been applied all the same (a timeout): its lease, if any, goes back.
        this.permits.release(key, leaseId).catch(() => {});
        // A call the store refused is thrown, as the rate store's refusal of the second call would be.
        const kind = classifyStoreError(error);
        if (kind === 'input' || kind === 'rejected') throw error;
      }
      return this.#degraded(key, options, withRate, error);
    }
    const permit = granted.permit;
    if (!granted.allowed) {
      // Refused: the rate policies are looked at, never charged.
      const checked = decided ?? (withRate ? await rate.decide(key, options, false) : undefined);
      return this.#combine(checked, this.#part(granted), false);
    }
    // Granted and given back in the one store call: a rate policy denied it.
    if (permit === undefined) return this.#rateDenied(decided as Decision, granted, cost);
    this.#held.set(leaseId, permit);
    let decision = decided;
    try {
      if (decision === undefined && withRate) decision = await rate.decide(key, options, true);
    } catch (error) {
      await permit.release().catch(() => {});
      throw error;
    }
    if (decision !== undefined && !decision.allowed) {
      // Denied by a rate policy: the permit goes back before the decision is returned.
      await permit.release().catch(() => {});
      return this.#rateDenied(decision, granted, cost);
    }
    const combined = this.#combine(decision, this.#part(granted), true);
    combined.permit = {
      policy: this.policy.name,
      key,
      leaseId: permit.leaseId,
      cost,
      fence: permit.fence,
      leaseMs: this.policy.leaseMs,
    };
    return combined;
  }

  /** The live permit of a decision this limiter granted (or a copy of it); undefined once it ended. */
  permitOf(decision: Decision | PermitGrant): Permit | undefined {
    const grant = grantOf(decision);
    if (grant === undefined) return undefined;
    const permit = this.#held.get(grant.leaseId);
    return permit !== undefined && permit.key === grant.key && !permit.done ? permit : undefined;
  }

  /** Releases the permit of a decision: the live one held here, or by lease id (one granted elsewhere). */
  release(decision: Decision | PermitGrant): Promise<boolean> {
    return this.#onGrant(
      decision,
      (permit) => permit.release(),
      (key, leaseId) => this.permits.release(key, leaseId),
    );
  }

  /** Extends the lease of a decision's permit (see `Permit.refresh`). */
  refresh(decision: Decision | PermitGrant): Promise<boolean> {
    return this.#onGrant(
      decision,
      (permit) => permit.refresh(),
      (key, leaseId) => this.permits.refresh(key, leaseId),
    );
  }

  /** Acts on a decision's permit: on the live one held here, else by its key and lease id; false without one. */
  #onGrant(
    decision: Decision | PermitGrant,
    held: (permit: Permit) => Promise<boolean>,
    stored: (key: string, leaseId: string) => Promise<boolean>,
  ): Promise<boolean> {
    const grant = grantOf(decision);
    if (grant === undefined) return Promise.resolve(false);
    const permit = this.#held.get(grant.leaseId);
    if (permit !== undefined && permit.key === grant.key) return held(permit);
    return stored(grant.key, grant.leaseId);
  }

  /** A rate denial of a call whose permit was granted and given back: the permit's room is the caller's again. */
  #rateDenied(decision: Decision, granted: PermitDecision, cost: number): Decision {
    const part = this.#part(granted);
    part.remaining = Math.min(this.policy.limit, part.remaining + cost);
    return this.#combine(decision, part, false);
  }

  /** The permit store failed: the limiter's `failure` option decides, as for its rate store. */
  async #degraded(key: string, options: CallOptions | undefined, withRate: boolean, error: unknown): Promise<Decision> {
    const failure = this.#rate.failure;
    if (failure === 'throw' || !isFloodgateError(error)) throw error;
    const policy = this.policy;
    if (failure === 'closed') {
      const part: PolicyDecision = {
        policy: policy.name,
        allowed: false,
        limit: policy.limit,
        remaining: 0,
        retryAfterMs: DEGRADED_RETRY_MS,
        resetAfterMs: 0,
        reason: 'degraded',
      };
      const denied = this.#combine(undefined, part, false);
      return { ...denied, retryAfterMs: DEGRADED_RETRY_MS, reason: 'degraded' };
    }
    // Open (or a fallback limiter, which holds no permits): the rate policies alone decide.
    const decision = withRate ? await this.#rate.decide(key, options, true) : undefined;
    const part: PolicyDecision = {
      policy: policy.name,
      allowed: true,
      limit: policy.limit,
      remaining: policy.limit,
      retryAfterMs: 0,
      resetAfterMs: 0,
      reason: 'degraded',
    };
    const combined = this.#combine(decision, part, decision?.allowed ?? true);
    return combined.allowed ? { ...combined, reason: 'degraded' } : combined;
  }

  #part(d: PermitDecision): PolicyDecision {
    const part: PolicyDecision = {
      policy: d.policy,
      allowed: d.allowed,
      limit: d.limit,
      remaining: d.remaining,
      retryAfterMs: d.retryAfterMs,
      resetAfterMs: d.resetAfterMs,
    };
    if (d.reason !== undefined) part.reason = d.reason;
    return part;
  }

  /**
   * One decision of the rate side's and the concurrency entry, by the rules of a decision under several
   * policies: denied, the binding policy is the denying one with the longest wait; admitted, the one with
   * the least left.
   */
  #combine(rate: Decision | undefined, part: PolicyDecision, allowed: boolean): Decision {
    const parts = rate === undefined ? [] : [...rate.policies];
    parts.splice(Math.min(this.index, parts.length), 0, part);
    let bound = part;
    let remaining = part.remaining;
    let retryAfterMs = part.retryAfterMs;
    for (const p of parts) {
      if (p.remaining < remaining) remaining = p.remaining;
      if (!allowed && p.retryAfterMs > retryAfterMs) retryAfterMs = p.retryAfterMs;
      if (
        allowed ? p.remaining < bound.remaining : !p.allowed && (bound.allowed || p.retryAfterMs > bound.retryAfterMs)
      ) {
        bound = p;
      }
    }
    const decision: Decision = {
      allowed,
      limit: bound.limit,
      remaining,
      retryAfterMs: allowed ? 0 : retryAfterMs,
      resetAfterMs:
        allowed || !Number.isFinite(retryAfterMs) ? bound.resetAfterMs : Math.max(bound.resetAfterMs, retryAfterMs),
      policy: bound.policy,
      policies: parts,
    };
    if (!allowed && bound.reason !== undefined) decision.reason = bound.reason;
    if (rate?.settlement !== undefined && allowed) decision.settlement = rate.settlement;
    return decision;
  }
}

/** The grant of a decision, or a grant itself; undefined for a decision without a permit. */
function grantOf(value: Decision | PermitGrant): PermitGrant | undefined {
  if (typeof value !== 'object' || value === null) {
    throw invalid('ERR_INVALID_OPTION', 'decision', value, 'a decision or its permit');
  }
  const grant = 'leaseId' in value ? value : value.permit;
  if (grant === undefined) return undefined;
  if (
    typeof grant !== 'object' ||
    grant === null ||
    typeof grant.key !== 'string' ||
    typeof grant.leaseId !== 'string'
  ) {
    throw invalid('ERR_INVALID_OPTION', 'decision', value, 'a decision or its permit');
  }
  return grant;
}

/** The permit's cost: the call's cost, a whole number ≥ 1 (a cost-0 call would hold nothing). */
function permitCost(options: CallOptions | undefined): number {
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
  }
  const cost = options?.cost ?? 1;
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 1) {
    throw new FloodgateError(
      'ERR_INVALID_COST',
      `cost must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER} under a concurrency policy, got ${describeValue(cost)}`,
      { option: 'cost' },
    );
  }
  return cost;
}
