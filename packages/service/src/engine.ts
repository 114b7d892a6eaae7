import {
  type Clock,
  createLimiter,
  type Decision,
  fixedWindow,
  isFloodgateError,
  type Limiter,
  MAX_COST,
  type PermitStore,
  type Policy,
  type PolicyDecision,
  type Store,
} from 'floodgate';
import { checkResolution, compilePolicy, type Settlement, settleRefusal, validateCost } from 'floodgate/model';
import type { Overrides } from 'floodgate/overrides';
import { isSyncStore } from 'floodgate/store';
import { applyOverrides } from './admin/resolve.js';
import { ENVOY_UNITS, type ServiceConfig } from './config.js';
import { envoyPolicy } from './envoy-config.js';
import { PermitDesk, type PermitEvents } from './permits.js';
import {
  boundedKey,
  type CompiledDomain,
  compileRules,
  type DescriptorEntry,
  type EnvoyLimit,
  envoyLimit,
  MAX_ENTRIES,
  MAX_ENTRY_LENGTH,
  matchDescriptor,
  plainKey,
  type Rule,
} from './rules.js';
import { type DecisionStats, OVERRIDE_POLICY_LABEL, type Tally } from './stats.js';

/** Most descriptors in one request of the HTTP API. */
export const MAX_DESCRIPTORS = 64;
export { MAX_ENTRIES, MAX_ENTRY_LENGTH } from './rules.js';
/**
 * Most descriptors in one gRPC request. Envoy sends one per rate limit action list of a route (a few,
 * rarely tens); past this bound the call is refused whole (INVALID_ARGUMENT), since one call's work grows
 * with its descriptors. Entries, keys and values have no bound of their own there: the message's (1 MiB)
 * holds them, a descriptor with more entries than rules nest matches nothing, and a long key is stored
 * by its digest.
 */
export const MAX_GRPC_DESCRIPTORS = 1024;
/** Largest `requestsPerUnit` of a request override. */
export const MAX_OVERRIDE_REQUESTS_PER_UNIT = 1e12;
/** Distinct request overrides whose compiled policies are kept; past it the cache starts over. */
const MAX_CACHED_OVERRIDES = 1024;

/** What a call does: `limit` decides and consumes, `check` and `status` change nothing, `reset` forgets. */
export type Mode = 'limit' | 'check' | 'status' | 'reset';

/** How the engine's limiter treats a failing store, and how it counts. */
export interface EngineOptions {
  /** Longest wait for the store on one call, ms; unset for no timer. Ignored by synchronous stores. */
  readonly storeTimeoutMs?: number | undefined;
  /** What a call gets when the store fails: an error (`throw`), admitted (`open`) or denied (`closed`). @default 'throw' */
  readonly failure?: 'throw' | 'open' | 'closed' | undefined;
  /**
   * envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, for domains of its format: when a
   * request has a descriptor whose call would go over its limit, the request's other descriptors are not
   * charged (they are answered as they stand), while the ones that go over are counted and answered
   * OVER_LIMIT. Decided as that service decides it: a check of every descriptor, then the charges, each
   * atomic on its key but not the request as a whole. @default false
   */
  readonly stopIncrementWhenOverLimit?: boolean | undefined;
  /** The clock of decisions and of answers made without the store; the store's own clock when unset. */
  readonly clock?: Clock | undefined;
  /**
   * Stored overrides: each descriptor's policies are resolved through them before the limiter decides
   * (the descriptor's key, then its `tenant` entry, then its `plan` entry). Decisions then take the
   * promise path, also over a synchronous store.
   */
  readonly overrides?: Overrides | undefined;
  /** Where the leases of the config's concurrency limits live; needed when a rule has `concurrency`. */
  readonly permits?: PermitStore | undefined;
  /** Told of every permit acquired, refused, released or expired (the metrics). */
  readonly permitEvents?: PermitEvents | undefined;
  /** The longest wait of a permit acquire (its `timeoutMs`), ms. @default 30_000 */
  readonly maxPermitWaitMs?: number | undefined;
  /**
   * The secret settlements are signed with (the limiter's `settleSecret`): the same in every process
   * that shares the store, so a settlement issued by one process settles on any other. Settled
   * decisions are remembered in the store (`settleOnce: 'store'`), so one settles once in the fleet.
   * Unset: the limiter's own random secret, and only the engine that issued a settlement can settle it.
   */
  readonly settleSecret?: string | undefined;
}

/** A limit sent with a descriptor instead of the configured one (Envoy's descriptor `limit`). */
export interface LimitOverride {
  readonly requestsPerUnit: number;
  /** One of second, minute, hour, day, week, month, year. */
  readonly unit: string;
}

/** One descriptor of a request. */
export interface DescriptorRequest {
  readonly entries: readonly DescriptorEntry[];
  /** This descriptor's cost, instead of the request's. */
  readonly cost?: number | undefined;
  readonly limit?: LimitOverride | undefined;
}

