import { type Clock, systemClock } from '../clock.js';
import { FloodgateError, invalid, isFloodgateError } from '../errors.js';
import type { BreakerOptions } from '../limiter/breaker.js';
import { createLimiter, type FailurePolicy, Limiter, normalizePolicies } from '../limiter/limiter.js';
import { validateCost } from '../model/cost.js';
import type { Decision, Policy } from '../model/index.js';
import { isSyncStore, type Store } from '../stores/store.js';
import { classifyStoreError } from '../stores/store-errors.js';
import { addressKey } from './address.js';
import { clientAddress, compileTrustProxy, type TrustProxy } from './client-address.js';
import { deniedProblem, type HeaderFormat, headerWriter, seconds, validateHeaderFormat } from './headers.js';

/** A value, or a promise of it: every hook may be synchronous or asynchronous. */
export type MaybePromise<T> = T | Promise<T>;

/** Policies, or a function choosing them per request (per plan, per route); `undefined` skips limiting. */
export type PoliciesOption<Req> =
  | Policy
  | readonly Policy[]
  | ((request: Req) => MaybePromise<Policy | readonly Policy[] | undefined>);

/** Options every adapter's `rateLimit` takes; `Req` is the framework's request (or context). */
export interface RateLimitOptions<Req> {
  /**
   * What to enforce, all-or-nothing: a policy, a list, or a function of the request (a user's plan).
   * A function should return the same array object for the same plan: compiled policies are cached per
   * array. Defaults to the policies of `limiter`.
   */
  policies?: PoliciesOption<Req>;
  /** A limiter to decide with. When omitted one is built from `store`, `prefix`, `clock`, `timeoutMs`, `failure`. */
  limiter?: Limiter;
  /** Store of the limiter built here. @default memoryStore() */
  store?: Store;
  /** Key prefix of the limiter built here. @default 'http' */
  prefix?: string;
  /**
   * Longest wait for the store (limiter built here). @default 1000 for stores that answer asynchronously
   * (network stores), none for the memory and SQLite stores
   */
  timeoutMs?: number;
  /**
   * What happens when the store fails or times out (limiter built here): `'open'` admits, `'closed'`
   * answers 503, `{ fallback }` decides with another limiter. A request never waits on a dead store.
   * @default 'open'
   */
  failure?: FailurePolicy;
  /** Circuit breaker of the limiter built here; see the limiter's `breaker` option. */
  breaker?: BreakerOptions | false;
  /** Time source of the limiter built here, of the legacy reset epoch and of queue delays. @default systemClock */
  clock?: Clock;
  /**
   * The client's key (a user id, an API key). Default: the client address, grouped per `ipv6PrefixLength`.
   * Keys are data: any string works and cannot reach into another key.
   */
  key?: (request: Req) => MaybePromise<string>;
  /** What a request costs (e.g. the records of a JSON batch); 0 only checks. @default 1 */
  cost?: number | ((request: Req) => MaybePromise<number>);
  /** Requests for which this returns true are not limited and get no headers. */
  skip?: (request: Req) => MaybePromise<boolean>;
  /** Rate-limit header format; see {@link HeaderFormat}. @default 'ietf' */
  headers?: HeaderFormat;
  /** `qu` of the `RateLimit-Policy` header when costs are not requests (`'content-bytes'`). */
  quotaUnit?: string;
  /** When to believe `X-Forwarded-For` / `Forwarded`; never by default. See {@link TrustProxy}. */
  trustProxy?: TrustProxy | false;
  /** IPv6 clients sharing this prefix share a key. @default 64 */
  ipv6PrefixLength?: number;
  /** IPv4 clients sharing this prefix share a key. @default 32 */
  ipv4PrefixLength?: number;
  /** Status of a request denied by a policy. @default 429 */
  statusCode?: number;
  /** Status of a request refused because the store is down and `failure` is `'closed'`. @default 503 */
  degradedStatusCode?: number;
}

/** How an adapter reads the parts of a request the default key needs. */
export interface RequestAccess<Req> {
  /** The socket's peer address (`req.socket.remoteAddress`). */
  peer(request: Req): string | undefined;
  /** A request header by lower-case name, repeated fields joined with `, `. */
  header(request: Req, name: string): string | undefined;
}

/** What to do with one request: the decision, and the response parts that follow from it. */
export interface RateLimitOutcome {
  readonly decision: Decision;
  /** False when the response must be `status` with `body` and the handler must not run. */
  readonly allowed: boolean;
  /** 429, 503 (degraded, failure `'closed'`), or 200 when allowed. */
  readonly status: number;
  /** Response headers as name, value, name, value…; set them on allowed and denied responses alike. */
  readonly headers: string[];
  /** The `application/problem+json` body of a denied request. */
  readonly body: string | undefined;
}

