import { systemClock } from '../clock.js';
import { FloodgateError } from '../errors.js';
import { decide } from '../model/decide.js';
import { type Decision, toDecision } from '../model/decision.js';
import { emptyEvaluation } from '../model/types.js';
import type { Store, StoreRequest, StoreResult, SyncStore } from '../stores/store.js';
import { classifyStoreError, toStoreError } from '../stores/store-errors.js';
import type { Breaker } from './breaker.js';
import { Deadlines, TIMED_OUT, type Waiting } from './deadlines.js';
import type { CallOptions, FailurePolicy, LimiterEvents } from './limiter.js';

/**
 * A timed call's `expire` until the store sets it (`Store.decideTimed`); a store that fails the call at
 * once leaves it, and the call is answered before its time is up.
 */
const UNSET = (): void => undefined;

/** How long a `'closed'` failure tells callers to wait. */
const DEGRADED_RETRY_MS = 1000;

/**
 * A decision made without the store (the breaker was open, or the store failed), as the `failure` option
 * says, with the request it answers (a copy: a synchronous store's request object is reused).
 */
export interface Degraded {
  readonly degraded: true;
  readonly request: StoreRequest;
  readonly decision: Decision;
}

/** What a store call ends as: the store's result, or a decision made without it. */
export type Outcome = StoreResult | Degraded;

/** Whether an outcome was decided without the store (a field read: outcomes are plain objects). */
export function isDegraded(outcome: Outcome): outcome is Degraded {
  return (outcome as Partial<Degraded>).degraded === true;
}

/** Whether a store call is still running (a synchronous store answers with its result itself). */
export function isPending(outcome: Outcome | Promise<Outcome>): outcome is Promise<Outcome> {
  return typeof (outcome as Partial<Promise<Outcome>>).then === 'function';
}

/** What the store-call path needs of its limiter. */
export interface StoreCallOptions {
  readonly store: Store;
  readonly timeoutMs: number | undefined;
  readonly failure: FailurePolicy;
  readonly breaker: Breaker | undefined;
  /** The limiter's local clock, ms: the breaker's time. */
  localMs(): number;
  /** Reports a store error to the limiter's listeners. */
  storeError(event: LimiterEvents['storeError']): void;
}

/**
 * The one store-call path of a limiter: store → breaker → `storeError` events → the `failure` policy.
 * Every call that asks the store goes through it (`limit`, `check`, `status`, their sync forms, leases,
 * the synced limiter), so a store failure is handled the same way whatever asked.
 */
export class StoreCall {
  readonly store: Store;
  private readonly syncStore: SyncStore | undefined;
  /** The timeouts of calls to a store that answers asynchronously, when `timeoutMs` is set. */
  private readonly deadlines: Deadlines | undefined;

  constructor(private readonly options: StoreCallOptions) {
    this.store = options.store;
    this.deadlines = options.timeoutMs === undefined ? undefined : new Deadlines(options.timeoutMs);
    this.syncStore =
      typeof (options.store as Partial<SyncStore>).decideSync === 'function' ? (options.store as SyncStore) : undefined;
  }

  /**
   * Asks the store for a decision: synchronously when the store decides synchronously (the outcome is
   * then a promise only when a `fallback` limiter answers a failure), else bounded by `timeoutMs`. In
   * `'promise'` mode the breaker may skip the store and hears how the call went; in `'sync'` mode (the
   * sync methods) it is neither asked nor told, and a `fallback` failure policy throws (it is
   * asynchronous). A failure is routed by `failed` (input errors and rejections are thrown to the caller)
   * and answered by the `failure` policy, for `instead` when given (a lease answers the one call that
   * asked for it, not the whole lease).
   */
  decide(
    request: StoreRequest,
    options: CallOptions | undefined,
    mode: 'promise' | 'sync',
    instead?: { request: StoreRequest; options: CallOptions },
  ): Outcome | Promise<Outcome> {
    const promise = mode === 'promise';
    const gate = promise ? this.options.breaker : undefined;
    // A closed breaker lets every call through: the clock is read only when it may not.
    const skip = gate !== undefined && gate.state !== 'closed' ? gate.admit(this.options.localMs()) : undefined;
    if (skip !== undefined) return this.instead(request, options, skip, promise, instead);
    const sync = this.syncStore;
    if (sync !== undefined) {
      let result: StoreResult;
      try {
        result = sync.decideSync(request);
      } catch (error) {
        return this.instead(request, options, this.failed(request.key, error, promise), promise, instead);
      }
      gate?.success();
      return result;
    }
    return this.asynchronously(request, options, gate, instead);
  }