/** A request: a domain and descriptors, each decided on its own (as Envoy's rate limit service does). */
export interface DecisionRequest {
  readonly domain: string;
  readonly descriptors: readonly DescriptorRequest[];
  /** Cost of every descriptor that does not give its own. @default 1 */
  readonly cost?: number | undefined;
  /**
   * Decide whatever Envoy's protocol allows (the gRPC API): up to {@link MAX_GRPC_DESCRIPTORS}, with no
   * bound per descriptor but the message's; a cost above `MAX_COST` (a `hits_addend` up to 2^64 − 1) counts
   * as `MAX_COST`, more than any limit; a limit sent with a descriptor in a unit Envoy does not define is
   * ignored (the config decides that descriptor). Otherwise (the HTTP API) such a request is refused
   * with a {@link RequestError}.
   */
  readonly lenient?: boolean | undefined;
  /**
   * The costs are estimates: each descriptor admitted under a rule whose policies can settle (meters:
   * gcra, a continuous tokenBucket, a leakyBucket as a meter) answers a `settlement`, for a later
   * {@link Engine.settle} at its actual cost. Other descriptors are charged as usual. `limit` only.
   */
  readonly settle?: boolean | undefined;
}

/** One descriptor of a settle call: its entries as decided, the settlement it got, its actual cost. */
export interface SettleDescriptor {
  readonly entries: readonly DescriptorEntry[];
  /** The `settlement` the decision answered for this descriptor, unchanged. */
  readonly settlement: unknown;
  /** What the call really cost (0, or 1e-9 to 2^53 − 1). */
  readonly cost: number;
}

/** A settle call: descriptors decided with `settle`, each settled at its actual cost. */
export interface SettleCall {
  readonly domain: string;
  readonly descriptors: readonly SettleDescriptor[];
}

/** The answer of one settled descriptor. */
export interface SettleOutcome {
  readonly rule: string | undefined;
  /** True when the store settled it; false when there was nothing to settle (the estimate exactly, or a refund past its time). */
  readonly settled: boolean;
}

/** Most descriptors in one settle call. */
export const MAX_SETTLE_DESCRIPTORS = MAX_DESCRIPTORS;

/** The answer for one descriptor. */
export interface DescriptorOutcome {
  /** `OVER_LIMIT` only when denied by a rule that is not in shadow mode. */
  readonly code: 'OK' | 'OVER_LIMIT';
  /** True when a rule with policies (or an unlimited rule, or a request override) applied. */
  readonly matched: boolean;
  /** The rule's label, when one matched. */
  readonly rule: string | undefined;
  readonly shadow: boolean;
  readonly unlimited: boolean;
  /** The policies applied (for headers), when any. */
  readonly policies: readonly Policy[] | undefined;
  /** The limiter's decision, when policies applied (not for `reset`). */
  readonly decision: Decision | undefined;
  /**
   * The limit as envoyproxy/ratelimit reports it (`current_limit`): for its rules, and the limits Envoy
   * sends with descriptors of its domains.
   */
  readonly envoy?: EnvoyLimit | undefined;
  /**
   * With `envoy`: ms until the limit's window ends, as that service reports it (`duration_until_reset`),
   * also while nothing is counted in the window yet.
   */
  readonly envoyResetMs?: number | undefined;
  /** True when the limit came with the request (Envoy's descriptor `limit`), not from the config. */
  readonly requestLimit?: boolean | undefined;
  /** Admitted with `settle`: what {@link Engine.settle} needs to charge the actual cost. */
  readonly settlement?: Settlement | undefined;
  /**
   * True when a rule charged at stream end (`charge_on_stream_done`) charged the descriptor's cost whatever
   * its state, past the limit as a debt, and answered OK.
   */
  readonly charged?: boolean | undefined;
}

/**
 * Whether a request's answer is OVER_LIMIT overall, as envoyproxy/ratelimit decides it (master since
 * its quota mode, #1045, January 2026): when a descriptor that is not in `quota_mode` is over its limit,
 * or when the request has descriptors in `quota_mode` and every one of them is over. Unlimited
 * descriptors and limits sent with the request are never in quota mode.
 */
export function overLimit(outcomes: readonly DescriptorOutcome[]): boolean {
  let quotas = 0;
  let quotasOver = 0;
  for (let i = 0; i < outcomes.length; i++) {
    const o = outcomes[i] as DescriptorOutcome;
    if (o.envoy?.quotaMode === true && o.requestLimit !== true && !o.unlimited) {
      quotas++;
      if (o.code === 'OVER_LIMIT') quotasOver++;
    } else if (o.code === 'OVER_LIMIT') {
      return true;
    }
  }
  return quotas > 0 && quotasOver === quotas;
}

/** A request the service refuses: bad input, named by its field. */
export class RequestError extends Error {
  override readonly name = 'RequestError';
  constructor(
    readonly kind: 'invalid',
    message: string,
    /** The request field at fault: `descriptors[2].entries[0].value`. */
    readonly field: string,
  ) {
    super(message);
  }
}

const UNIT_MS = ENVOY_UNITS;

/** Units accepted in a {@link LimitOverride}. */
export const OVERRIDE_UNITS: readonly string[] = [...UNIT_MS.keys()];

/**
 * What a descriptor gets: nothing (no rule, or a replaced one), an unlimited rule, a rule that denies
 * every call (`requests_per_unit: 0`), or policies decided by the limiter.
 */
type PlanKind = 'none' | 'unlimited' | 'deny' | 'policies';

interface Planned {
  kind: PlanKind;
  /** The limit came with the request. */
  readonly requestLimit?: boolean;
  readonly rule: Rule | undefined;
  readonly key: string;
  readonly policies: readonly Policy[] | undefined;
  readonly tallies: readonly Tally[] | undefined;
  readonly shadow: boolean;
  readonly cost: number;
  readonly envoy: EnvoyLimit | undefined;
  /** A call of a `charge_on_stream_done` rule that carries its own cost: charged, never denied. */
  readonly charge?: boolean;
}

