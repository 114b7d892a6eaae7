import { type Clock, systemClock } from '../clock.js';
import { FloodgateError, invalid, isFloodgateError } from '../errors.js';
import { splitPolicies } from '../limiter/concurrent.js';
import { takeLease } from '../limiter/leasing.js';
import { createLimiter, Limiter, normalizePolicies } from '../limiter/limiter.js';
import { POLICY_HINTS } from '../limiter/validation.js';
import { validateCost } from '../model/cost.js';
import type { Decision, Policy } from '../model/index.js';
import type { ConcurrencyPolicy } from '../permits/policy.js';
import { isSyncStore } from '../stores/store.js';
import { classifyStoreError } from '../stores/store-errors.js';
import { loadTelemetry, telemetry } from '../telemetry/otel.js';
import { responder } from './denial.js';
import {
  type HttpRateLimiter,
  isThenable,
  type MaybePromise,
  optionalFunction,
  type RateLimitOptions,
  type RateLimitOutcome,
  type RequestAccess,
} from './options.js';
import { reportOutages } from './outages.js';
import { type Refunds, refunds } from './refunds.js';
import { requestKey } from './request-key.js';
import { type Settles, settles } from './settles.js';
import { type Shared, warnOnce } from './warnings.js';

export * from './options.js';
export { emitFloodgateWarning, type FloodgateWarningCode } from './warnings.js';

/** Options that shape a limiter: a middleware derived with any of them gets a limiter of its own. */
const LIMITER_OPTIONS = ['limiter', 'store', 'prefix', 'timeoutMs', 'failure', 'breaker', 'permits'] as const;

/** Builds the limiter a middleware decides with: the caller's, or one from the limiter options. */
export function buildLimiter<Req>(
  options: RateLimitOptions<Req>,
  policies: readonly (Policy | ConcurrencyPolicy)[] | undefined,
): Limiter {
  if (options.limiter !== undefined) {
    if (!(options.limiter instanceof Limiter)) {
      throw invalid('ERR_INVALID_OPTION', 'limiter', options.limiter, 'a limiter from createLimiter()');
    }
    for (const option of LIMITER_OPTIONS.slice(1)) {
      if (options[option] !== undefined) {
        throw new FloodgateError(
          'ERR_INVALID_OPTION',
          `${option} configures the limiter built here; set it on \`limiter\` instead`,
          {
            option,
          },
        );
      }
    }
    reportOutages(options.limiter);
    return options.limiter;
  }
  const store = options.store;
  const timeoutMs = options.timeoutMs;
  const limiter = createLimiter({
    ...(store === undefined ? {} : { store }),
    ...(policies === undefined ? {} : { policies }),
    ...(options.permits === undefined ? {} : { permits: options.permits }),
    prefix: options.prefix ?? 'http',
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    failure: options.failure ?? 'open',
    ...(options.breaker === undefined ? {} : { breaker: options.breaker }),
  });
  reportOutages(limiter);
  return limiter;
}

/** Exposes the deciding limiter on a middleware function, read-only (for `reset`, events, metrics). */
export function withLimiter<F extends object>(middleware: F, limiter: Limiter): F & { readonly limiter: Limiter } {
  Object.defineProperty(middleware, 'limiter', { value: limiter, enumerable: true });
  return middleware as F & { readonly limiter: Limiter };
}

/**
 * Builds the framework-neutral middleware every adapter wraps: it computes the decision first and turns
 * it into a status, headers and a body second, so each adapter only copies them onto its response.
 *
 * @example
 * ```ts
 * const decide = createHttpRateLimiter({ policies: gcra({ limit: 100, periodMs: 60_000 }) }, access);
 * const outcome = await decide(request);
 * ```
 */
export function createHttpRateLimiter<Req>(
  options: RateLimitOptions<Req>,
  access: RequestAccess<Req>,
): HttpRateLimiter<Req> {
  return build(options, access, { warned: new Set(), proxyChecked: false });
}

/** express-rate-limit's options, which rateLimit refuses with what to write instead. */
const EXPRESS_RATE_LIMIT_HINTS: Readonly<Record<string, string>> = {
  ...POLICY_HINTS,
  keyGenerator: 'the key is key: (request) => string',
  standardHeaders: "the header format is headers: 'ietf' (or 'draft-7', 'draft-6')",
  legacyHeaders: "the header format is headers: 'legacy'",
};