  /**
   * `decide` on a store that answers with a promise (its closures kept out of the synchronous path). With
   * `timeoutMs`, the store's answer and the deadline settle one promise (`bounded` and a `then` on it
   * allocated two promises and four closures more for every call to a network store).
   */
  private asynchronously(
    request: StoreRequest,
    options: CallOptions | undefined,
    gate: Breaker | undefined,
    instead: { request: StoreRequest; options: CallOptions } | undefined,
  ): Promise<Outcome> {
    const deadlines = this.deadlines;
    if (deadlines !== undefined && this.store.decideTimed !== undefined) {
      return this.timedOnStore(request, options, gate, instead, deadlines);
    }
    const pending = this.store.decide(request);
    if (deadlines === undefined) {
      return pending.then(
        (result) => {
          gate?.success();
          return result;
        },
        (error: unknown) => this.instead(request, options, this.failed(request.key, error, true), true, instead),
      );
    }
    return this.wrapped(pending, request, options, gate, instead, deadlines);
  }

  /** A store call bounded by a promise of the limiter's own, which the answer or the deadline settles. */
  private wrapped(
    pending: Promise<StoreResult>,
    request: StoreRequest,
    options: CallOptions | undefined,
    gate: Breaker | undefined,
    instead: { request: StoreRequest; options: CallOptions } | undefined,
    deadlines: Deadlines,
  ): Promise<Outcome> {
    return new Promise<Outcome>((resolve, reject) => {
      // The store failed, or did not answer in time: the failure policy answers (an input error is thrown).
      const fail = (error: unknown): void => {
        try {
          const failure = this.failed(request.key, error === TIMED_OUT ? this.timedOut() : error, true);
          resolve(this.instead(request, options, failure, true, instead));
        } catch (thrown) {
          reject(thrown);
        }
      };
      const entry = deadlines.start(fail);
      pending.then(
        (result) => {
          // An answer after the deadline is not the call's: it has failed with the timeout already.
          if (!deadlines.answered(entry)) return;
          gate?.success();
          resolve(result);
        },
        (error: unknown) => {
          if (deadlines.answered(entry)) fail(error);
        },
      );
    });
  }

  /**
   * `asynchronously` on a store that keeps the deadline on its own record of the call
   * (`Store.decideTimed`): its promise is the call's, rejected with `TIMED_OUT` when the time is up first
   * (the store's answer then comes to a settled promise and is dropped, so a late answer is never a
   * success for the breaker).
   */
  private timedOnStore(
    request: StoreRequest,
    options: CallOptions | undefined,
    gate: Breaker | undefined,
    instead: { request: StoreRequest; options: CallOptions } | undefined,
    deadlines: Deadlines,
  ): Promise<Outcome> {
    // The call goes out first: the deadline's bookkeeping runs while it travels.
    const entry: Waiting = { at: 0, expire: UNSET, done: false };
    const pending = (this.store.decideTimed as NonNullable<Store['decideTimed']>)(request, entry);
    if (entry.expire === UNSET) {
      // The store did not keep the deadline (it failed the call at once, or does not set it as it should):
      // the limiter bounds the call itself.
      return this.wrapped(pending, request, options, gate, instead, deadlines);
    }
    deadlines.track(entry);
    return pending.then(
      (result) => {
        // False: the time was up first, and the store's reject did not end the call: it has timed out.
        if (deadlines.answered(entry)) {
          gate?.success();
          return result;
        }
        return this.instead(request, options, this.failed(request.key, this.timedOut(), true), true, instead);
      },
      (error: unknown) => {
        // TIMED_OUT: the deadlines have let the call go already; a failure after the time was up is a timeout.
        const late = error === TIMED_OUT || !deadlines.answered(entry);
        const failure = this.failed(request.key, late ? this.timedOut() : error, true);
        return this.instead(request, options, failure, true, instead);
      },
    );
  }