const NONE: Omit<Planned, 'cost'> = Object.freeze({
  kind: 'none',
  rule: undefined,
  key: '',
  policies: undefined,
  tallies: undefined,
  shadow: false,
  envoy: undefined,
});

/** A lease descriptor of an Envoy call: its entries without the lease ones, the lease's id, what to do. */
interface EnvoyLease {
  readonly entries: DescriptorEntry[];
  readonly leaseId: string;
  readonly release: boolean;
  readonly cost: number;
}

/** The lease descriptors of an Envoy call by index (undefined for the others); undefined when it has none. */
function envoyLeases(desk: PermitDesk, request: DecisionRequest): (EnvoyLease | undefined)[] | undefined {
  if (!Array.isArray(request.descriptors) || request.descriptors.length > MAX_GRPC_DESCRIPTORS) return undefined;
  let any = false;
  const leases = request.descriptors.map((d) => {
    const lease = Array.isArray(d.entries) ? desk.envoyLease(request.domain, d.entries) : undefined;
    if (lease === undefined) return undefined;
    any = true;
    // A permit's cost is a whole number: Envoy's hits_addend, at least 1.
    const cost = Math.max(1, Math.min(Math.floor(d.cost ?? request.cost ?? 1), MAX_PERMIT_COST));
    return { ...lease, cost };
  });
  return any ? leases : undefined;
}

/** The largest permit cost an Envoy call asks for (a larger one is refused as exceeding any limit). */
const MAX_PERMIT_COST = 2 ** 31;

/** The outcome of a lease descriptor: a permit decision (OVER_LIMIT when refused), or OK with none. */
function permitOutcome(matched: boolean, rule: string | null, decision: Decision | undefined): DescriptorOutcome {
  return {
    code: decision !== undefined && !decision.allowed ? 'OVER_LIMIT' : 'OK',
    matched,
    rule: rule ?? undefined,
    shadow: false,
    unlimited: false,
    policies: undefined,
    decision,
  };
}

/** A config with concurrency limits on a store that holds no permits (one given to the service without them). */
export class ConcurrencyUnsupported extends Error {
  override readonly name = 'ConcurrencyUnsupported';
}

/** Label of a deny-all limit's decision (it has no policy). */
const DENY_ALL_POLICY = 'requests-per-unit-0';

const UNMATCHED: DescriptorOutcome = Object.freeze({
  code: 'OK',
  matched: false,
  rule: undefined,
  shadow: false,
  unlimited: false,
  policies: undefined,
  decision: undefined,
});

/**
 * Turns requests into decisions under one config: matches each descriptor to its rule, then asks the
 * limiter. One engine per loaded config; all engines of a service share the store, so a reload keeps
 * every counter.
 */
export class Engine {
  readonly limiter: Limiter;
  readonly domains: ReadonlyMap<string, CompiledDomain>;
  /** True when the store decides synchronously: callers may skip promises entirely. */
  readonly sync: boolean;
  /** The concurrency limits of the config's rules, when it has some. */
  readonly permits: PermitDesk | undefined;
  private readonly overrides = new Map<string, readonly Policy[]>();
  private readonly overrideTally: Map<string, Tally> = new Map();
  private readonly stopIncrement: boolean;
  private readonly clock: Clock | undefined;
  private readonly overrideStore: Overrides | undefined;
  /** Whether each (frozen, reused) policy list can settle. */
  private readonly settleable = new WeakMap<readonly Policy[], boolean>();

  constructor(
    readonly config: ServiceConfig,
    store: Store,
    private readonly stats: DecisionStats,
    options: EngineOptions = {},
  ) {
    this.overrideStore = options.overrides;
    this.sync = isSyncStore(store) && options.overrides === undefined;
    this.stopIncrement = options.stopIncrementWhenOverLimit ?? false;
    this.clock = options.clock;
    this.limiter = createLimiter({
      store,
      prefix: config.prefix,
      // No `storeTimeoutMs`: no timer (the service's 0), not the limiter's default.
      ...(this.sync ? {} : { timeoutMs: options.storeTimeoutMs ?? false }),
      ...(options.failure === undefined ? {} : { failure: options.failure }),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
      ...(options.settleSecret === undefined ? {} : { settleSecret: options.settleSecret, settleOnce: 'store' }),
    });
    this.domains = compileRules(config, stats);
    this.permits = this.permitDesk(options);
    // An Envoy call's permits are taken on the promise path.
    if (this.permits !== undefined) this.sync = false;
  }

  /** The permit desk of a config with concurrency limits; refused when the store holds no permits. */
  private permitDesk(options: EngineOptions): PermitDesk | undefined {
    const limited = [...this.domains.values()].find((d) => d.rules.some((r) => r.concurrency !== undefined));
    if (limited === undefined) return undefined;
    if (options.permits === undefined) {
      const rule = limited.rules.find((r) => r.concurrency !== undefined) as Rule;
      throw new ConcurrencyUnsupported(
        `rule ${JSON.stringify(rule.label)} of domain ${JSON.stringify(limited.domain)} has a concurrency limit, and the ${this.limiter.store.name} store holds no permits (the stores the service opens from a URL all do)`,
      );
    }
    return new PermitDesk(
      this.domains,
      options.permits,
      this.config.prefix,
      this.clock,
      options.permitEvents,
      options.maxPermitWaitMs,
    );
  }