/**
 * True when another answer went out while the decision was pending (a timeout, a guard, a stream): the
 * request does not go on, nothing is added to that answer, and a permit the decision holds goes back at once.
 */
export function answeredElsewhere(outcome: RateLimitOutcome, answered: boolean): boolean {
  if (answered) void outcome.settle?.(undefined);
  return answered;
}

/**
 * Refuses options that are not an object, and express-rate-limit's (`windowMs`, `limit`, `max`…) with
 * what to write instead, before an adapter reads them.
 */
export function requireOptions<T>(options: T): NonNullable<T> {
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'rateLimit options', options, 'an object');
  }
  for (const habit of Object.keys(EXPRESS_RATE_LIMIT_HINTS)) {
    if ((options as Record<string, unknown>)[habit] !== undefined) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `${habit} is not an option of rateLimit (${EXPRESS_RATE_LIMIT_HINTS[habit]})`,
        { option: habit, unknownOption: true },
      );
    }
  }
  return options as NonNullable<T>;
}

function checkHooks<Req>(options: RateLimitOptions<Req>): void {
  optionalFunction(options.key, 'key');
  optionalFunction(options.skip, 'skip');
  optionalFunction(options.requestWasSuccessful, 'requestWasSuccessful');
}

function resolveClock<Req>(options: RateLimitOptions<Req>): Clock {
  const clock = options.clock ?? systemClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs()');
  }
  return clock;
}

function build<Req>(options: RateLimitOptions<Req>, access: RequestAccess<Req>, shared: Shared): HttpRateLimiter<Req> {
  requireOptions(options);
  // Per-call policies are checked for refunds when first seen, by the refunds built with the limiter.
  let refund: Refunds<Req> | undefined;
  let settle: Settles<Req> | undefined;
  const checks = (list: readonly Policy[]): void => {
    refund?.check(list);
    settle?.check(list);
  };
  const { limiter, policiesOf, defaultPolicies } = resolvePolicies(options, checks);
  checkHooks(options);
  const costOf = resolveCost(options);
  const keyOf = requestKey(options, access, shared);
  const clock = resolveClock(options);
  const respond = responder(options, clock, refuseRefunds(options, limiter.concurrency));
  refund = refunds(options, limiter, shared);
  settle = settles(options, limiter, shared);
  if (typeof options.policies !== 'function') checks(defaultPolicies);
  const skip = options.skip;
  // With a synchronous store and synchronous hooks a request is decided without a promise: the memory
  // store's decision costs less than the promises around it. Any hook that returns a promise, or an
  // asynchronous store, switches that request to the promise path.
  const syncStore = isSyncStore(limiter.store);
  void loadTelemetry();
  type Result = MaybePromise<RateLimitOutcome | undefined>;

  const finish = (
    request: Req,
    key: string,
    cost: number,
    decision: Decision,
    policies: readonly Policy[] | undefined,
    settle: RateLimitOutcome['settle'],
  ): Result => {
    // The decision as an event on the request's own span (the HTTP server's), when tracing is on.
    telemetry?.spanEvent(limiter.prefix, key, decision);
    const outcome = respond(request, key, cost, decision, policies ?? defaultPolicies, settle);
    if (decision.delayMs === undefined || decision.delayMs <= 0) return outcome;
    return clock.sleep(decision.delayMs).then(() => outcome);
  };

  const limited = (request: Req, key: string, cost: number, policies: readonly Policy[] | undefined): Result => {
    if (limiter.concurrency !== undefined || settle !== undefined) {
      // A permit held until the response is over, or a cost that is an estimate (settled after it).
      return holdingLimit(limiter, settle, request, key, cost, policies, shared).then(([d, s]) =>
        finish(request, key, cost, d, policies, s),
      );
    }
    if (refund !== undefined && cost > 0) {
      // A lease of the request's cost: the same decision, with the time the store took it, which is
      // what giving the cost back needs.
      const call = policies === undefined ? undefined : { policies };
      // Not through `limiter.limit`: reported to OpenTelemetry here, as `limit` would report it.
      const t = telemetry;
      const startedMs = t === undefined ? 0 : t.now();
      return takeLease(limiter, key, cost, cost, call).then(({ decision, atUs }) => {
        t?.decided(limiter.prefix, 'limit', key, decision, startedMs);
        const consumed = decision.allowed && decision.reason !== 'degraded' && atUs !== undefined;
        const settle = consumed ? refund.settler(request, key, cost, policies, atUs) : undefined;
        return finish(request, key, cost, decision, policies, settle);
      });
    }
    const call = policies !== undefined ? { cost, policies } : cost === 1 ? undefined : { cost };
    if (syncStore) {
      let decision: Decision;
      try {
        decision = limiter.limitSync(key, call);
      } catch (error) {
        // The synchronous path has no fallback limiter: let the promise path apply the failure policy.
        const kind = classifyStoreError(error);
        if (!isFloodgateError(error) || (kind !== 'fault' && kind !== 'full')) throw error;
        return limiter.limit(key, call).then((d) => finish(request, key, cost, d, policies, undefined));
      }
      return finish(request, key, cost, decision, policies, undefined);
    }
    return limiter.limit(key, call).then((d) => finish(request, key, cost, d, policies, undefined));
  };

  const keyed = (request: Req, policies: readonly Policy[] | undefined): Result => {
    const key = keyOf(request);
    const cost = costOf(request);
    if (isThenable(key) || isThenable(cost)) {
      return Promise.all([key, cost]).then(([k, c]) => limited(request, k, c, policies));
    }
    return limited(request, key, cost, policies);
  };

  const chosen = (request: Req): Result => {
    const list = policiesOf(request);
    if (isThenable(list)) return list.then((l) => (l === null ? undefined : keyed(request, l)));
    return list === null ? undefined : keyed(request, list);
  };

  const decideNow = (request: Req): Result => {
    if (skip === undefined) return chosen(request);
    const skipped = skip(request);
    if (isThenable(skipped)) return skipped.then((s) => (s ? undefined : chosen(request)));
    return skipped ? undefined : chosen(request);
  };

  const decide = (request: Req): Promise<RateLimitOutcome | undefined> => {
    try {
      return Promise.resolve(decideNow(request));
    } catch (error) {
      return Promise.reject(error);
    }
  };

  const middleware = decide as HttpRateLimiter<Req>;
  withLimiter(middleware, limiter);
  Object.defineProperty(middleware, 'decide', { value: decideNow });
  Object.defineProperty(middleware, 'derive', {
    value: (overrides: RateLimitOptions<Req>): HttpRateLimiter<Req> =>
      build(derivedOptions(options, overrides, limiter), access, shared),
  });
  return middleware;
}