  /** The failure policy's answer to a call the store did not decide (for `instead` when given). */
  private instead(
    request: StoreRequest,
    options: CallOptions | undefined,
    error: FloodgateError,
    async: boolean,
    instead: { request: StoreRequest; options: CallOptions } | undefined,
  ): Degraded | Promise<Degraded> {
    // A copy: a synchronous store's request object is reused by the next call.
    return instead === undefined
      ? this.degrade({ ...request }, options, error, async)
      : this.degrade(instead.request, instead.options, error, async);
  }

  /** A store call bounded by `timeoutMs` when set (one timer for all of them: see `Deadlines`). */
  bounded<T>(pending: Promise<T>): Promise<T> {
    const deadlines = this.deadlines;
    if (deadlines === undefined) return pending;
    return new Promise<T>((resolve, reject) => {
      const entry = deadlines.start(() => reject(this.timedOut()));
      pending.then(
        (result) => {
          if (!deadlines.answered(entry)) return;
          resolve(result);
        },
        (error: unknown) => {
          if (!deadlines.answered(entry)) return;
          reject(error);
        },
      );
    });
  }

  /** The error of a call the store did not answer within `timeoutMs`. */
  private timedOut(): FloodgateError {
    // Why, when the store can tell (`connection refused to 127.0.0.1:6379`).
    const why = this.store.unreachable?.();
    return new FloodgateError(
      'ERR_TIMEOUT',
      `the ${this.store.name} store did not answer within ${this.options.timeoutMs} ms${why === undefined ? '' : `: ${why}`}`,
      { option: 'timeoutMs' },
    );
  }

  /**
   * The one place a failed store call is routed (see `classifyStoreError`): invalid input and a store's
   * rejection of this one call are thrown to the caller, untouched by the breaker, events and the
   * `failure` policy; a full store is reported and answered by the `failure` policy but never counts
   * toward the breaker (it is healthy for the keys it holds); a fault does all three. Returns the error
   * the `failure` policy answers with. `breaker` is false for the sync methods, which skip it.
   */
  failed(key: string, error: unknown, breaker: boolean): FloodgateError {
    const failure = toStoreError(this.store.name, error);
    const gate = breaker ? this.options.breaker : undefined;
    switch (classifyStoreError(failure)) {
      case 'input':
        gate?.release();
        throw failure;
      case 'rejected':
        // The store answered: it is reachable, whatever it thought of this call.
        gate?.success();
        throw failure;
      case 'full':
        gate?.success();
        this.options.storeError({ key, error: failure });
        return failure;
      case 'fault':
        gate?.failure(this.options.localMs(), failure);
        this.options.storeError({ key, error: failure });
        return failure;
    }
  }

  /**
   * A decision made without the store, as the `failure` option says: `'throw'` rethrows, `'open'` and
   * `'closed'` judge the call against an untouched key, a `fallback` limiter decides it (asynchronously,
   * so not for the sync methods: `async` false throws instead).
   */
  degrade(
    request: StoreRequest,
    options: CallOptions | undefined,
    error: FloodgateError,
    async: boolean,
  ): Degraded | Promise<Degraded> {
    const failure = this.options.failure;
    if (typeof failure !== 'object')
      return { degraded: true, request, decision: degradeLocally(failure, request, error) };
    if (!async) throw error;
    // A fallback with policies of its own enforces them (say, a share of the global limit per process);
    // one without enforces the call's.
    const fallbackOptions: CallOptions =
      failure.fallback.policies.length > 0
        ? { ...options, cost: request.cost, policies: failure.fallback.policies }
        : { ...options, cost: request.cost, policies: request.policies.map((c) => c.policy) };
    const asked = request.commit
      ? failure.fallback.limit(request.key, fallbackOptions)
      : failure.fallback.check(request.key, fallbackOptions);
    return asked.then((decision) => ({
      degraded: true,
      request,
      decision: { ...decision, reason: 'degraded' },
    }));
  }
}

/** `'open'` and `'closed'` need no I/O: a decision about an untouched key, marked degraded. */
function degradeLocally(failure: 'throw' | 'open' | 'closed', request: StoreRequest, error: FloodgateError): Decision {
  if (failure === 'throw') throw error;
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