  /** Decides synchronously; only when {@link sync} is true. Throws {@link RequestError} or store errors. */
  decideSync(request: DecisionRequest, mode: Mode): DescriptorOutcome[] {
    const started = performance.now();
    const plan = this.plan(request, mode);
    const out = new Array<DescriptorOutcome>(plan.length);
    const limiter = this.limiter;
    const spare = this.spareUnderLimit(request, plan, mode);
    if (spare !== undefined) {
      // envoyproxy/ratelimit's switch: check every descriptor, then charge only those that go over.
      const over = plan.map((p) =>
        p.kind === 'policies'
          ? !limiter.checkSync(p.key, { policies: policiesOf(p), cost: p.cost }).allowed
          : wouldDeny(p),
      );
      const any = over.some(Boolean);
      for (let i = 0; i < spare.length; i++) spare[i] = any && !over[i];
    }
    for (let i = 0; i < plan.length; i++) {
      const p = plan[i] as Planned;
      if (p.kind !== 'policies') {
        out[i] = this.storeless(p, mode);
        continue;
      }
      if (mode === 'limit' && p.charge === true) {
        limiter.chargeSync(p.key, { policies: policiesOf(p), cost: p.cost });
        out[i] = this.chargedOutcome(p);
        continue;
      }
      const options = this.callOptions(p, spare?.[i] === true, mode, request);
      let decision: Decision | undefined;
      if (mode === 'limit')
        decision = spare?.[i] ? limiter.checkSync(p.key, options) : limiter.limitSync(p.key, options);
      else if (mode === 'check') decision = limiter.checkSync(p.key, options);
      else if (mode === 'status') decision = limiter.statusSync(p.key, options);
      else limiter.resetSync(p.key, options);
      out[i] = this.outcome(p, decision, mode);
    }
    this.stats.latency.record(performance.now() - started);
    return out;
  }

  /** Decides all descriptors concurrently (one round trip to the store in the common case). */
  async decide(request: DecisionRequest, mode: Mode): Promise<DescriptorOutcome[]> {
    if (this.sync) return this.decideSync(request, mode);
    const desk = this.permits;
    if (desk !== undefined && mode === 'limit' && request.lenient === true) {
      const leases = envoyLeases(desk, request);
      if (leases !== undefined) return this.decideWithPermits(desk, request, leases);
    }
    const started = performance.now();
    const plan = this.plan(request, mode);
    if (this.overrideStore !== undefined) await applyOverrides(this.overrideStore, request, plan);
    const limiter = this.limiter;
    const spare = this.spareUnderLimit(request, plan, mode);
    if (spare !== undefined) {
      // envoyproxy/ratelimit's switch: check every descriptor, then charge only those that go over.
      const over = await Promise.all(
        plan.map(async (p) =>
          p.kind === 'policies'
            ? !(await limiter.check(p.key, { policies: policiesOf(p), cost: p.cost })).allowed
            : wouldDeny(p),
        ),
      );
      const any = over.some(Boolean);
      for (let i = 0; i < spare.length; i++) spare[i] = any && !over[i];
    }
    const outcomes = await Promise.all(
      plan.map(async (p, i): Promise<DescriptorOutcome> => {
        if (p.kind !== 'policies') return this.storeless(p, mode);
        if (mode === 'limit' && p.charge === true) {
          await limiter.charge(p.key, { policies: policiesOf(p), cost: p.cost });
          return this.chargedOutcome(p);
        }
        const options = this.callOptions(p, spare?.[i] === true, mode, request);
        let decision: Decision | undefined;
        if (mode === 'limit') {
          decision = spare?.[i] ? await limiter.check(p.key, options) : await limiter.limit(p.key, options);
        } else if (mode === 'check') decision = await limiter.check(p.key, options);
        else if (mode === 'status') decision = await limiter.status(p.key, options);
        else await limiter.reset(p.key, options);
        return this.outcome(p, decision, mode);
      }),
    );
    this.stats.latency.record(performance.now() - started);
    return outcomes;
  }

  /**
   * Settles descriptors decided with `settle` at their actual costs: each descriptor's entries are
   * matched again to find its key and policies; every cost, entry and settlement shape is checked before
   * the store is asked. A settlement forged, altered, for other entries, or settled already (anywhere in
   * a fleet sharing the secret) is refused by the limiter before its own store call.
   */
  async settle(call: SettleCall): Promise<SettleOutcome[]> {
    const descriptors = call.descriptors;
    if (!Array.isArray(descriptors) || descriptors.length === 0 || descriptors.length > MAX_SETTLE_DESCRIPTORS) {
      throw new RequestError(
        'invalid',
        `descriptors is required: a list of 1 to ${MAX_SETTLE_DESCRIPTORS} { entries, settlement, cost }, got ${showValue(descriptors)}`,
        'descriptors',
      );
    }
    for (let i = 0; i < descriptors.length; i++) {
      const d = descriptors[i] as SettleDescriptor;
      if (d.cost === undefined) {
        throw new RequestError(
          'invalid',
          `descriptors[${i}].cost is required: what the call really cost`,
          `descriptors[${i}].cost`,
        );
      }
      const s = d.settlement;
      if (typeof s !== 'object' || s === null || Array.isArray(s)) {
        throw new RequestError(
          'invalid',
          `descriptors[${i}].settlement must be the settlement object the decision answered, got ${showValue(s)}`,
          `descriptors[${i}].settlement`,
        );
      }
    }
    // The same checks as a decision's (entries, costs, the domain), with the costs as the actual ones.
    const plan = this.plan(
      { domain: call.domain, descriptors: descriptors.map((d) => ({ entries: d.entries, cost: d.cost })) },
      'check',
    );
    if (this.overrideStore !== undefined) await applyOverrides(this.overrideStore, call as DecisionRequest, plan);
    for (let i = 0; i < plan.length; i++) {
      const p = plan[i] as Planned;
      if (p.kind !== 'policies' || !this.canSettle(policiesOf(p))) {
        throw new RequestError(
          'invalid',
          `descriptors[${i}] matches no rule whose policies can settle: nothing was settled for it`,
          `descriptors[${i}]`,
        );
      }
    }
    return Promise.all(
      plan.map(async (p, i): Promise<SettleOutcome> => {
        const d = descriptors[i] as SettleDescriptor;
        try {
          const settled = await this.limiter.settle(p.key, { settlement: d.settlement } as unknown as Decision, {
            cost: p.cost,
            policies: policiesOf(p),
          });
          return { rule: p.rule?.label, settled };
        } catch (error) {
          throw settleRefused(error, i);
        }
      }),
    );
  }

