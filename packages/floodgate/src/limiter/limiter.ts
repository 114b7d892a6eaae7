import { type Clock, systemClock, wholeClockUs } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { isPlainKey, validateKey } from '../keys.js';
import { type CompiledPolicy, compilePolicy } from '../model/compile.js';
import { checkResolution, validateCost } from '../model/cost.js';
import type { Decision, PermitGrant } from '../model/decision.js';
import { fixedWindow, type Policy } from '../model/policy.js';
import type { Reservation } from '../model/reservation.js';
import type { Permit } from '../permits/permit.js';
import type { ConcurrencyPolicy } from '../permits/policy.js';
import type { PermitStore } from '../permits/store.js';
import {
  type FastPath,
  type HeldResult,
  isSyncStore,
  type PermitClaim,
  type SettleRequest,
  type Store,
  type StoreRequest,
  type SyncStore,
} from '../stores/store.js';
import { toStoreError } from '../stores/store-errors.js';
import { loadTelemetry, type Telemetry, telemetry, tick } from '../telemetry/otel.js';
import { type AcquireOptions, acquire } from './acquire.js';
import { BlockedCache, type BlockedCacheOptions } from './blocked-cache.js';
import { Breaker, type BreakerOptions, type BreakerState } from './breaker.js';
import { ConcurrencyPart, splitPolicies } from './concurrent.js';
import { cancelOnStore, decisionOf, requireReservable } from './reservation.js';
import { requireSettleable, Settler } from './settle.js';
import { isDegraded, isPending, type Outcome, StoreCall } from './store-call.js';
import {
  normalizePolicies,
  requireSamePolicies,
  statusOptions,
  validateCallOptions,
  validateDelay,
  validateLimiterOptions,
  validateSettle,
} from './validation.js';

export { normalizePolicies } from './validation.js';

/** Options of {@link createLimiter}. */
export interface LimiterOptions {
  /** Where state lives. @default memoryStore() */
  store?: Store;
  /**
   * Policies enforced on every call, all-or-nothing. Calls may pass their own instead (tiers). One of
   * them may be a concurrency policy (`concurrency({ limit, leaseMs })`, with `permits`): an admitted call
   * then holds a permit until `limiter.release(decision)`, beside the rate policies' charge.
   */
  policies?: Policy | ConcurrencyPolicy | readonly (Policy | ConcurrencyPolicy)[];
  /**
   * Where the permits of a concurrency policy among `policies` live: `memoryPermitStore()` or
   * `redisPermitStore({ client })` (floodgate/redis), … Refused without a concurrency policy. Omitted, the
   * store's own permit store (`store.permits`: the memory and Redis stores have one); there, or given as
   * `store.permits`, a `limit` decides the rate policies and the permit in one store call. Another permit
   * store takes two calls, in an order that keeps the decision all or nothing (docs/concurrency.md).
   */
  permits?: PermitStore;
  /** Namespace of this limiter's keys in the store. @default 'floodgate' */
  prefix?: string;
  /**
   * The clock decisions use. By default a store with its own clock (Redis, PostgreSQL) uses it, so app
   * servers with skewed clocks agree; other stores use the system clock. Set it to decide on your time.
   */
  clock?: Clock;
  /**
   * Longest wait for the store on one call, in ms; past it the call fails with `ERR_TIMEOUT` and the
   * `failure` policy decides. `false`: no timer, a call waits as long as the store's client does (with
   * ioredis' default retries, over a minute when Redis is down). Stores that decide synchronously
   * (memory, SQLite) never wait and get no timer.
   * @default 1000 on a store that answers asynchronously (Redis, PostgreSQL)
   */
  timeoutMs?: number | false;
  /**
   * What a call gets when the store fails or times out: `'throw'` rejects with the error, `'open'` admits
   * as if the key were untouched, `'closed'` denies, `{ fallback }` asks another limiter (e.g. one on the
   * memory store), under its own policies when it has some, else under the call's. Decisions made
   * without the store say `reason: 'degraded'`. @default 'throw'
   */
  failure?: FailurePolicy;
  /**
   * Circuit breaker in front of the store: after `failureThreshold` consecutive failures, calls skip the
   * store for `cooldownMs` (decided by `failure` at once), then one call probes it. `false` turns it off.
   * The sync methods (`limitSync`, `checkSync`, `allowSync`) always ask the store. @default { failureThreshold: 5, cooldownMs: 1000 }
   */
  breaker?: BreakerOptions | false;
  /**
   * Answer keys the store denied locally until they may pass again, so a hot denied key costs the store
   * nothing. Exact: only denials that the store would repeat unchanged are remembered (never under a
   * `countDenied` policy, nor a `check` denial under `blockMs`, nor a denial that a policy with `blockMs`
   * did not make). Used by the promise methods with
   * every store; the sync methods (`limitSync`, `checkSync`, `allowSync`) always ask the store, and what it
   * denies them is remembered for the promise methods. `true` for the defaults. @default false
   */
  blockedCache?: BlockedCacheOptions | boolean;
  /** How long a settle may give part of an estimate back, ms (settled calls are remembered that long); then it only charges debts. @default 600000 */
  settleWithinMs?: number;
  /** The secret settlements are signed with (32 to 1024 characters), shared by limiters that settle each other's calls. @default a random one */
  settleSecret?: string;
  /** Where settled decisions are remembered: this limiter, or also the store (once among all limiters sharing it). @default 'limiter' */
  settleOnce?: 'limiter' | 'store';
}