/** `skipFailedRequests` and `skipSuccessfulRequests` take a lease of the rate alone: not beside a permit yet. */
function refuseRefunds<Req>(
  options: RateLimitOptions<Req>,
  concurrency: ConcurrencyPolicy | undefined,
): ConcurrencyPolicy | undefined {
  const option = options.skipFailedRequests === true ? 'skipFailedRequests' : 'skipSuccessfulRequests';
  if (concurrency !== undefined && options[option] === true) {
    throw new FloodgateError('ERR_INVALID_OPTION', `${option} cannot be combined with a concurrency policy yet`, {
      option,
    });
  }
  return concurrency;
}

/** Decides a request on a limiter with a concurrency policy: the decision, and the outcome's `settle`. */
function holdingLimit<Req>(
  limiter: Limiter,
  settle: Settles<Req> | undefined,
  request: Req,
  key: string,
  cost: number,
  policies: readonly Policy[] | undefined,
  shared: Shared,
): Promise<[Decision, RateLimitOutcome['settle']]> {
  const decided: Promise<[Decision, RateLimitOutcome['settle']]> =
    settle !== undefined
      ? settle.limit(request, key, cost, policies)
      : limiter.limit(key, policies !== undefined ? { cost, policies } : { cost }).then((d) => [d, undefined]);
  return decided.then(([d, s]) => [d, holding(limiter, d, s, shared)]);
}

/**
 * The outcome's `settle` of a request admitted with a permit: releases the permit (once, whatever the
 * status, or `undefined` when the client went away), then settles the request as `settle` would.
 */
function holding(
  limiter: Limiter,
  decision: Decision,
  settle: RateLimitOutcome['settle'],
  shared: Shared,
): RateLimitOutcome['settle'] {
  if (decision.permit === undefined) return settle;
  let done: Promise<void> | undefined;
  return (statusCode) => {
    done ??= limiter.release(decision).then(
      () => settle?.(statusCode),
      (error: unknown) => {
        // The lease runs out on its own: the permit is back within leaseMs.
        warnOnce(
          shared,
          'FLOODGATE_RELEASE_FAILED',
          `a permit could not be released, so it stays out until its lease runs out: ${error instanceof Error ? error.message : String(error)}`,
        );
        return settle?.(statusCode);
      },
    );
    return done;
  };
}