  /** The options of a descriptor's call: `settle` when asked for and its policies can settle. */
  private callOptions(
    p: Planned,
    spare: boolean,
    mode: Mode,
    request: DecisionRequest,
  ): { policies: readonly Policy[]; cost: number; settle?: boolean } {
    const policies = policiesOf(p);
    const cost = spare ? 0 : p.cost;
    if (mode === 'limit' && !spare && request.settle === true && this.canSettle(policies)) {
      return { policies, cost, settle: true };
    }
    return { policies, cost };
  }

  /** True when every policy of the list can settle (the model's `settleRefusal`). */
  private canSettle(policies: readonly Policy[]): boolean {
    let can = this.settleable.get(policies);
    if (can === undefined) {
      can = policies.every((policy) => settleRefusal(compilePolicy(policy)) === undefined);
      this.settleable.set(policies, can);
    }
    return can;
  }

  /** The answer of a stream-done charge: OK, counted as admitted. */
  private chargedOutcome(p: Planned): DescriptorOutcome {
    for (const tally of p.tallies ?? []) tally.allowed++;
    this.stats.decisions.allowed++;
    return {
      code: 'OK',
      matched: true,
      rule: p.rule?.label,
      shadow: p.shadow,
      unlimited: false,
      policies: p.policies,
      decision: undefined,
      charged: true,
    };
  }

  /**
   * An Envoy call with lease descriptors (see permits.ts): those take or release a permit, the others are
   * decided as usual. A request over the limit (a refused permit, a rate descriptor over) holds no permit
   * afterwards: the ones this call granted are released before it answers.
   */
  private async decideWithPermits(
    desk: PermitDesk,
    request: DecisionRequest,
    leases: readonly (EnvoyLease | undefined)[],
  ): Promise<DescriptorOutcome[]> {
    const rest = request.descriptors.filter((_, i) => leases[i] === undefined);
    const none = Promise.resolve(undefined);
    const [decided, permits] = await Promise.all([
      rest.length === 0 ? Promise.resolve([]) : this.decide({ ...request, descriptors: rest }, 'limit'),
      Promise.all(leases.map((lease) => (lease === undefined ? none : this.permitOutcome(desk, request, lease)))),
    ]);
    let next = 0;
    const outcomes = permits.map((p) => p?.outcome ?? (decided[next++] as DescriptorOutcome));
    if (overLimit(outcomes)) {
      await Promise.all(
        permits.map((p) =>
          p?.granted === true
            ? desk.release({ domain: request.domain, entries: p.entries, lenient: true }, p.leaseId)
            : none,
        ),
      );
    }
    return outcomes;
  }

  /** One lease descriptor of an Envoy call: a permit taken (OVER_LIMIT when refused), or released (OK). */
  private async permitOutcome(
    desk: PermitDesk,
    request: DecisionRequest,
    lease: EnvoyLease,
  ): Promise<{ outcome: DescriptorOutcome; granted: boolean; entries: DescriptorEntry[]; leaseId: string }> {
    const call = { domain: request.domain, entries: lease.entries, lenient: true };
    if (lease.release) {
      const { matched, rule } = await desk.release(call, lease.leaseId);
      return { outcome: permitOutcome(matched, rule, undefined), granted: false, ...lease };
    }
    const answer = await desk.acquire({ ...call, cost: lease.cost }, lease.leaseId);
    const d = answer.decision;
    const decision: Decision | undefined =
      d === undefined
        ? undefined
        : {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retryAfterMs: d.retryAfterMs,
            resetAfterMs: d.resetAfterMs,
            policy: d.policy,
            ...(d.reason === undefined ? {} : { reason: d.reason }),
            policies: [],
          };
    return {
      outcome: permitOutcome(answer.matched, answer.rule, decision),
      granted: d?.permit !== undefined,
      ...lease,
    };
  }

  /**
   * With envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (domains of its format, calls
   * that charge, two limits or more): a flag per descriptor, to be set for those left uncharged.
   */
  private spareUnderLimit(request: DecisionRequest, plan: readonly Planned[], mode: Mode): boolean[] | undefined {
    if (!this.stopIncrement || mode !== 'limit') return undefined;
    if (this.domains.get(request.domain)?.format !== 'envoy') return undefined;
    let limited = 0;
    for (const p of plan) if (p.kind === 'policies' || p.kind === 'deny') limited++;
    return limited < 2 ? undefined : new Array<boolean>(plan.length).fill(false);
  }