/** What a limiter tells its listeners. */
export interface LimiterEvents {
  /** Every decision: from the store, from the blocked-key cache, or made without the store (degraded). */
  decision: { key: string; cost: number; commit: boolean; decision: Decision; source: 'store' | 'cache' | 'degraded' };
  /** A store call failed or timed out (the decision then follows the `failure` option). */
  storeError: { key: string; error: FloodgateError };
  /**
   * The circuit breaker changed state. On `'open'`, `error` is the store fault that opened it, and until
   * it closes again every call is decided by `failure` without the store (`failure` says how): the
   * HTTP middleware and the service log one line per opening from this event.
   */
  breaker: { state: BreakerState; error?: FloodgateError; failure: FailurePolicy };
}

/** See {@link LimiterOptions.failure}. */
export type FailurePolicy = 'throw' | 'open' | 'closed' | { fallback: Limiter };

/** Options of a single call. */
export interface CallOptions {
  /** What this call consumes; fractions allowed, 0 only checks. @default 1 */
  cost?: number;
  /** Policies for this call instead of the limiter's (a plan's tier). */
  policies?: Policy | readonly Policy[];
  /** Reservations: admit the call if it can proceed within this many ms, and say when (`delayMs`). @default 0 */
  maxDelayMs?: number;
  /** The cost is an estimate: an admitted decision carries a `settlement` for `limiter.settle` (meter policies only). @default false */
  settle?: boolean;
}

/** Options of {@link Limiter.settle}. */
export interface SettleOptions {
  /** What the call really cost (≥ 0): above the estimate the difference is charged, below it given back. */
  cost: number;
  /** The policies the call was made with, when they were not the limiter's. */
  policies?: Policy | readonly Policy[];
}

/** Options of {@link Limiter.charge}. */
export type ChargeOptions = SettleOptions;

/** Options of `status` and `reset`. */
export interface KeyOptions {
  policies?: Policy | readonly Policy[];
}

/**
 * Decides whether calls on a key may proceed, under one or more policies, over any store.
 *
 * @example
 * ```ts
 * const limiter = createLimiter({ policies: [gcra({ limit: 100, periodMs: 60_000 })], prefix: 'api' });
 * const decision = await limiter.limit(clientId);
 * if (!decision.allowed) reply(429, { retryAfterMs: decision.retryAfterMs });
 * ```
 */
export function createLimiter(options: LimiterOptions): Limiter {
  return new Limiter(options);
}

const UNSET = Symbol('unset');

/** A method that cannot hold a permit, on a limiter with a concurrency policy. */
function noConcurrency(method: string): FloodgateError {
  return new FloodgateError(
    'ERR_INVALID_OPTION',
    `${method}() cannot hold a permit: on a limiter with a concurrency policy, call limit() and release the decision`,
    { option: 'policies' },
  );
}

/** A permit store given without a concurrency policy is a mistake: nothing would use it. */
function refuseLonePermits(permits: unknown): undefined {
  if (permits !== undefined) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      'permits is the store of a concurrency policy, and policies has none: add concurrency({ limit, leaseMs })',
      { option: 'permits' },
    );
  }
  return undefined;
}

function requirePolicies(policies: readonly CompiledPolicy[]): readonly CompiledPolicy[] {
  if (policies.length === 0) {
    throw new FloodgateError(
      'ERR_INVALID_POLICY',
      'no policies: give the limiter `policies`, or pass `policies` with the call',
      { option: 'policies' },
    );
  }
  return policies;
}

/** Whether a cost-0 status may hide that a cost-1 call would be denied: some policy has less than 1 left. */
function atLimit(now: Decision): boolean {
  return now.allowed && now.reason !== 'degraded' && now.policies.some((p) => p.remaining < 1);
}

/** A status: what remains now (`now`, cost 0), and whether a call of cost 1 would pass (`next`). */
function statusOf(now: Decision, next: Decision): Decision {
  if (next.allowed || next.reason === 'degraded') return now;
  return {
    ...now,
    allowed: false,
    retryAfterMs: next.retryAfterMs,
    policy: next.policy,
    limit: next.limit,
    remaining: now.policies.find((p) => p.policy === next.policy)?.remaining ?? now.remaining,
    ...(next.reason === undefined ? {} : { reason: next.reason }),
    policies: now.policies.map((p, i) => {
      const n = next.policies[i];
      if (n === undefined || n.allowed) return p;
      return {
        ...p,
        allowed: false,
        retryAfterMs: n.retryAfterMs,
        ...(n.reason === undefined ? {} : { reason: n.reason }),
      };
    }),
  };
}

/** A process warning, or `console.warn` where there is no `process` (edge runtimes, browsers). */
function warn(message: string): void {
  const proc = (globalThis as { process?: { emitWarning?: (message: string) => void } }).process;
  if (typeof proc?.emitWarning === 'function') proc.emitWarning(message);
  else console.warn(`Warning: ${message}`);
}

/**
 * What the leased limiter and the HTTP middleware of this package use of a limiter: its store-call path, its
 * requests and its events. Not part of the public API (not exported from the package).
 */
export interface LimiterInternals {
  readonly calls: StoreCall;
  readonly compiled: readonly CompiledPolicy[];
  readonly clock: Clock | undefined;
  /** Builds a call's store request, validating what it carries (a fresh object, never the reused one). */
  request(key: string, options: CallOptions | undefined, commit: boolean): StoreRequest;
  /** Reports a decision to the `decision` listeners, and returns it. */
  decided(request: StoreRequest, decision: Decision, source: LimiterEvents['decision']['source']): Decision;
  /** Reports a store error to the `storeError` listeners. */
  storeError(event: LimiterEvents['storeError']): void;
  /** The compiled form of a call's own policies (validated, registered under their names). */
  policiesFor(policies: Policy | readonly Policy[]): readonly CompiledPolicy[];
}

