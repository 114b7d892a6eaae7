import { type Clock, systemClock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { validateKey, validatePrefix } from '../keys.js';
import { type CompiledPolicy, compilePolicy } from '../model/compile.js';
import { validateCost } from '../model/cost.js';
import { decide } from '../model/decide.js';
import { type Decision, toDecision } from '../model/decision.js';
import { definePolicy, type Policy } from '../model/policy.js';
import type { Reservation } from '../model/reservation.js';
import { type Evaluation, emptyEvaluation } from '../model/types.js';
import { memoryStore } from '../stores/memory/memory-store.js';
import { isSyncStore, type Store, type StoreRequest, type StoreResult, type SyncStore } from '../stores/store.js';
import { classifyStoreError, toStoreError } from '../stores/store-errors.js';
import { type AcquireOptions, acquire } from './acquire.js';
import { BlockedCache, type BlockedCacheOptions } from './blocked-cache.js';
import { Breaker, type BreakerOptions, type BreakerState } from './breaker.js';
import { cancelOnStore, decisionOf, requireReservable } from './reservation.js';

/** Options of {@link createLimiter}. */
export interface LimiterOptions {
  /** Where state lives. @default memoryStore() */
  store?: Store;
  /** Policies enforced on every call, all-or-nothing. Calls may pass their own instead (tiers). */
  policies?: Policy | readonly Policy[];
  /** Namespace of this limiter's keys in the store. @default 'floodgate' */
  prefix?: string;
  /**
   * The clock decisions use. By default a store with its own clock (Redis, PostgreSQL) uses it, so app
   * servers with skewed clocks agree; other stores use the system clock. Set it to decide on your time.
   */
  clock?: Clock;
  /**
   * Longest wait for the store on one call, in ms; past it the call fails with `ERR_TIMEOUT` and the
   * `failure` policy decides. Unset: no timer (the memory store never waits).
   */
  timeoutMs?: number;
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
   * The sync methods (`limitSync`, `checkSync`) always ask the store. @default { failureThreshold: 5, cooldownMs: 1000 }
   */
  breaker?: BreakerOptions | false;
  /**
   * Answer keys the store denied locally until they may pass again, so a hot denied key costs the store
   * nothing. Exact: only denials that the store would repeat unchanged are remembered (never under a
   * `countDenied` sliding log, nor a `check` denial under `blockMs`). Used by the promise methods with
   * every store; the sync methods (`limitSync`, `checkSync`) always ask the store. `true` for the
   * defaults. @default false
   */
  blockedCache?: BlockedCacheOptions | boolean;
}

/** What a limiter tells its listeners. */
export interface LimiterEvents {
  /** Every decision: from the store, from the blocked-key cache, or made without the store (degraded). */
  decision: { key: string; cost: number; commit: boolean; decision: Decision; source: 'store' | 'cache' | 'degraded' };
  /** A store call failed or timed out (the decision then follows the `failure` option). */
  storeError: { key: string; error: FloodgateError };
  /** The circuit breaker changed state. */
  breaker: { state: BreakerState };
}

/** What {@link Limiter.leaseFromStore} got: the decision, and for a store decision the raw evaluations and its time. */
export interface LeaseGrant {
  readonly decision: Decision;
  /** Per policy, µs (absent when the failure policy decided). */
  readonly evaluations?: readonly Evaluation[];
  /** The clock reading the store decided at, µs. */
  readonly atUs?: number;
}

/** See {@link LimiterOptions.failure}. */
export type FailurePolicy = 'throw' | 'open' | 'closed' | { fallback: Limiter };

/** How long a `'closed'` failure tells callers to wait. */
const DEGRADED_RETRY_MS = 1000;

/** Options of a single call. */
export interface CallOptions {
  /** What this call consumes; fractions allowed, 0 only checks. @default 1 */
  cost?: number;
  /** Policies for this call instead of the limiter's (a plan's tier). */
  policies?: Policy | readonly Policy[];
  /** Reservations: admit the call if it can proceed within this many ms, and say when (`delayMs`). @default 0 */
  maxDelayMs?: number;
}

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

export class Limiter {
  readonly store: Store;
  readonly prefix: string;
  readonly policies: readonly Policy[];
  private readonly compiled: readonly CompiledPolicy[];
  private readonly clock: Clock | undefined;
  private readonly syncStore: SyncStore | undefined;
  private readonly perCall = new WeakMap<object, readonly CompiledPolicy[]>();
  /** Names seen with their state layout: a name reused for another algorithm would corrupt state. */
  private readonly kinds = new Map<string, number>();
  private readonly timeoutMs: number | undefined;
  private readonly failure: FailurePolicy;
  private readonly localClock: Clock;
  private readonly breaker: Breaker | undefined;
  /** The local cache of denied keys, when enabled. */
  readonly blockedCache: BlockedCache | undefined;
  private listeners: { [E in keyof LimiterEvents]?: Set<(event: LimiterEvents[E]) => void> } = {};

  constructor(options: LimiterOptions) {
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'createLimiter options', options, 'an object');
    }
    const store = options.store ?? memoryStore();
    if (typeof store !== 'object' || store === null || typeof store.decide !== 'function') {
      throw invalid('ERR_INVALID_OPTION', 'store', store, 'a floodgate store');
    }
    this.store = store;
    this.syncStore = isSyncStore(store) ? store : undefined;
    this.prefix = validatePrefix(options.prefix ?? 'floodgate');
    this.reusable.prefix = this.prefix;
    const clock = options.clock;
    if (clock !== undefined && (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function')) {
      throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs()');
    }
    this.clock = clock ?? (store.hasOwnClock ? undefined : systemClock);
    if (
      options.timeoutMs !== undefined &&
      (typeof options.timeoutMs !== 'number' || !(options.timeoutMs > 0) || !Number.isFinite(options.timeoutMs))
    ) {
      throw invalid('ERR_INVALID_OPTION', 'timeoutMs', options.timeoutMs, 'a finite number of milliseconds above 0');
    }
    this.timeoutMs = options.timeoutMs;
    this.failure = validateFailure(options.failure);
    this.localClock = clock ?? systemClock;
    const breaker = options.breaker ?? {};
    if (breaker !== false && (typeof breaker !== 'object' || breaker === null)) {
      throw invalid('ERR_INVALID_OPTION', 'breaker', breaker, 'breaker options or false');
    }
    this.breaker =
      breaker === false ? undefined : new Breaker(breaker, (state) => this.emit('breaker', { state }), this.timeoutMs);
    const cache = options.blockedCache ?? false;
    if (typeof cache !== 'boolean' && (typeof cache !== 'object' || cache === null)) {
      throw invalid('ERR_INVALID_OPTION', 'blockedCache', cache, 'a boolean or blocked-cache options');
    }
    this.blockedCache = cache === false ? undefined : new BlockedCache(cache === true ? {} : cache);
    this.policies = options.policies === undefined ? [] : normalizePolicies(options.policies, 'policies');
    this.compiled = this.register(this.policies);
  }

  /** Decides a call and consumes its cost when admitted. */
  limit(key: string, options?: CallOptions): Promise<Decision> {
    return this.syncStore === undefined ? this.run(key, options, true) : this.settle(key, options, true);
  }

  /** Decides a call as `limit` would, changing nothing. */
  check(key: string, options?: CallOptions): Promise<Decision> {
    return this.syncStore === undefined ? this.run(key, options, false) : this.settle(key, options, false);
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
    return acquire(this, this.clock ?? systemClock, key, options);
  }

  /**
   * Cancels a reservation (a decision admitted with `delayMs`) that has not come due, giving back what
   * its policies can: everything while no later call was booked behind it. Resolves to true when the
   * whole cost came back under every policy. Pass the policies the call was made with.
   */
  async cancel(key: string, reservation: Decision | Reservation, options?: KeyOptions): Promise<boolean> {
    const policies = this.policiesFor(options?.policies ?? UNSET);
    try {
      return await cancelOnStore(this.store, this.prefix, this.clock, key, reservation, policies);
    } catch (error) {
      throw toStoreError(this.store.name, error);
    }
  }

  /** Reports every policy's state for the key (a cost-0 check); changes nothing. */
  status(key: string, options?: KeyOptions): Promise<Decision> {
    try {
      return this.limitOrCheck(key, statusOptions(options), false);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private limitOrCheck(key: string, options: CallOptions | undefined, commit: boolean): Promise<Decision> {
    return this.syncStore === undefined ? this.run(key, options, commit) : this.settle(key, options, commit);
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
    };
  }

  /** The circuit breaker's state: `closed` (calls reach the store), `open`, or `half-open` (probing). */
  get breakerState(): BreakerState {
    return this.breaker?.state ?? 'closed';
  }

  private emit<E extends keyof LimiterEvents>(event: E, payload: LimiterEvents[E]): void {
    const set = this.listeners[event];
    if (set === undefined || set.size === 0) return;
    for (const listener of set) {
      try {
        (listener as (event: LimiterEvents[E]) => void)(payload);
      } catch (error) {
        process.emitWarning(
          `a floodgate '${event}' listener threw: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    }
  }

  private decided(request: StoreRequest, decision: Decision, source: LimiterEvents['decision']['source']): Decision {
    const set = this.listeners.decision;
    if (set !== undefined && set.size > 0) {
      this.emit('decision', { key: request.key, cost: request.cost, commit: request.commit, decision, source });
    }
    return decision;
  }

  private localMs(): number {
    return this.localClock.nowUs() / 1000;
  }

  /**
   * Takes a lease (used by `leasedLimiter`, and by the HTTP middleware for calls it may give back): one
   * committed call of cost `size` on the store, under the limiter's (or the given) policies, timeout,
   * breaker and events, with the clock reading it was decided at. Without the store, the `failure`
   * option decides a call of cost `cost` instead (no lease then).
   */
  async leaseFromStore(key: string, size: number, cost: number, options?: KeyOptions): Promise<LeaseGrant> {
    const call: CallOptions =
      options?.policies === undefined ? { cost: size } : { cost: size, policies: options.policies };
    // A copy: a synchronous store's request object is reused by the next call.
    const request = { ...this.request(key, call, true) };
    const skip = this.breaker?.admit(this.localMs());
    let result: StoreResult | undefined;
    let failure = skip;
    if (skip === undefined) {
      try {
        result = await this.callStore(request);
        this.breaker?.success();
      } catch (error) {
        failure = this.storeFailed(key, error, true);
      }
    }
    if (result === undefined) {
      const call = { ...request, cost };
      const decision = await this.degrade(call, { cost }, failure as FloodgateError);
      return { decision: this.decided(call, decision, 'degraded') };
    }
    const atUs = result.nowUs ?? request.nowUs;
    const decision = this.decided(request, decisionOf(request, result), 'store');
    return atUs === undefined
      ? { decision, evaluations: result.evaluations }
      : { decision, evaluations: result.evaluations, atUs };
  }

  /**
   * Gives back unused units of a lease (used by `leasedLimiter` and the HTTP middleware), under the
   * limiter's (or the given) policies. Never rejects: a failure is reported as a `storeError` event, and
   * the units come back on their own when the lease expires in the store.
   */
  async refundToStore(
    key: string,
    leased: number,
    leasedAtUs: number,
    unused: number,
    options?: KeyOptions,
  ): Promise<boolean> {
    const refund = this.store.refund;
    if (refund === undefined || this.breaker?.state === 'open') return false;
    const request = {
      prefix: this.prefix,
      key,
      policies: options?.policies === undefined ? this.compiled : this.policiesFor(options.policies),
      leased,
      leasedAtUs,
      unused,
      nowUs: this.clock?.nowUs(),
    };
    try {
      await this.bounded(refund.call(this.store, request));
      // A denial remembered before the refund may no longer hold.
      this.blockedCache?.forget(key);
      return true;
    } catch (error) {
      // Never rejects, so every failure (a rejection too) is reported as an event; none reaches the breaker.
      this.emit('storeError', { key, error: toStoreError(this.store.name, error) });
      return false;
    }
  }

  /** `limit` without a promise, for stores that decide synchronously (memory, SQLite). */
  limitSync(key: string, options?: CallOptions): Decision {
    return this.runSync(key, options, true);
  }

  /** `check` without a promise. */
  checkSync(key: string, options?: CallOptions): Decision {
    return this.runSync(key, options, false);
  }

  /** `status` without a promise. */
  statusSync(key: string, options?: KeyOptions): Decision {
    return this.runSync(key, statusOptions(options), false);
  }

  /** `reset` without a promise. */
  resetSync(key: string, options?: KeyOptions): void {
    const store = this.requireSync('resetSync');
    const policies = this.policiesFor(options?.policies ?? UNSET);
    store.resetSync(this.prefix, validateKey(key), policies);
  }

  /** Builds the store request of a call, validating everything it carries. */
  protected request(key: string, options: CallOptions | undefined, commit: boolean): StoreRequest {
    validateKey(key);
    let cost = 1;
    let maxDelayUs = 0;
    let policies = this.compiled;
    if (options !== undefined) {
      if (typeof options !== 'object' || options === null) {
        throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
      }
      if (options.cost !== undefined) cost = validateCost(options.cost);
      if (options.maxDelayMs !== undefined) maxDelayUs = validateDelay(options.maxDelayMs);
      if (options.policies !== undefined) policies = this.policiesFor(options.policies);
    }
    if (policies.length === 0) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        'no policies: give the limiter `policies`, or pass `policies` with the call',
        { option: 'policies' },
      );
    }
    if (maxDelayUs > 0) requireReservable(policies);
    let nowUs = this.clock?.nowUs();
    // Every store computes on whole µs; a custom clock's fraction is dropped, a broken clock refused.
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

  private async run(key: string, options: CallOptions | undefined, commit: boolean): Promise<Decision> {
    const request = this.request(key, options, commit);
    const nowMs = this.localMs();
    const cached = this.blockedCache?.get(key, request.policies, request.cost, request.maxDelayUs, nowMs);
    if (cached !== undefined) return this.decided(request, cached, 'cache');
    const skip = this.breaker?.admit(nowMs);
    if (skip !== undefined) return this.decided(request, await this.degrade(request, options, skip), 'degraded');
    let result: StoreResult;
    try {
      result = await this.callStore(request);
    } catch (error) {
      const failure = this.storeFailed(key, error, true);
      return this.decided(request, await this.degrade(request, options, failure), 'degraded');
    }
    this.breaker?.success();
    const decision = decisionOf(request, result);
    this.blockedCache?.remember(
      key,
      request.policies,
      request.cost,
      request.maxDelayUs,
      decision,
      nowMs,
      request.commit,
    );
    return this.decided(request, decision, 'store');
  }

  /** One store call, bounded by `timeoutMs` when set. */
  private callStore(request: StoreRequest): Promise<StoreResult> {
    return this.bounded(this.store.decide(request));
  }

  /** A store call bounded by `timeoutMs` when set. */
  private bounded<T>(pending: Promise<T>): Promise<T> {
    const timeoutMs = this.timeoutMs;
    if (timeoutMs === undefined) return pending;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new FloodgateError('ERR_TIMEOUT', `the ${this.store.name} store did not answer within ${timeoutMs} ms`, {
            option: 'timeoutMs',
          }),
        );
      }, timeoutMs);
      pending.then(
        (result) => {
          clearTimeout(timer);
          resolve(result);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  /**
   * The one place a failed store call is routed (see `classifyStoreError`): invalid input and a store's
   * rejection of this one call are thrown to the caller, untouched by the breaker, events and the
   * `failure` policy; a full store is reported and answered by the `failure` policy but never counts
   * toward the breaker (it is healthy for the keys it holds); a fault does all three. Returns the error
   * the `failure` policy answers with. `useBreaker` is false for the sync methods, which skip it.
   */
  private storeFailed(key: string, error: unknown, useBreaker: boolean): FloodgateError {
    const failure = toStoreError(this.store.name, error);
    const breaker = useBreaker ? this.breaker : undefined;
    switch (classifyStoreError(failure)) {
      case 'input':
        breaker?.release();
        throw failure;
      case 'rejected':
        // The store answered: it is reachable, whatever it thought of this call.
        breaker?.success();
        throw failure;
      case 'full':
        breaker?.success();
        this.emit('storeError', { key, error: failure });
        return failure;
      case 'fault':
        breaker?.failure(this.localMs());
        this.emit('storeError', { key, error: failure });
        return failure;
    }
  }

  /** A decision made without the store, as the `failure` option says. */
  private async degrade(
    request: StoreRequest,
    options: CallOptions | undefined,
    error: FloodgateError,
  ): Promise<Decision> {
    const failure = this.failure;
    if (typeof failure === 'object') {
      // A fallback with policies of its own enforces them (say, a share of the global limit per process);
      // one without enforces the call's.
      const fallbackOptions: CallOptions =
        failure.fallback.policies.length > 0
          ? { ...options, cost: request.cost, policies: failure.fallback.policies }
          : { ...options, cost: request.cost, policies: request.policies.map((c) => c.policy) };
      const decision = request.commit
        ? await failure.fallback.limit(request.key, fallbackOptions)
        : await failure.fallback.check(request.key, fallbackOptions);
      return { ...decision, reason: 'degraded' };
    }
    return this.degradeLocally(request, error);
  }

  /** `'open'` and `'closed'` need no I/O: a decision about an untouched key, marked degraded. */
  private degradeLocally(request: StoreRequest, error: FloodgateError): Decision {
    const failure = this.failure;
    if (failure === 'throw' || typeof failure === 'object') throw error;
    // Judge the call against an untouched key: a cost that can never fit is still refused as such.
    const evaluations = request.policies.map(() => emptyEvaluation());
    const nowUs = request.nowUs ?? systemClock.nowUs();
    const allowed = decide(request.policies, [], nowUs, request.cost, { commit: false }, evaluations);
    const decision = toDecision(request.policies, evaluations, allowed);
    if (decision.reason === 'exceeds-capacity') return decision;
    if (failure === 'open') return { ...decision, allowed: true, reason: 'degraded' };
    return {
      ...decision,
      allowed: false,
      remaining: 0,
      retryAfterMs: DEGRADED_RETRY_MS,
      reason: 'degraded',
      policies: decision.policies.map((p) => ({
        ...p,
        allowed: false,
        remaining: 0,
        retryAfterMs: DEGRADED_RETRY_MS,
        reason: 'degraded',
      })),
    };
  }

  /**
   * The promise methods over a synchronous store: no async machinery, the same failure handling, the
   * blocked-key cache and the breaker. (The sync methods skip both: they always ask the store.)
   */
  private settle(key: string, options: CallOptions | undefined, commit: boolean): Promise<Decision> {
    let request: StoreRequest;
    try {
      request = this.request(key, options, commit);
    } catch (error) {
      return Promise.reject(error);
    }
    const cache = this.blockedCache;
    const breaker = this.breaker;
    let nowMs = 0;
    // The clock is read only when a cache or a tripped breaker needs it: the memory store's hot path.
    if (cache !== undefined || (breaker !== undefined && breaker.state !== 'closed')) {
      nowMs = this.localMs();
      const cached = cache?.get(key, request.policies, request.cost, request.maxDelayUs, nowMs);
      if (cached !== undefined) return Promise.resolve(this.decided(request, cached, 'cache'));
      const skip = breaker?.admit(nowMs);
      if (skip !== undefined) {
        const copy = { ...request };
        return this.degrade(copy, options, skip).then((decision) => this.decided(copy, decision, 'degraded'));
      }
    }
    let result: StoreResult;
    try {
      result = (this.syncStore as SyncStore).decideSync(request);
    } catch (error) {
      const copy = { ...request };
      let failure: FloodgateError;
      try {
        failure = this.storeFailed(key, error, true);
      } catch (thrown) {
        return Promise.reject(thrown);
      }
      return this.degrade(copy, options, failure).then((decision) => this.decided(copy, decision, 'degraded'));
    }
    breaker?.success();
    const decision = decisionOf(request, result);
    cache?.remember(key, request.policies, request.cost, request.maxDelayUs, decision, nowMs, commit);
    return Promise.resolve(this.decided(request, decision, 'store'));
  }

  private runSync(key: string, options: CallOptions | undefined, commit: boolean): Decision {
    const store = this.requireSync(commit ? 'limitSync' : 'checkSync');
    const request = this.request(key, options, commit);
    let result: StoreResult;
    try {
      result = store.decideSync(request);
    } catch (error) {
      const failure = this.storeFailed(key, error, false);
      if (typeof this.failure === 'object') throw failure;
      return this.decided(request, this.degradeLocally(request, failure), 'degraded');
    }
    return this.decided(request, decisionOf(request, result), 'store');
  }

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

function validateFailure(failure: unknown): FailurePolicy {
  if (failure === undefined) return 'throw';
  if (failure === 'throw' || failure === 'open' || failure === 'closed') return failure;
  if (
    typeof failure === 'object' &&
    failure !== null &&
    (failure as { fallback?: unknown }).fallback instanceof Limiter
  ) {
    return failure as { fallback: Limiter };
  }
  throw invalid('ERR_INVALID_OPTION', 'failure', failure, "'throw', 'open', 'closed' or { fallback: <limiter> }");
}

function statusOptions(options: KeyOptions | undefined): CallOptions {
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
  }
  return options?.policies === undefined ? { cost: 0 } : { cost: 0, policies: options.policies };
}

/** Validates a policy or a list of policies (objects from the factories, or plain data). */
export function normalizePolicies(input: Policy | readonly Policy[], path: string): readonly Policy[] {
  const list = Array.isArray(input) ? (input as readonly unknown[]) : [input];
  if (list.length > 32) throw invalid('ERR_INVALID_POLICY', path, input, 'at most 32 policies');
  // Array.from visits the holes of a sparse array (as undefined), so each is refused by its index.
  const policies = Array.from(list, (p, i) => definePolicy(p, Array.isArray(input) ? `${path}[${i}]` : path));
  const names = new Set<string>();
  for (const p of policies) {
    if (names.has(p.name)) {
      throw new FloodgateError('ERR_INVALID_POLICY', `${path} has two policies named ${JSON.stringify(p.name)}`, {
        option: path,
      });
    }
    names.add(p.name);
  }
  return Object.freeze(policies);
}

function wholeClockUs(nowUs: number): number {
  if (!Number.isFinite(nowUs) || nowUs < 0 || nowUs > Number.MAX_SAFE_INTEGER) {
    throw invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of µs since the epoch');
  }
  return Math.floor(nowUs);
}

function validateDelay(ms: unknown): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > 2 ** 40) {
    throw invalid('ERR_INVALID_OPTION', 'maxDelayMs', ms, 'a finite number of milliseconds ≥ 0');
  }
  return Math.round(ms * 1000);
}