  /** The answer of a descriptor decided without the store: no rule, an unlimited or a deny-all one. */
  private storeless(p: Planned, mode: Mode): DescriptorOutcome {
    if (p.kind === 'unlimited') return unlimitedOutcome(p.rule as Rule);
    if (p.kind !== 'deny') return UNMATCHED;
    // `requests_per_unit: 0`: every call is over the limit, until the end of time; the window's end is
    // reported as the reset, as envoyproxy/ratelimit reports it.
    const envoy = p.envoy as EnvoyLimit;
    const resetAfterMs = this.untilWindowEnd(envoy.windowMs);
    const policy = envoy.name ?? DENY_ALL_POLICY;
    const part: PolicyDecision = {
      policy,
      allowed: false,
      limit: 0,
      remaining: 0,
      retryAfterMs: Number.POSITIVE_INFINITY,
      resetAfterMs,
      reason: 'limit',
    };
    const decision: Decision = { ...part, policies: [part] };
    const tally = p.rule?.denyTally;
    if (mode === 'limit' && tally !== undefined) {
      if (p.shadow) tally.shadowDenied++;
      else tally.denied++;
    }
    return {
      code: p.shadow ? 'OK' : 'OVER_LIMIT',
      matched: true,
      rule: p.rule?.label,
      shadow: p.shadow,
      unlimited: false,
      policies: undefined,
      decision: mode === 'reset' ? undefined : decision,
      envoy,
      envoyResetMs: resetAfterMs,
      requestLimit: p.requestLimit,
    };
  }

  /** ms until the current window of this length ends, on the engine's clock (whole ms, rounded up). */
  private untilWindowEnd(windowMs: number): number {
    const nowMs = this.clock === undefined ? Date.now() : this.clock.nowUs() / 1000;
    return Math.ceil(windowMs - (nowMs % windowMs));
  }

  private outcome(p: Planned, decision: Decision | undefined, mode: Mode): DescriptorOutcome {
    let code: 'OK' | 'OVER_LIMIT' = 'OK';
    if (decision !== undefined && !decision.allowed) code = p.shadow ? 'OK' : 'OVER_LIMIT';
    if (decision !== undefined) {
      if (mode === 'limit') {
        count(decision, p.tallies as readonly Tally[], p.shadow);
        countOnce(decision, this.stats.decisions, p.shadow);
      }
      if (decision.reason === 'degraded') this.stats.degraded++;
    }
    const envoy = p.envoy;
    return {
      code,
      matched: true,
      rule: p.rule?.label,
      shadow: p.shadow,
      unlimited: false,
      policies: p.policies,
      decision,
      envoy,
      requestLimit: p.requestLimit,
      ...(decision?.settlement === undefined ? {} : { settlement: decision.settlement }),
      envoyResetMs:
        envoy === undefined || decision === undefined
          ? undefined
          : decision.resetAfterMs > 0 && Number.isFinite(decision.resetAfterMs)
            ? decision.resetAfterMs
            : this.untilWindowEnd(envoy.windowMs),
    };
  }

  /** Validates the whole request and matches every descriptor before the store is touched. */
  private plan(request: DecisionRequest, mode: Mode): Planned[] {
    const lenient = request.lenient === true;
    const domainName = request.domain;
    const descriptors = checkShape(request, lenient);
    const requestCost = lenient ? saturate(request.cost ?? 1) : (request.cost ?? 1);
    if (!lenient) checkCost(requestCost, 'cost');
    const domain = this.domains.get(domainName);
    // An unknown domain is answered OK, unmatched, as Envoy expects of a rate limit service; the HTTP
    // API refuses it before calling the engine.
    if (domain === undefined) this.stats.unknownDomain++;
    const envoyFormat = domain?.format === 'envoy';
    const plan = new Array<Planned>(descriptors.length);
    let replacing: Set<string> | undefined;
    for (let i = 0; i < descriptors.length; i++) {
      const d = descriptors[i] as DescriptorRequest;
      if (!lenient) checkEntries(d, i);
      let cost = requestCost;
      if (d.cost !== undefined) {
        if (lenient) cost = saturate(d.cost);
        else {
          checkCost(d.cost, `descriptors[${i}].cost`);
          cost = d.cost;
        }
      }
      if (domain === undefined) {
        plan[i] = { ...NONE, cost };
        continue;
      }
      const match = matchDescriptor(domain, d.entries);
      const rule = match?.rule;
      const override = d.limit === undefined ? undefined : this.override(d.limit, i, envoyFormat, lenient);
      if (override !== undefined) {
        // envoyproxy/ratelimit applies a limit sent by Envoy on the descriptor's own entries, never in
        // shadow mode; floodgate's format keeps the rule's counter and shadow mode.
        const key = envoyFormat
          ? boundedKey(plainKey(domain.domain, d.entries))
          : boundedKey(match?.key ?? plainKey(domain.domain, d.entries));
        plan[i] = {
          kind: override.policies === undefined ? 'deny' : 'policies',
          rule,
          key,
          policies: override.policies,
          tallies: override.policies === undefined ? undefined : [this.overrideTallyOf(domain.domain)],
          shadow: envoyFormat ? false : (rule?.shadow ?? domain.shadow),
          cost,
          envoy: override.envoy,
          requestLimit: true,
        };
        continue;
      }
      if (rule?.envoy !== undefined && rule.envoy.replaces.length > 0) {
        replacing ??= new Set();
        for (const name of rule.envoy.replaces) replacing.add(name);
      }
      if (rule === undefined || (rule.policies.length === 0 && !rule.unlimited && rule.envoy?.denyAll !== true)) {
        if (mode === 'limit') domain.unmatched.allowed++;
        plan[i] = { ...NONE, cost };
      } else if (rule.unlimited) {
        plan[i] = { ...NONE, kind: 'unlimited', rule, shadow: rule.shadow, cost };
      } else if (rule.chargeOnStreamDone) {
        plan[i] = streamDonePlan(rule, boundedKey((match as { key: string }).key), d.cost === undefined ? 0 : cost);
      } else {
        plan[i] = {
          kind: rule.envoy?.denyAll === true ? 'deny' : 'policies',
          rule,
          key: boundedKey((match as { key: string }).key),
          policies: rule.envoy?.denyAll === true ? undefined : rule.policies,
          tallies: rule.tallies,
          shadow: rule.shadow,
          cost,
          envoy: rule.envoy,
        };
      }
    }
    if (replacing !== undefined) {
      // envoyproxy/ratelimit's `replaces`: a limit whose name another limit of the request replaces is
      // not applied (answered OK without a limit, nothing counted).
      for (const p of plan) {
        const name = p.envoy === undefined || p.rule?.envoy !== p.envoy ? undefined : p.envoy.name;
        if (name !== undefined && (p.kind === 'policies' || p.kind === 'deny') && replacing.has(name)) {
          p.kind = 'none';
        }
      }
    }
    return checkResolutions(plan, descriptors);
  }