const INTERNALS = new WeakMap<Limiter, LimiterInternals>();

/** The internals of a limiter (see {@link LimiterInternals}). */
export function internalsOf(limiter: Limiter): LimiterInternals {
  return INTERNALS.get(limiter) as LimiterInternals;
}

export class Limiter {
  readonly store: Store;
  readonly prefix: string;
  readonly policies: readonly Policy[];
  /** What a call gets when the store fails (see {@link LimiterOptions.failure}). */
  readonly failure: FailurePolicy;
  /** The longest wait for the store on one call, ms; undefined when there is no timer. */
  readonly timeoutMs: number | undefined;
  /** The local cache of denied keys, when enabled. */
  readonly blockedCache: BlockedCache | undefined;
  /** The concurrency policy enforced beside the rate `policies`, when one was given. */
  readonly concurrency: ConcurrencyPolicy | undefined;
  /** The concurrency policy's permits (their store), when there is one. */
  private readonly concurrent: ConcurrencyPart | undefined;
  private readonly compiled: readonly CompiledPolicy[];
  private readonly clock: Clock | undefined;
  private readonly syncStore: SyncStore | undefined;
  /** The store's fast path for calls without options (`SyncStore.fastPath`), when it offers one. */
  private readonly fast: FastPath | undefined;
  private readonly perCall = new WeakMap<object, readonly CompiledPolicy[]>();
  /** Names seen with their state layout: a name reused for another algorithm would corrupt state. */
  private readonly kinds = new Map<string, number>();
  private readonly localClock: Clock;
  private readonly breaker: Breaker | undefined;
  /** The one store-call path: store → breaker → events → the failure policy. */
  private readonly calls: StoreCall;
  private listeners: { [E in keyof LimiterEvents]?: Set<(event: LimiterEvents[E]) => void> } = {};
  // Issues and checks settlements; with `settleOnce: 'store'`, a limiter admits each settled id once.
  private readonly settler: Settler;
  private readonly settledInStore: Limiter | undefined;

  constructor(options: LimiterOptions) {
    const split =
      typeof options === 'object' && options !== null && options.policies !== undefined
        ? splitPolicies(options.policies)
        : undefined;
    const { policies: _, ...rest } =
      typeof options === 'object' && options !== null ? options : { policies: undefined };
    const rateOptions =
      split?.concurrency === undefined
        ? options
        : ({ ...rest, ...(split.rate === undefined ? {} : { policies: split.rate }) } as LimiterOptions);
    const config = validateLimiterOptions(rateOptions, (value) => value instanceof Limiter);
    this.store = config.store;
    this.failure = config.failure;
    this.timeoutMs = config.timeoutMs;
    this.syncStore = isSyncStore(config.store) ? config.store : undefined;
    this.prefix = config.prefix;
    this.reusable.prefix = this.prefix;
    this.clock = config.clock ?? (config.store.hasOwnClock ? undefined : systemClock);
    this.localClock = config.clock ?? systemClock;
    this.settler = new Settler(this.prefix, config.settleWithinMs, config.settleSecret);
    this.settledInStore =
      config.settleOnce === 'store'
        ? new Limiter({
            store: config.store,
            prefix: config.prefix,
            ...(config.clock === undefined ? {} : { clock: config.clock }),
            // The same wait as this limiter's calls: none when it has none.
            timeoutMs: config.timeoutMs ?? false,
            breaker: false,
            // A first-request window of the settlements' lifetime: the first settle of an id is
            // admitted, every later one denied, and the id leaves the store when its settlement expires.
            policies: fixedWindow({
              limit: 1,
              windowMs: config.settleWithinMs,
              align: 'first-request',
              name: 'settled-once',
            }),
          })
        : undefined;
    this.breaker =
      config.breaker === false
        ? undefined
        : new Breaker(
            config.breaker,
            (state, error) =>
              this.emit(
                'breaker',
                error === undefined ? { state, failure: config.failure } : { state, error, failure: config.failure },
              ),
            config.timeoutMs,
          );
    this.blockedCache =
      config.blockedCache === false ? undefined : new BlockedCache(config.blockedCache, () => this.localMs());
    this.calls = new StoreCall({
      store: config.store,
      timeoutMs: config.timeoutMs,
      failure: config.failure,
      breaker: this.breaker,
      localMs: () => this.localMs(),
      storeError: (event) => this.emit('storeError', event),
    });
    this.policies = config.policies;
    this.compiled = this.register(this.policies);
    this.concurrent =
      split?.concurrency === undefined
        ? refuseLonePermits(options.permits)
        : new ConcurrencyPart(
            { ...split, concurrency: split.concurrency },
            options.permits,
            this.prefix,
            config.clock,
            {
              names: this.policies.map((p) => p.name),
              hasRate: (call) => call?.policies !== undefined || this.compiled.length > 0,
              validate: (key, call) => {
                this.request(key, call, true);
              },
              decide: (key, call, commit) => this.decide(key, call, commit),
              store: config.store,
              withPermit: (key, call) => this.withPermit(key, call),
              failure: config.failure,
            },
          );
    this.concurrency = this.concurrent?.policy;
    this.fast =
      this.clock !== undefined && this.compiled.length > 0
        ? this.syncStore?.fastPath?.(this.prefix, this.compiled, this.clock)
        : undefined;
    INTERNALS.set(this, {
      calls: this.calls,
      compiled: this.compiled,
      clock: this.clock,
      request: (key, callOptions, commit) => ({ ...this.request(key, callOptions, commit) }),
      decided: (request, decision, source) => this.decided(request, decision, source),
      storeError: (event) => this.emit('storeError', event),
      policiesFor: (policies) => this.policiesFor(policies),
    });
    // OpenTelemetry, when `@opentelemetry/api` is installed: loaded once per process, in the background.
    void loadTelemetry();
  }