/** Content type of the denial body. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** The framework-neutral middleware: decides a request and says how to answer. */
export interface HttpRateLimiter<Req> {
  /** Decides a request; `undefined` when skipped. Rejects only on programming errors or a failure policy of `'throw'`. */
  (request: Req): Promise<RateLimitOutcome | undefined>;
  /**
   * Decides a request like the call itself, but answers synchronously when every hook and the store are
   * synchronous (the memory store), and may throw: for adapters that avoid a promise per request.
   */
  decide(request: Req): MaybePromise<RateLimitOutcome | undefined>;
  /** The limiter deciding. */
  readonly limiter: Limiter;
  /** Builds another middleware sharing this one's limiter, with some options replaced (a route's). */
  derive(overrides: RateLimitOptions<Req>): HttpRateLimiter<Req>;
}

/** Most client addresses whose keys a middleware remembers. */
const ADDRESS_KEYS_CACHED = 10_000;

/** Options that shape a limiter: a middleware derived with any of them gets a limiter of its own. */
const LIMITER_OPTIONS = ['limiter', 'store', 'prefix', 'timeoutMs', 'failure', 'breaker'] as const;

/** True for a promise (or any thenable): hooks may answer either way. */
export const isThenable = <T>(value: MaybePromise<T>): value is Promise<T> =>
  typeof (value as { then?: unknown } | null)?.then === 'function';

function prefixLength(value: unknown, option: string, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || (value as number) < 0 || (value as number) > max) {
    throw invalid('ERR_INVALID_OPTION', option, value, `an integer from 0 to ${max}`);
  }
  return value as number;
}

function statusCode(value: unknown, option: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || (value as number) < 400 || (value as number) > 599) {
    throw invalid('ERR_INVALID_OPTION', option, value, 'an HTTP error status from 400 to 599');
  }
  return value as number;
}

function optionalFunction(value: unknown, option: string): void {
  if (value !== undefined && typeof value !== 'function')
    throw invalid('ERR_INVALID_OPTION', option, value, 'a function');
}