  /**
   * The policies of a limit sent with a descriptor (undefined: deny every call), one frozen array per
   * distinct limit, so the limiter compiles it once; undefined when a lenient request's limit is ignored.
   * envoyproxy/ratelimit's domains run it as their own limits run (a counter per descriptor and unit,
   * `requests_per_unit` 0 denying every call); floodgate's as a fixed window of its own name.
   */
  private override(
    limit: LimitOverride,
    index: number,
    envoyFormat: boolean,
    lenient: boolean,
  ): { policies: readonly Policy[] | undefined; envoy: EnvoyLimit | undefined } | undefined {
    const field = `descriptors[${index}].limit`;
    const unitMs = typeof limit.unit === 'string' ? UNIT_MS.get(limit.unit) : undefined;
    if (unitMs === undefined) {
      if (lenient) return undefined;
      throw new RequestError(
        'invalid',
        `${field}.unit must be one of ${OVERRIDE_UNITS.join(', ')}, got ${showValue(limit.unit)}`,
        `${field}.unit`,
      );
    }
    const n = limit.requestsPerUnit;
    const most = envoyFormat ? 4_294_967_295 : MAX_OVERRIDE_REQUESTS_PER_UNIT;
    const least = envoyFormat ? 0 : 1;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < least || n > most) {
      if (lenient) return undefined;
      throw new RequestError(
        'invalid',
        `${field}.requestsPerUnit must be an integer from ${least} to ${envoyFormat ? most : '1e12'}, got ${showValue(n)}`,
        `${field}.requestsPerUnit`,
      );
    }
    const unit = limit.unit;
    const envoy = envoyFormat ? envoyLimit(n, unit, undefined) : undefined;
    if (envoyFormat && n === 0) return { policies: undefined, envoy };
    const id = `${envoyFormat ? 'envoy:' : ''}${n}/${unit}`;
    let policies = this.overrides.get(id);
    if (policies === undefined) {
      policies = Object.freeze([
        envoyFormat
          ? envoyPolicy(n, unit)
          : fixedWindow({ limit: n, windowMs: unitMs, name: `override-${n}-per-${unit}` }),
      ]);
      // Bounded: overrides come from requests.
      if (this.overrides.size >= MAX_CACHED_OVERRIDES) this.overrides.clear();
      this.overrides.set(id, policies);
    }
    return { policies, envoy };
  }

  private overrideTallyOf(domain: string): Tally {
    let tally = this.overrideTally.get(domain);
    if (tally === undefined) {
      tally = this.stats.tally(domain, '(request override)', OVERRIDE_POLICY_LABEL);
      this.overrideTally.set(domain, tally);
    }
    return tally;
  }
}

/**
 * A descriptor of a `charge_on_stream_done` rule. Envoy's stream-done call carries the actual cost as the
 * descriptor's own `hits_addend` (`ownCost`): charged whatever the key's state. Any other call of the rule
 * (the request's, with no cost of its own, or 0) only checks, so it denies while the key is in debt.
 */
function streamDonePlan(rule: Rule, key: string, ownCost: number): Planned {
  const charge = ownCost > 0;
  return {
    kind: 'policies',
    rule,
    key,
    policies: rule.policies,
    tallies: rule.tallies,
    shadow: rule.shadow,
    cost: charge ? ownCost : 0,
    envoy: undefined,
    charge,
  };
}

/** The request's domain and descriptor list, checked before anything is matched. */
function checkShape(request: DecisionRequest, lenient: boolean): readonly DescriptorRequest[] {
  const domainName = request.domain;
  if (typeof domainName !== 'string' || domainName.length === 0) {
    throw new RequestError('invalid', `domain is required: a non-empty string, got ${showValue(domainName)}`, 'domain');
  }
  const descriptors = request.descriptors;
  if (!Array.isArray(descriptors) || descriptors.length === 0) {
    throw new RequestError(
      'invalid',
      `descriptors is required: a non-empty list, got ${showValue(descriptors)}`,
      'descriptors',
    );
  }
  const most = lenient ? MAX_GRPC_DESCRIPTORS : MAX_DESCRIPTORS;
  if (descriptors.length > most) {
    throw new RequestError(
      'invalid',
      `at most ${most} descriptors per request, got ${descriptors.length}`,
      'descriptors',
    );
  }
  return descriptors;
}