  /**
   * Decides a call and consumes its cost when admitted. Under a concurrency policy an admitted call also
   * holds a permit (`decision.permit`) until `limiter.release(decision)`.
   */
  limit(key: string, options?: CallOptions): Promise<Decision> {
    const concurrent = this.concurrent;
    if (concurrent !== undefined) return this.holding(concurrent, key, options);
    const t = telemetry;
    if (t !== undefined) return this.observed(t, key, options, true);
    tick();
    return this.decide(key, options, true);
  }

  /** `limit` under a concurrency policy, reported to OpenTelemetry as `limit` reports a decision. */
  private holding(concurrent: ConcurrencyPart, key: string, options: CallOptions | undefined): Promise<Decision> {
    const t = telemetry;
    if (t === undefined) {
      tick();
      return concurrent.limit(key, options);
    }
    const span = t.startSpan('limit');
    const startedMs = t.now();
    return concurrent.limit(key, options).then(
      (decision) => {
        t.decided(this.prefix, 'limit', key, decision, startedMs, span);
        return decision;
      },
      (error: unknown) => {
        t.failed(span, error);
        throw error;
      },
    );
  }

  /**
   * The live permit of a decision admitted under the limiter's concurrency policy (or of a copy of the
   * decision, or of its `permit`): its `signal`, `refresh()`, `release()`, `await using`. Undefined once
   * the permit was released or its lease lost, and for a decision without a permit.
   */
  permit(decision: Decision | PermitGrant): Permit | undefined {
    return this.concurrent?.permitOf(decision);
  }

  /**
   * Gives back the permit of a decision (or of a copy, or its `permit`), granted here or in another
   * process. Resolves to whether this call ended a live lease: releasing twice, or a decision without a
   * permit, changes nothing.
   */
  release(decision: Decision | PermitGrant): Promise<boolean> {
    return this.onPermit('release', decision);
  }

  /**
   * Extends the lease of a decision's permit to the policy's `leaseMs` from now, on the permit store's
   * clock. Resolves to false when the lease already ran out (it is never taken back).
   */
  refresh(decision: Decision | PermitGrant): Promise<boolean> {
    return this.onPermit('refresh', decision);
  }