function buildLimiter<Req>(options: RateLimitOptions<Req>, policies: readonly Policy[] | undefined): Limiter {
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
    return options.limiter;
  }
  const store = options.store;
  const async = store !== undefined && typeof store === 'object' && store !== null && !isSyncStore(store);
  const timeoutMs = options.timeoutMs ?? (async ? 1000 : undefined);
  return createLimiter({
    ...(store === undefined ? {} : { store }),
    ...(policies === undefined ? {} : { policies }),
    prefix: options.prefix ?? 'http',
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    failure: options.failure ?? 'open',
    ...(options.breaker === undefined ? {} : { breaker: options.breaker }),
  });
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
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'rateLimit options', options, 'an object');
  }
  const policyOption = options.policies;
  const fixedPolicies =
    policyOption === undefined || typeof policyOption === 'function'
      ? undefined
      : normalizePolicies(policyOption as Policy | readonly Policy[], 'policies');
  const limiter = buildLimiter(options, fixedPolicies);
  // Policies given to a limiter built here are its own; with a caller's limiter they go with each call.
  const callPolicies = options.limiter !== undefined ? fixedPolicies : undefined;
  const choosePolicies = typeof policyOption === 'function' ? policyOption : undefined;
  if (policyOption === undefined && limiter.policies.length === 0) {
    throw new FloodgateError('ERR_INVALID_POLICY', 'rateLimit needs `policies`, or a `limiter` that has some', {
      option: 'policies',
    });
  }
  const defaultPolicies = fixedPolicies ?? limiter.policies;

  optionalFunction(options.key, 'key');
  optionalFunction(options.skip, 'skip');
  const cost = options.cost;
  if (cost !== undefined && typeof cost !== 'function') {
    // The one cost domain (a function's costs are checked per call, by the limiter).
    if (typeof cost !== 'number') throw invalid('ERR_INVALID_COST', 'cost', cost, 'a number or a function');
    validateCost(cost);
  }
  const costOf = typeof cost === 'function' ? cost : undefined;
  const fixedCost = typeof cost === 'number' ? cost : 1;
  const skip = options.skip;
  const format = validateHeaderFormat(options.headers);
  if (
    options.quotaUnit !== undefined &&
    (typeof options.quotaUnit !== 'string' || !/^[a-z][a-z0-9-]*$/.test(options.quotaUnit))
  ) {
    throw invalid(
      'ERR_INVALID_OPTION',
      'quotaUnit',
      options.quotaUnit,
      "a lower-case unit name such as 'content-bytes'",
    );
  }
  const writeHeaders = headerWriter({ format, quotaUnit: options.quotaUnit });
  const trust = compileTrustProxy(options.trustProxy);
  const ipv6Prefix = prefixLength(options.ipv6PrefixLength, 'ipv6PrefixLength', 128, 64);
  const ipv4Prefix = prefixLength(options.ipv4PrefixLength, 'ipv4PrefixLength', 32, 32);
  const deniedStatus = statusCode(options.statusCode, 'statusCode', 429);
  const degradedStatus = statusCode(options.degradedStatusCode, 'degradedStatusCode', 503);
  const clock = options.clock ?? systemClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs()');
  }

  // Clients send many requests: their addresses' keys are remembered (a bounded map, emptied when full).
  const addressKeys = new Map<string, string>();
  const defaultKey = (request: Req): string => {
    const peer = access.peer(request);
    const forwarded = trust === undefined ? undefined : access.header(request, trust.header);
    const memo = forwarded === undefined ? peer : `${peer}\n${forwarded}`;
    if (memo !== undefined) {
      const known = addressKeys.get(memo);
      if (known !== undefined) return known;
    }
    const address = clientAddress(peer, forwarded, trust);
    if (address === undefined) {
      throw new FloodgateError(
        'ERR_INVALID_KEY',
        'the client address is unknown (no peer address, e.g. a Unix socket or a runtime that hides it): pass `key`, or `trustProxy` when a proxy forwards it',
        { option: 'key' },
      );
    }
    const key = addressKey(address, ipv4Prefix, ipv6Prefix);
    if (memo !== undefined && memo.length <= 256) {
      if (addressKeys.size >= ADDRESS_KEYS_CACHED) addressKeys.clear();
      addressKeys.set(memo, key);
    }
    return key;
  };
  const keyOf = options.key ?? defaultKey;

  // Per-call policies are normalized once per array object, so headers and the limiter's cache agree.
  const normalized = new WeakMap<object, readonly Policy[]>();
  const normalize = (input: Policy | readonly Policy[]): readonly Policy[] => {
    let list = normalized.get(input);
    if (list === undefined) {
      list = normalizePolicies(input, 'policies');
      normalized.set(input, list);
    }
    return list;
  };

  const respond = (decision: Decision, policies: readonly Policy[], cost: number): RateLimitOutcome => {
    const headers: string[] = [];
    const degraded = decision.reason === 'degraded';
    // A decision made without the store knows nothing of the client's quota: no numbers to advertise.
    if (!degraded) writeHeaders(decision, policies, clock.nowUs() / 1000, headers);
    if (decision.allowed) return { decision, allowed: true, status: 200, headers, body: undefined };
    if (Number.isFinite(decision.retryAfterMs)) headers.push('Retry-After', String(seconds(decision.retryAfterMs)));
    headers.push('Cache-Control', 'no-store', 'Content-Type', PROBLEM_CONTENT_TYPE);
    const status = degraded ? degradedStatus : deniedStatus;
    return {
      decision,
      allowed: false,
      status,
      headers,
      body: JSON.stringify(deniedProblem(decision, status, cost, policies)),
    };
  };

  // With a synchronous store and synchronous hooks a request is decided without a promise: the memory
  // store's decision costs less than the promises around it. Any hook that returns a promise, or an
  // asynchronous store, switches that request to the promise path.
  const syncStore = isSyncStore(limiter.store);
  type Result = MaybePromise<RateLimitOutcome | undefined>;

  const finish = (decision: Decision, policies: readonly Policy[] | undefined, cost: number): Result => {
    const outcome = respond(decision, policies ?? defaultPolicies, cost);
    if (decision.delayMs === undefined || decision.delayMs <= 0) return outcome;
    return clock.sleep(decision.delayMs).then(() => outcome);
  };

  const limited = (key: string, cost: number, policies: readonly Policy[] | undefined): Result => {
    const call = policies !== undefined ? { cost, policies } : cost === 1 ? undefined : { cost };
    if (syncStore) {
      let decision: Decision;
      try {
        decision = limiter.limitSync(key, call);
      } catch (error) {
        // The synchronous path has no fallback limiter: let the promise path apply the failure policy.
        const kind = classifyStoreError(error);
        if (!isFloodgateError(error) || (kind !== 'fault' && kind !== 'full')) throw error;
        return limiter.limit(key, call).then((d) => finish(d, policies, cost));
      }
      return finish(decision, policies, cost);
    }
    return limiter.limit(key, call).then((d) => finish(d, policies, cost));
  };

  const keyed = (request: Req, policies: readonly Policy[] | undefined): Result => {
    const key = keyOf(request);
    const cost = costOf === undefined ? fixedCost : costOf(request);
    if (isThenable(key) || isThenable(cost)) {
      return Promise.all([key, cost]).then(([k, c]) => limited(k, c, policies));
    }
    return limited(key, cost, policies);
  };

  const chosen = (request: Req): Result => {
    if (choosePolicies === undefined) return keyed(request, callPolicies);
    const list = choosePolicies(request);
    if (isThenable(list)) return list.then((l) => (l === undefined ? undefined : keyed(request, normalize(l))));
    return list === undefined ? undefined : keyed(request, normalize(list));
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
    value: (overrides: RateLimitOptions<Req>): HttpRateLimiter<Req> => {
      const merged: RateLimitOptions<Req> = { ...options, ...overrides };
      if (!LIMITER_OPTIONS.some((option) => overrides[option] !== undefined)) {
        for (const option of LIMITER_OPTIONS) delete merged[option];
        merged.limiter = limiter;
        merged.policies ??= limiter.policies;
      }
      return createHttpRateLimiter(merged, access);
    },
  });
  return middleware;
}