/** A settle's refusal by the limiter, as the request's fault, naming the descriptor's field at fault. */
function settleRefused(error: unknown, index: number): unknown {
  if (!isFloodgateError(error)) return error;
  const at = `descriptors[${index}]`;
  switch (error.option) {
    case 'decision':
      return new RequestError('invalid', `${at}.settlement: ${error.message}`, `${at}.settlement`);
    case 'policies':
      return new RequestError(
        'invalid',
        `${at}: the rule's policies changed since the call was decided (${error.message})`,
        `${at}`,
      );
    default:
      return error.code === 'ERR_INVALID_COST' ? new RequestError('invalid', error.message, `${at}.cost`) : error;
  }
}

/** The policies of a descriptor the limiter decides. */
function policiesOf(p: Planned): readonly Policy[] {
  return p.policies as readonly Policy[];
}

/** True for a descriptor that goes over its limit without asking the store: a deny-all charged call. */
function wouldDeny(p: Planned): boolean {
  return p.kind === 'deny' && p.cost > 0;
}

/** A cost from a gRPC request: counts above `MAX_COST` (every limit is far below) count as `MAX_COST`. */
function saturate(cost: number): number {
  return Math.min(cost, MAX_COST);
}

function unlimitedOutcome(rule: Rule): DescriptorOutcome {
  return {
    code: 'OK',
    matched: true,
    rule: rule.label,
    shadow: rule.shadow,
    unlimited: true,
    policies: undefined,
    decision: undefined,
  };
}

/** Counts a decision: every policy of an admitted call admitted it; a denial counts on the policies that denied. */
function count(decision: Decision, tallies: readonly Tally[], shadow: boolean): void {
  const parts = decision.policies;
  if (decision.allowed) {
    for (let i = 0; i < tallies.length; i++) (tallies[i] as Tally).allowed++;
    return;
  }
  for (let i = 0; i < parts.length; i++) {
    if ((parts[i] as PolicyDecision).allowed) continue;
    const tally = tallies[i];
    if (tally === undefined) continue;
    if (shadow) tally.shadowDenied++;
    else tally.denied++;
  }
}

/** Counts a decision once, however many policies decided it. */
function countOnce(decision: Decision, tally: Tally, shadow: boolean): void {
  if (decision.allowed) tally.allowed++;
  else if (shadow) tally.shadowDenied++;
  else tally.denied++;
}

/** The library's one cost domain (0, or MIN_COST to MAX_COST), reported against the request's field. */
function checkCost(cost: unknown, field: string): void {
  try {
    validateCost(cost, field);
  } catch (error) {
    throw new RequestError('invalid', (error as Error).message, field);
  }
}

/**
 * A cost below the resolution of a policy it is charged to (a cost the policy's count could lose in
 * rounding, `checkResolution`) is the client's fault, refused before any descriptor reaches the store.
 */
function checkResolutions(plan: Planned[], descriptors: readonly DescriptorRequest[]): Planned[] {
  for (let i = 0; i < plan.length; i++) {
    const p = plan[i] as Planned;
    if (p.kind !== 'policies' || p.policies === undefined || !(p.cost > 0 && p.cost < 1)) continue;
    const field = descriptors[i]?.cost === undefined ? 'cost' : `descriptors[${i}].cost`;
    try {
      checkResolution(p.policies.map(compilePolicy), p.cost, field);
    } catch (error) {
      throw new RequestError('invalid', (error as Error).message, field);
    }
  }
  return plan;
}

/**
 * A request value as an error message shows it: JSON, cut to 64 characters, so a message never grows
 * with what a client sent; `NaN` and infinities by name, lists and objects by kind.
 */
export function showValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'number') return String(value);
  if (Array.isArray(value)) return `a list of ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'an object';
  if (typeof value === 'string') {
    const text = JSON.stringify(value.length > 64 ? value.slice(0, 64) : value);
    return value.length > 64 ? `${text.slice(0, -1)}…" (${value.length} characters)` : text;
  }
  return typeof value === 'bigint' ? `${value}n` : String(value);
}

function checkEntries(d: DescriptorRequest, index: number): void {
  const entries = d?.entries;
  const field = `descriptors[${index}].entries`;
  if (!Array.isArray(entries) || entries.length === 0) {
    throw new RequestError(
      'invalid',
      `${field} must be a non-empty list of { key, value }, got ${showValue(entries)}`,
      field,
    );
  }
  if (entries.length > MAX_ENTRIES) {
    throw new RequestError('invalid', `${field} has ${entries.length} entries; at most ${MAX_ENTRIES}`, field);
  }
  for (let j = 0; j < entries.length; j++) {
    const e = entries[j] as DescriptorEntry;
    if (typeof e !== 'object' || e === null || Array.isArray(e)) {
      throw new RequestError(
        'invalid',
        `${field}[${j}] must be an object { key, value }, got ${showValue(e)}`,
        `${field}[${j}]`,
      );
    }
    checkText(e.key, `${field}[${j}].key`);
    checkText(e.value, `${field}[${j}].value`);
  }
}

function checkText(text: unknown, field: string): void {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_ENTRY_LENGTH) {
    throw new RequestError(
      'invalid',
      typeof text === 'string'
        ? `${field} must be 1 to ${MAX_ENTRY_LENGTH} characters, got ${text.length}`
        : `${field} must be a string, got ${showValue(text)}`,
      field,
    );
  }
}