  /** `release` or `refresh`: false without a concurrency policy, a rejection for a decision refused at once. */
  private onPermit(call: 'release' | 'refresh', decision: Decision | PermitGrant): Promise<boolean> {
    const concurrent = this.concurrent;
    if (concurrent === undefined) return Promise.resolve(false);
    try {
      return concurrent[call](decision);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Decides a call as `limit` would, changing nothing. */
  check(key: string, options?: CallOptions): Promise<Decision> {
    const t = telemetry;
    if (t !== undefined) return this.observed(t, key, options, false);
    tick();
    return this.decide(key, options, false);
  }

  /** A promise decision reported to OpenTelemetry: counted, timed, and in a span when asked. */
  private observed(t: Telemetry, key: string, options: CallOptions | undefined, commit: boolean): Promise<Decision> {
    const operation = commit ? 'limit' : 'check';
    const span = t.startSpan(operation);
    const startedMs = t.now();
    return this.decide(key, options, commit).then(
      (decision) => {
        t.decided(this.prefix, operation, key, decision, startedMs, span);
        return decision;
      },
      (error: unknown) => {
        t.failed(span, error);
        throw error;
      },
    );
  }

  /** A sync decision reported to OpenTelemetry. */
  private observedSync(t: Telemetry, key: string, options: CallOptions | undefined, commit: boolean): Decision {
    const operation = commit ? 'limit' : 'check';
    const span = t.startSpan(operation);
    const startedMs = t.now();
    let decision: Decision;
    try {
      const fast = this.fast;
      if (fast !== undefined && options === undefined) decision = this.fastSync(fast, key, commit);
      else decision = this.decideSync(key, options, commit);
    } catch (error) {
      t.failed(span, error);
      throw error;
    }
    t.decided(this.prefix, operation, key, decision, startedMs, span);
    return decision;
  }

  /**
   * Waits until the call is admitted, sleeping as long as the store's `retryAfterMs` says, first come
   * first served per key in this process. Rejects with `ERR_TIMEOUT` or `ERR_ABORTED`, having consumed
   * nothing; a cost that can never fit rejects at once with `ERR_INVALID_COST`.
   *
   * @example
   * ```ts
   * await limiter.acquire('paid-api', { cost: tokens, timeoutMs: 30_000 });
   * ```
   */
  acquire(key: string, options?: AcquireOptions): Promise<Decision> {
    if (this.concurrent !== undefined) return Promise.reject(noConcurrency('acquire'));
    const t = telemetry;
    const waiting = acquire(this, this.clock ?? systemClock, key, options);
    if (t === undefined) return waiting;
    const startedMs = t.now();
    const prefix = this.prefix;
    t.queued(prefix);
    return waiting.then(
      (decision) => {
        t.dequeued(prefix, startedMs, 'acquired');
        return decision;
      },
      (error: unknown) => {
        const code = error instanceof FloodgateError ? error.code : undefined;
        t.dequeued(
          prefix,
          startedMs,
          code === 'ERR_TIMEOUT' ? 'timeout' : code === 'ERR_ABORTED' ? 'aborted' : 'error',
        );
        throw error;
      },
    );
  }

  /**
   * Cancels a reservation (a decision admitted with `delayMs`) that has not come due, giving back what
   * its policies can: everything while no later call was booked behind it. Resolves to true when the
   * whole cost came back under every policy. Pass the policies the call was made with.
   */
  async cancel(key: string, reservation: Decision | Reservation, options?: KeyOptions): Promise<boolean> {
    const policies = this.policiesFor(options?.policies ?? UNSET);
    try {
      const whole = await cancelOnStore(this.store, this.prefix, this.clock, key, reservation, policies);
      // What came back may let a remembered denial pass.
      this.blockedCache?.forget(key);
      return whole;
    } catch (error) {
      throw toStoreError(this.store.name, error);
    }
  }

  /**
   * Charges a call admitted with `settle: true` its actual cost: above the estimate the difference is a
   * debt past the limit, below it comes back as far as the policy can give it. Resolves to false when
   * there is nothing to settle. Refuses forged, altered or settled decisions before any store call.
   *
   * @example
   * ```ts
   * const decision = await limiter.limit(user, { cost: request.max_tokens, settle: true });
   * if (!decision.allowed) return reply(429);
   * const response = await callModel(request);
   * await limiter.settle(user, decision, { cost: response.usage.total_tokens });
   * ```
   */
  async settle(key: string, decision: Decision, options: SettleOptions): Promise<boolean> {
    validateKey(key);
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object with the cost');
    }
    const actual = validateCost(options.cost);
    const policies = this.policiesFor(options.policies ?? UNSET);
    const checked = this.settler.check(key, decision, this.localMs());
    if (checked === undefined) return false;
    const { settlement, live } = checked;
    requireSamePolicies('the call', settlement.policies, policies);
    if (actual < 1) checkResolution(policies, actual);
    requireSettleable(policies, 'policies');
    const store = this.settlingStore();
    // Past its expiry a settlement gives nothing back (and is no longer remembered): only a debt is charged.
    const estimate = settlement.cost;
    if (actual === estimate || (!live && actual < estimate)) return false;
    if (live) this.settler.mark(settlement);
    if (live && this.settledInStore !== undefined) {
      let first: boolean;
      try {
        first = (await this.settledInStore.limit(`\0settled:${settlement.id}`)).allowed;
      } catch (error) {
        this.settler.unmark(settlement);
        throw toStoreError(store.name, error);
      }
      if (!first) {
        throw new FloodgateError('ERR_INVALID_OPTION', 'decision was settled already: a decision settles once', {
          option: 'decision',
        });
      }
    }
    const nowUs = this.wholeNowUs();
    try {
      await this.settleOnStore({ prefix: this.prefix, key, policies, estimate, actual, atUs: settlement.atUs, nowUs });
    } catch (error) {
      // A failed call (a timeout) may have been applied all the same. A debt may be settled again: at
      // worst it is charged twice. A refund may not: it could give the same units back twice.
      if (live && actual > estimate) this.settler.unmark(settlement);
      throw toStoreError(store.name, error);
    }
    // A denial remembered before a refund may no longer hold.
    if (actual < estimate) this.blockedCache?.forget(key);
    return true;
  }

  /** Charges `cost` past the limit if need be (a debt), admitting nothing: charging at the end. Meter policies only. */
  async charge(key: string, options: ChargeOptions): Promise<void> {
    const request = this.chargeRequest(key, options);
    if (request !== undefined) await this.settleOnStore(request);
  }

  /** `charge` on a store that decides synchronously (memory, SQLite). */
  chargeSync(key: string, options: ChargeOptions): void {
    this.requireSync('chargeSync');
    const request = this.chargeRequest(key, options);
    if (request !== undefined) void this.settleOnStore(request);
  }

  // The store request of a charge, checked; undefined for a cost of 0. Estimate 0: the whole cost is a
  // debt, and `atUs` is read only by a refund, which this never is.
  private chargeRequest(key: string, options: ChargeOptions): SettleRequest | undefined {
    validateKey(key);
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object with the cost');
    }
    const actual = validateCost(options.cost);
    const policies = requirePolicies(this.policiesFor(options.policies ?? UNSET));
    if (actual > 0 && actual < 1) checkResolution(policies, actual);
    requireSettleable(policies, 'policies');
    this.settlingStore();
    if (actual === 0) return undefined;
    const nowUs = this.wholeNowUs();
    return { prefix: this.prefix, key, policies, estimate: 0, actual, atUs: nowUs ?? 0, nowUs };
  }