/**
 * The policies of a middleware: its limiter (the caller's, or one built from the options), the policies
 * each request goes with (`undefined`: the limiter's own; `null`: skip limiting), and the list headers
 * describe when a request names none. Per-call policies are normalized once per array object, so
 * headers and the limiter's cache agree, and `check` sees each list once.
 */
function resolvePolicies<Req>(
  options: RateLimitOptions<Req>,
  check: (list: readonly Policy[]) => void,
): {
  limiter: Limiter;
  policiesOf: (request: Req) => MaybePromise<readonly Policy[] | undefined | null>;
  defaultPolicies: readonly Policy[];
} {
  const policyOption = options.policies;
  // A concurrency policy among fixed policies goes to the limiter built here, beside the rate policies.
  const split =
    policyOption === undefined || typeof policyOption === 'function' ? undefined : splitPolicies(policyOption);
  const fixedPolicies =
    split === undefined ? undefined : normalizePolicies((split.rate ?? []) as Policy | readonly Policy[], 'policies');
  const limiter = buildLimiter(
    options,
    split?.concurrency === undefined || options.limiter !== undefined
      ? fixedPolicies
      : withConcurrency(fixedPolicies ?? [], split.concurrency, split.index),
  );
  if (split?.concurrency !== undefined && options.limiter !== undefined) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      "a concurrency policy is the limiter's: give it to createLimiter({ policies, permits }), not to rateLimit beside `limiter`",
      { option: 'policies' },
    );
  }
  if (policyOption === undefined && limiter.policies.length === 0 && limiter.concurrency === undefined) {
    throw new FloodgateError('ERR_INVALID_POLICY', 'rateLimit needs `policies`, or a `limiter` that has some', {
      option: 'policies',
    });
  }
  const normalized = new WeakMap<object, readonly Policy[]>();
  const normalize = (input: Policy | readonly Policy[]): readonly Policy[] => {
    let list = normalized.get(input);
    if (list === undefined) {
      list = normalizePolicies(input, 'policies');
      check(list);
      normalized.set(input, list);
    }
    return list;
  };
  // Policies given to a limiter built here are its own; with a caller's limiter they go with each call.
  const callPolicies = options.limiter !== undefined ? fixedPolicies : undefined;
  const choose = typeof policyOption === 'function' ? policyOption : undefined;
  const policiesOf =
    choose === undefined
      ? () => callPolicies
      : (request: Req): MaybePromise<readonly Policy[] | null> => {
          const list = choose(request);
          if (isThenable(list)) return list.then((l) => (l === undefined ? null : normalize(l)));
          return list === undefined ? null : normalize(list);
        };
  return { limiter, policiesOf, defaultPolicies: fixedPolicies ?? limiter.policies };
}

/** The rate policies with the concurrency policy put back at its place. */
function withConcurrency(
  rate: readonly Policy[],
  concurrency: ConcurrencyPolicy,
  index: number,
): readonly (Policy | ConcurrencyPolicy)[] {
  const list: (Policy | ConcurrencyPolicy)[] = [...rate];
  list.splice(Math.min(index, list.length), 0, concurrency);
  return list;
}

/** What a request costs: the `cost` option's number (validated here) or function (checked per call by the limiter). */
function resolveCost<Req>(options: RateLimitOptions<Req>): (request: Req) => MaybePromise<number> {
  const cost = options.cost;
  if (typeof cost === 'function') return cost;
  if (cost === undefined) return () => 1;
  // The one cost domain.
  if (typeof cost !== 'number') throw invalid('ERR_INVALID_COST', 'cost', cost, 'a number or a function');
  validateCost(cost);
  return () => cost;
}

/**
 * The options of a middleware derived from one with `options` (a route's): the overrides replace
 * options, and unless they shape a limiter of their own (`store`, `prefix`…) it decides with `limiter`.
 */
export function derivedOptions<Req>(
  options: RateLimitOptions<Req>,
  overrides: RateLimitOptions<Req>,
  limiter: Limiter,
): RateLimitOptions<Req> {
  const merged: RateLimitOptions<Req> = { ...options, ...overrides };
  if (!LIMITER_OPTIONS.some((option) => overrides[option] !== undefined)) {
    for (const option of LIMITER_OPTIONS) delete merged[option];
    merged.limiter = limiter;
    merged.policies ??= limiter.policies;
  }
  return merged;
}