  private settlingStore(): Store {
    const store = this.store;
    if (store.settle === undefined && (store as Partial<SyncStore>).settleSync === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', `the ${store.name} store cannot settle calls`, {
        option: 'store',
      });
    }
    return store;
  }

  private wholeNowUs(): number | undefined {
    const nowUs = this.clock?.nowUs();
    return nowUs === undefined || Number.isInteger(nowUs) ? nowUs : wholeClockUs(nowUs);
  }

  // One settle on the store: synchronously on a store that can (a settled promise is returned, and a
  // failure thrown at once), else through the bounded store-call path.
  private settleOnStore(request: SettleRequest): Promise<void> {
    const store = this.store;
    const sync = (store as Partial<SyncStore>).settleSync;
    try {
      if (sync !== undefined) {
        sync.call(store, request);
        return Promise.resolve();
      }
      return this.calls
        .bounded((store.settle as NonNullable<Store['settle']>).call(store, request))
        .catch((error: unknown) => {
          throw toStoreError(store.name, error);
        });
    } catch (error) {
      throw toStoreError(store.name, error);
    }
  }

  /**
   * Reports every policy's state for the key, changing nothing: `remaining` and `resetAfterMs` as they
   * are now (a cost-0 check), `allowed`, `retryAfterMs` and `reason` for a call of cost 1 (at the limit
   * it says `allowed: false` and when one fits again; a second check, of cost 1, tells).
   */
  status(key: string, options?: KeyOptions): Promise<Decision> {
    let callOptions: CallOptions;
    try {
      callOptions = statusOptions(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.decide(key, callOptions, false).then((now) =>
      atLimit(now) ? this.decide(key, { ...callOptions, cost: 1 }, false).then((next) => statusOf(now, next)) : now,
    );
  }

  /** Forgets the key under the limiter's (or the given) policies. */
  async reset(key: string, options?: KeyOptions): Promise<void> {
    const policies = this.policiesFor(options?.policies ?? UNSET);
    validateKey(key);
    this.blockedCache?.forget(key);
    try {
      await this.store.reset(this.prefix, key, policies);
    } catch (error) {
      throw toStoreError(this.store.name, error);
    }
    // And a denial from a call that was in flight meanwhile.
    this.blockedCache?.forget(key);
  }

  /**
   * Listens to decisions, store errors and breaker changes (for logs and metrics); returns a function
   * that removes the listener. Listeners run synchronously: keep them cheap. One that throws is reported
   * as a process warning and never affects a decision.
   */
  on<E extends keyof LimiterEvents>(event: E, listener: (event: LimiterEvents[E]) => void): () => void {
    if (typeof listener !== 'function') throw invalid('ERR_INVALID_OPTION', 'listener', listener, 'a function');
    if (event !== 'decision' && event !== 'storeError' && event !== 'breaker') {
      throw invalid('ERR_INVALID_OPTION', 'event', event, "'decision', 'storeError' or 'breaker'");
    }
    let set = this.listeners[event] as Set<(event: LimiterEvents[E]) => void> | undefined;
    if (set === undefined) {
      set = new Set();
      (this.listeners as Record<string, unknown>)[event] = set;
    }
    set.add(listener);
    return () => {
      set.delete(listener);
      // No listener left: the hot paths see none again (they test for the set, not its size).
      if (set.size === 0 && this.listeners[event] === set)
        (this.listeners as Record<string, unknown>)[event] = undefined;
    };
  }

  /** The circuit breaker's state: `closed` (calls reach the store), `open`, or `half-open` (probing). */
  get breakerState(): BreakerState {
    return this.breaker?.state ?? 'closed';
  }

  /** `limit` without a promise, for stores that decide synchronously (memory, SQLite). */
  limitSync(key: string, options?: CallOptions): Decision {
    if (this.concurrent !== undefined) throw noConcurrency('limitSync');
    return this.decideNow(key, options, true);
  }

  /**
   * `limitSync(key).allowed`: whether a call of cost 1 on `key` is admitted now, committed as `limitSync`
   * commits it (listeners, telemetry and the blocked-key cache see the same decision), for hot loops that
   * need the verdict alone. On the memory store's fast path no decision is made at all.
   */
  allowSync(key: string): boolean {
    if (this.concurrent !== undefined) throw noConcurrency('allowSync');
    const fast = this.fast;
    if (
      fast?.allows === undefined ||
      telemetry !== undefined ||
      this.blockedCache !== undefined ||
      this.listeners.decision !== undefined
    ) {
      this.requireSync('allowSync');
      return this.decideNow(key, undefined, true).allowed;
    }
    tick();
    const allowed = fast.allows(key, true);
    return allowed ?? this.decideSync(key, undefined, true, fast.nowUs).allowed;
  }

  /** `check` without a promise. */
  checkSync(key: string, options?: CallOptions): Decision {
    return this.decideNow(key, options, false);
  }

  /** A sync decision (`limitSync`, `checkSync`): reported when telemetry is on, on the fast path when it applies. */
  private decideNow(key: string, options: CallOptions | undefined, commit: boolean): Decision {
    const t = telemetry;
    if (t !== undefined) return this.observedSync(t, key, options, commit);
    tick();
    const fast = this.fast;
    if (fast !== undefined && options === undefined) return this.fastSync(fast, key, commit);
    return this.decideSync(key, options, commit);
  }

  /** `status` without a promise. */
  statusSync(key: string, options?: KeyOptions): Decision {
    const callOptions = statusOptions(options);
    const now = this.decideSync(key, callOptions, false);
    return atLimit(now) ? statusOf(now, this.decideSync(key, { ...callOptions, cost: 1 }, false)) : now;
  }

  /** `reset` without a promise. */
  resetSync(key: string, options?: KeyOptions): void {
    const store = this.requireSync('resetSync');
    const policies = this.policiesFor(options?.policies ?? UNSET);
    validateKey(key);
    this.blockedCache?.forget(key);
    store.resetSync(this.prefix, key, policies);
  }

  private emit<E extends keyof LimiterEvents>(event: E, payload: LimiterEvents[E]): void {
    const set = this.listeners[event];
    if (set === undefined || set.size === 0) return;
    for (const listener of set) {
      try {
        (listener as (event: LimiterEvents[E]) => void)(payload);
      } catch (error) {
        warn(`a floodgate '${event}' listener threw: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
  }

  private decided(request: StoreRequest, decision: Decision, source: LimiterEvents['decision']['source']): Decision {
    return this.emitDecision(request.key, request.cost, request.commit, decision, source);
  }

  /** Reports a decision to the 'decision' listeners, if any; returns it. */
  private emitDecision(
    key: string,
    cost: number,
    commit: boolean,
    decision: Decision,
    source: LimiterEvents['decision']['source'],
  ): Decision {
    const set = this.listeners.decision;
    if (set !== undefined && set.size > 0) this.emit('decision', { key, cost, commit, decision, source });
    return decision;
  }

  /**
   * The sync methods without options, when the store offers a fast path (the in-process hot path): it
   * decides the call, else the general path does, at the time the fast path read.
   */
  private fastSync(fast: FastPath, key: string, commit: boolean): Decision {
    // The cache's time is read before the store decides, as the promise methods read it.
    const nowMs = this.cacheMs();
    const decision = fast.decide(key, commit);
    if (decision === undefined) return this.decideSync(key, undefined, commit, fast.nowUs, nowMs);
    return this.fastDecided(key, commit, decision, nowMs);
  }

  /** What `conclude` does with a store's decision, for one the fast path made (cost 1, the limiter's policies). */
  private fastDecided(key: string, commit: boolean, decision: Decision, nowMs: number): Decision {
    if (this.blockedCache === undefined && this.listeners.decision === undefined) return decision;
    this.blockedCache?.remember(key, this.compiled, 1, 0, decision, nowMs, commit);
    return this.emitDecision(key, 1, commit, decision, 'store');
  }

  private localMs(): number {
    return this.localClock.nowUs() / 1000;
  }

  /**
   * The local time a sync decision is remembered at in the blocked-key cache (0 without one): the sync
   * methods ask the store always, and what it denies answers the promise methods' next calls.
   */
  private cacheMs(): number {
    return this.blockedCache === undefined ? 0 : this.localMs();
  }

  /**
   * The promise methods: the blocked-key cache, then the store-call path (with the breaker). Over a
   * synchronous store no promise is awaited: one settled promise is returned.
   */
  private decide(key: string, options: CallOptions | undefined, commit: boolean): Promise<Decision> {
    let request: StoreRequest;
    let outcome: Outcome | Promise<Outcome>;
    // The clock is read only for the cache: the memory store's hot path reads it once, in `request`.
    const cache = this.blockedCache;
    const nowMs = cache === undefined ? 0 : this.localMs();
    let readUs: number | undefined;
    // Whether the cache was asked already (by the fast path's way, which then left the call to the path below).
    let asked = false;
    const fast = this.fast;
    const gate = this.breaker;
    if (
      fast !== undefined &&
      options === undefined &&
      isPlainKey(key) &&
      (gate === undefined || gate.state === 'closed')
    ) {
      // The store's fast path, as for `limitSync`, in the order of the path below: the blocked-key
      // cache, the store (a closed breaker lets every call through and hears of each success), then what
      // `conclude` does. A call the fast path leaves goes that path, at the time it read. Only a plain
      // key (a string the stores hold as it is) comes this way: any other is validated below first.
      try {
        const cached = cache?.get(key, this.compiled, 1, 0, nowMs);
        if (cached !== undefined) {
          // The path below reads (and checks) the clock for the store's request before the cache answers.
          const us = (this.clock as Clock).nowUs();
          if (!Number.isInteger(us)) wholeClockUs(us);
          return Promise.resolve(this.emitDecision(key, 1, commit, cached, 'cache'));
        }
        const decision = fast.decide(key, commit);
        if (decision !== undefined) {
          gate?.success();
          return Promise.resolve(this.fastDecided(key, commit, decision, nowMs));
        }
      } catch (error) {
        return Promise.reject(error);
      }
      readUs = fast.nowUs;
      asked = true;
    }
    try {
      request = this.request(key, options, commit, readUs);
      const cached = asked ? undefined : cache?.get(key, request.policies, request.cost, request.maxDelayUs, nowMs);
      if (cached !== undefined) return Promise.resolve(this.decided(request, cached, 'cache'));
      outcome = this.calls.decide(request, options, 'promise');
    } catch (error) {
      return Promise.reject(error);
    }
    const settle = options?.settle === true && commit;
    if (isPending(outcome)) return this.concludeLater(request, outcome, nowMs, settle);
    return Promise.resolve(this.conclude(request, outcome, nowMs, settle));
  }

  /** `conclude` once a store call's outcome settles (its closure kept out of the synchronous path). */
  private concludeLater(
    request: StoreRequest,
    outcome: Promise<Outcome>,
    nowMs: number,
    settle: boolean,
  ): Promise<Decision> {
    return outcome.then((settled) => this.conclude(request, settled, nowMs, settle));
  }

  /**
   * The sync methods: always the store itself (no cache, no breaker); a `fallback` failure policy throws.
   * `nowUs`: the clock read for this call already.
   */
  private decideSync(
    key: string,
    options: CallOptions | undefined,
    commit: boolean,
    nowUs?: number,
    nowMs = this.cacheMs(),
  ): Decision {
    this.requireSync(commit ? 'limitSync' : 'checkSync');
    const request = this.request(key, options, commit, nowUs);
    const outcome = this.calls.decide(request, options, 'sync') as Outcome;
    return this.conclude(request, outcome, nowMs, options?.settle === true && commit);
  }

  /**
   * The one store call of a `limit` under a concurrency policy whose permits live in the rate store
   * (`Store.decideWithPermit`), or undefined when the call goes the two-call way: the store cannot, the
   * breaker is not closed, or the blocked-key cache remembers a denial of the call (the two calls then
   * decide it as they always did). The decision is concluded as `decide` concludes one: a check when the
   * permit was refused, the charged call when it was granted.
   */
  private withPermit(
    key: string,
    options: CallOptions | undefined,
  ): ((claim: PermitClaim) => Promise<{ held: HeldResult; decision: Decision }>) | undefined {
    const store = this.store;
    const gate = this.breaker;
    if (store.decideWithPermit === undefined || (gate !== undefined && gate.state !== 'closed')) return undefined;
    // A copy: a synchronous store's request object is reused by the next call.
    const request: StoreRequest = { ...this.request(key, options, true) };
    const cache = this.blockedCache;
    const nowMs = cache === undefined ? 0 : this.localMs();
    if (cache?.get(key, request.policies, request.cost, request.maxDelayUs, nowMs) !== undefined) return undefined;
    const settle = options?.settle === true;
    return (claim) =>
      this.calls
        .bounded((store.decideWithPermit as NonNullable<Store['decideWithPermit']>).call(store, request, claim))
        .then((held) => {
          gate?.success();
          const granted = held.permit.granted;
          const asked = granted ? request : { ...request, commit: false };
          return { held, decision: this.conclude(asked, held.result, nowMs, settle && granted) };
        });
  }

  /** The decision of a store call's outcome, remembered by the blocked-key cache and reported to listeners. */
  private conclude(request: StoreRequest, outcome: Outcome, nowMs: number, settle = false): Decision {
    if (isDegraded(outcome)) {
      // Decided without the store (or by a fallback limiter): nothing of it is this store's to settle.
      const { settlement: _, ...degraded } = outcome.decision;
      return this.decided(outcome.request, settle ? degraded : outcome.decision, 'degraded');
    }
    const decision = decisionOf(request, outcome);
    if (settle && decision.allowed) {
      const atUs = outcome.nowUs ?? request.nowUs;
      if (atUs !== undefined) {
        decision.settlement = this.settler.issue(request.key, request.cost, request.policies, atUs, this.localMs());
      }
    }
    this.blockedCache?.remember(
      request.key,
      request.policies,
      request.cost,
      request.maxDelayUs,
      decision,
      nowMs,
      request.commit,
    );
    return this.decided(request, decision, 'store');
  }

  /** Builds the store request of a call, validating everything it carries; `readUs`: the clock read already. */
  private request(key: string, options: CallOptions | undefined, commit: boolean, readUs?: number): StoreRequest {
    validateKey(key);
    let cost = 1;
    let maxDelayUs = 0;
    let policies = this.compiled;
    if (options !== undefined) {
      validateCallOptions(options);
      if (options.cost !== undefined) cost = validateCost(options.cost);
      if (options.maxDelayMs !== undefined) maxDelayUs = validateDelay(options.maxDelayMs);
      if (options.policies !== undefined) policies = this.policiesFor(options.policies);
      if (validateSettle(options.settle)) requireSettleable(policies);
    }
    requirePolicies(policies);
    if (cost < 1) checkResolution(policies, cost);
    if (maxDelayUs > 0) requireReservable(policies);
    let nowUs = readUs ?? this.clock?.nowUs();
    if (nowUs !== undefined && !Number.isInteger(nowUs)) nowUs = wholeClockUs(nowUs);
    if (this.syncStore !== undefined) {
      // A synchronous store is done with the request before the call returns: reuse one object.
      const reused = this.reusable;
      reused.key = key;
      reused.policies = policies;
      reused.cost = cost;
      reused.commit = commit;
      reused.nowUs = nowUs;
      reused.maxDelayUs = maxDelayUs;
      return reused;
    }
    return { prefix: this.prefix, key, policies, cost, commit, nowUs, maxDelayUs };
  }

  private readonly reusable: { -readonly [K in keyof StoreRequest]: StoreRequest[K] } = {
    prefix: '',
    key: '',
    policies: [],
    cost: 1,
    commit: true,
    nowUs: undefined,
    maxDelayUs: 0,
  };

  private requireSync(method: string): SyncStore {
    if (this.syncStore === undefined) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `${method}() needs a store that decides synchronously (memory, SQLite); the ${this.store.name} store is asynchronous: use the promise methods`,
        { option: 'store' },
      );
    }
    return this.syncStore;
  }

  private policiesFor(policies: Policy | readonly Policy[] | typeof UNSET): readonly CompiledPolicy[] {
    if (policies === UNSET) return this.compiled;
    if (typeof policies !== 'object' || policies === null) {
      throw invalid('ERR_INVALID_POLICY', 'policies', policies, 'a policy or an array of policies');
    }
    let compiled = this.perCall.get(policies);
    if (compiled === undefined) {
      compiled = this.register(normalizePolicies(policies, 'policies'));
      this.perCall.set(policies, compiled);
    }
    return compiled;
  }

  private register(policies: readonly Policy[]): readonly CompiledPolicy[] {
    const compiled = policies.map(compilePolicy);
    for (const c of compiled) {
      const known = this.kinds.get(c.name);
      if (known !== undefined && known !== c.kind) {
        throw new FloodgateError(
          'ERR_INVALID_POLICY',
          `policy name ${JSON.stringify(c.name)} is already used by a policy of another algorithm on this limiter; names identify stored state`,
          { option: 'policies' },
        );
      }
      this.kinds.set(c.name, c.kind);
    }
    return Object.freeze(compiled);
  }
}
