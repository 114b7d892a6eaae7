import { type Clock, systemClock } from '../clock.js';
import { FloodgateError, invalid, isFloodgateError } from '../errors.js';
import type { BreakerOptions } from '../limiter/breaker.js';
import { giveBack, takeLease } from '../limiter/leasing.js';
import { createLimiter, type FailurePolicy, Limiter, normalizePolicies } from '../limiter/limiter.js';
import { validateCost } from '../model/cost.js';
import type { Decision, Policy } from '../model/index.js';
import { isSyncStore, type Store } from '../stores/store.js';
import { classifyStoreError } from '../stores/store-errors.js';
import { addressKey, type IpAddress, parseIp } from './address.js';
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
   * The client's key (a user id, an API key). Default: the client address (see `trustProxy`), grouped per
   * `ipv6PrefixLength`; requests without one share the key `'unknown'`. Keys are data: any string works
   * and cannot reach into another key.
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
  /**
   * Which proxies to believe, overriding the framework's own setting. By default the client address is
   * the framework's (Express `req.ip` under `trust proxy`, Fastify `request.ip` under `trustProxy`, Koa
   * `ctx.ip` under `app.proxy`, Hono's `getConnInfo`), which is the socket's peer unless that setting
   * trusts a proxy; node:http has no such setting and uses the peer. An object reads `X-Forwarded-For`
   * or `Forwarded` by floodgate's own rules instead ({@link TrustProxy}); `false` uses the socket's peer
   * whatever the framework says, and silences the warning about proxy headers.
   * @default the framework's setting
   */
  trustProxy?: TrustProxy | false;
  /** IPv6 clients sharing this prefix share a key. @default 64 */
  ipv6PrefixLength?: number;
  /** IPv4 clients sharing this prefix share a key. @default 32 */
  ipv4PrefixLength?: number;
  /** Status of a request denied by a policy. @default 429 */
  statusCode?: number;
  /** Status of a request refused because the store is down and `failure` is `'closed'`. @default 503 */
  degradedStatusCode?: number;
  /**
   * The body of a denial instead of the `application/problem+json` document: a string (sent as
   * `text/plain`), a value sent as JSON, or a function of the request and the decision returning either.
   * Status and headers stay as they are.
   */
  message?: DenialMessage<Req>;
  /**
   * Give a request's cost back once its response has failed (see `requestWasSuccessful`), so failures
   * do not count. @default false
   */
  skipFailedRequests?: boolean;
  /**
   * Give a request's cost back once its response has succeeded, so only failures count (a login that
   * counts only wrong passwords). @default false
   */
  skipSuccessfulRequests?: boolean;
  /**
   * Whether a finished response counts as a success, for `skipFailedRequests` and
   * `skipSuccessfulRequests`. A response that never finished (the client went away) is neither: it stays
   * counted, so hanging up early never makes a request free.
   * @default (request, statusCode) => statusCode < 400
   */
  requestWasSuccessful?: (request: Req, statusCode: number) => MaybePromise<boolean>;
}

/** A denial's body: a string is sent as `text/plain`, anything else as JSON. */
export type DenialBody = string | object;

/** See {@link RateLimitOptions.message}. */
export type DenialMessage<Req> = DenialBody | ((request: Req, info: RateLimitInfo) => MaybePromise<DenialBody>);

/** How an adapter reads the parts of a request the default key needs. */
export interface RequestAccess<Req> {
  /** The socket's peer address (`req.socket.remoteAddress`). */
  peer(request: Req): string | undefined;
  /** A request header by lower-case name, repeated fields joined with `, `. */
  header(request: Req, name: string): string | undefined;
  /**
   * The client address as the framework decides it under its own trusted-proxy setting (Express
   * `req.ip`); without it, or when it answers nothing, the peer. Not an address: the peer stands in.
   */
  address?(request: Req): string | undefined;
  /** Whether the framework's setting trusts any proxy (then proxy headers draw no warning). */
  trustsProxy?(request: Req): boolean;
}

/** What a handler learns of the limit on its request (`req.rateLimit` and the like). */
export interface RateLimitInfo {
  /** The key the request was counted under. */
  readonly key: string;
  /** What the request cost. */
  readonly cost: number;
  readonly decision: Decision;
}

/** What to do with one request: the decision, and the response parts that follow from it. */
export interface RateLimitOutcome extends RateLimitInfo {
  /** False when the response must be `status` with `body` and the handler must not run. */
  readonly allowed: boolean;
  /** 429, 503 (degraded, failure `'closed'`), or 200 when allowed. */
  readonly status: number;
  /** Response headers as name, value, name, value…; set them on allowed and denied responses alike. */
  readonly headers: string[];
  /** The body of a denied request: the problem document, or the `message` option's. */
  readonly body: string | undefined;
  /**
   * Present when the request's cost may be given back (`skipFailedRequests`, `skipSuccessfulRequests`):
   * call it once the response is over, with its status code, or `undefined` when it never finished (then
   * the cost stays counted). Later calls do nothing; the promise never rejects.
   */
  readonly settle: ((statusCode: number | undefined) => Promise<void>) | undefined;
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

/** The key of requests whose client address is unknown: they share it (limiting more, never less). */
const UNKNOWN_ADDRESS_KEY = 'unknown';

/** Headers a proxy writes; arriving while no proxy is trusted, they suggest a misconfiguration. */
const PROXY_HEADERS = ['x-forwarded-for', 'forwarded', 'x-real-ip'] as const;

/** Content types of a `message` option's body. */
const TEXT_CONTENT_TYPE = 'text/plain; charset=utf-8';
const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** Codes of the warnings a middleware emits, each once per middleware (and the ones derived from it). */
export type FloodgateWarningCode =
  | 'FLOODGATE_UNTRUSTED_PROXY'
  | 'FLOODGATE_UNKNOWN_ADDRESS'
  | 'FLOODGATE_SETTLE_FAILED';

/**
 * Emits a `FloodgateWarning` as a process warning (`process.on('warning', …)` sees it, with its
 * `code`); where there is no `process` (a browser, some edge runtimes), on `console.warn`.
 */
export function emitFloodgateWarning(code: FloodgateWarningCode, message: string): void {
  const proc = (globalThis as { process?: { emitWarning?: (message: string, options: object) => void } }).process;
  if (typeof proc?.emitWarning === 'function') proc.emitWarning(message, { type: 'FloodgateWarning', code });
  else console.warn(`FloodgateWarning [${code}]: ${message}`);
}

/** What a middleware and the ones derived from it share: which warnings went out. */
interface Shared {
  warned: Set<FloodgateWarningCode>;
  /** The framework trusts a proxy, or a proxy header already drew the warning: stop looking. */
  proxyChecked: boolean;
}

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

function optionalBoolean(value: unknown, option: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw invalid('ERR_INVALID_OPTION', option, value, 'a boolean');
  return value;
}

/** Validates an optional function option (adapters' `handler`, hooks). */
export function optionalFunction(value: unknown, option: string): void {
  if (value !== undefined && typeof value !== 'function')
    throw invalid('ERR_INVALID_OPTION', option, value, 'a function');
}

/** Builds the limiter a middleware decides with: the caller's, or one from the limiter options. */
export function buildLimiter<Req>(options: RateLimitOptions<Req>, policies: readonly Policy[] | undefined): Limiter {
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

/** Why a policy's calls cannot be given back after the response, or undefined when they can. */
function refundRefusal(policy: Policy): string | undefined {
  if (policy.algorithm === 'leaky-bucket' && policy.mode === 'queue') {
    return 'a leaky bucket in queue mode has booked the calls behind it by then';
  }
  return undefined;
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

function build<Req>(options: RateLimitOptions<Req>, access: RequestAccess<Req>, shared: Shared): HttpRateLimiter<Req> {
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
  optionalFunction(options.requestWasSuccessful, 'requestWasSuccessful');
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
  // No object: the framework's own setting decides, unless `false` pins the socket's peer.
  const followFramework = options.trustProxy === undefined;
  const frameworkAddress = followFramework ? access.address : undefined;
  const ipv6Prefix = prefixLength(options.ipv6PrefixLength, 'ipv6PrefixLength', 128, 64);
  const ipv4Prefix = prefixLength(options.ipv4PrefixLength, 'ipv4PrefixLength', 32, 32);
  const deniedStatus = statusCode(options.statusCode, 'statusCode', 429);
  const degradedStatus = statusCode(options.degradedStatusCode, 'degradedStatusCode', 503);
  const clock = options.clock ?? systemClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs()');
  }
  const message = options.message;
  if (message === null || (message !== undefined && !['string', 'object', 'function'].includes(typeof message))) {
    throw invalid('ERR_INVALID_OPTION', 'message', message, 'a string, a JSON value or a function');
  }
  const fixedMessage = message === undefined || typeof message === 'function' ? undefined : denialBody(message);
  const messageOf = typeof message === 'function' ? message : undefined;
  const skipFailed = optionalBoolean(options.skipFailedRequests, 'skipFailedRequests');
  const skipSuccessful = optionalBoolean(options.skipSuccessfulRequests, 'skipSuccessfulRequests');
  const refunds = skipFailed || skipSuccessful;
  const refundOption = skipSuccessful ? 'skipSuccessfulRequests' : 'skipFailedRequests';
  const wasSuccessful = options.requestWasSuccessful;
  const checkRefundable = (policies: readonly Policy[]): void => {
    for (const policy of policies) {
      const reason = refundRefusal(policy);
      if (reason !== undefined) {
        throw new FloodgateError(
          'ERR_INVALID_OPTION',
          `${refundOption} cannot give back a request under policy ${JSON.stringify(policy.name)}: ${reason}`,
          { option: refundOption },
        );
      }
    }
  };
  if (refunds && choosePolicies === undefined) checkRefundable(defaultPolicies);

  const warnOnce = (code: FloodgateWarningCode, text: string): void => {
    if (shared.warned.has(code)) return;
    shared.warned.add(code);
    emitFloodgateWarning(code, text);
  };
  // Headers a proxy writes, arriving while nothing is trusted: every client behind that proxy would
  // share its address. Looked for until the framework is seen to trust a proxy, or the warning went out.
  const noteProxyHeaders = (request: Req): void => {
    for (const name of PROXY_HEADERS) {
      if (access.header(request, name) === undefined) continue;
      shared.proxyChecked = true;
      if (access.trustsProxy?.(request) === true) return;
      warnOnce(
        'FLOODGATE_UNTRUSTED_PROXY',
        `a request came with ${name} but no proxy is trusted, so clients are keyed by the socket's peer: behind a proxy they all share its address. Set your framework's trusted-proxy setting (Express app.set('trust proxy', n), Fastify trustProxy, Koa app.proxy) or floodgate's trustProxy; trustProxy: false keeps the peer and silences this warning.`,
      );
      return;
    }
  };

  // Clients send many requests: their addresses' keys are remembered (a bounded map, emptied when full).
  const addressKeys = new Map<string, string>();
  const remember = (memo: string, key: string): void => {
    if (memo.length > 256) return;
    if (addressKeys.size >= ADDRESS_KEYS_CACHED) addressKeys.clear();
    addressKeys.set(memo, key);
  };
  const unknownAddress = (): string => {
    warnOnce(
      'FLOODGATE_UNKNOWN_ADDRESS',
      `the client address of a request is unknown (a Unix socket, a runtime that does not pass it, Hono's app.request()): such requests share the key ${JSON.stringify(UNKNOWN_ADDRESS_KEY)}. Pass \`key\`, \`trustProxy\` when a proxy forwards the address, or on Hono \`getConnInfo\` from your runtime's adapter.`,
    );
    return UNKNOWN_ADDRESS_KEY;
  };
  const defaultKey = (request: Req): string => {
    if (trust !== undefined) {
      const peer = access.peer(request);
      const forwarded = access.header(request, trust.header);
      const memo = forwarded === undefined ? peer : `${peer}\n${forwarded}`;
      if (memo !== undefined) {
        const known = addressKeys.get(memo);
        if (known !== undefined) return known;
      }
      const address = clientAddress(peer, forwarded, trust);
      if (address === undefined) return unknownAddress();
      const key = addressKey(address, ipv4Prefix, ipv6Prefix);
      if (memo !== undefined) remember(memo, key);
      return key;
    }
    if (followFramework && !shared.proxyChecked) noteProxyHeaders(request);
    const text = frameworkAddress?.(request) || access.peer(request);
    if (text === undefined || text === '') return unknownAddress();
    const known = addressKeys.get(text);
    if (known !== undefined) return known;
    let address: IpAddress | undefined = parseIp(text);
    if (address === undefined) {
      // What the framework names is not an address (a client's garbage under a trust-everything
      // setting): the peer, the proxy that passed it on, stands in, which limits more, never less.
      const peer = access.peer(request);
      address = peer === undefined || peer === text ? undefined : parseIp(peer);
      if (address === undefined) return unknownAddress();
      return addressKey(address, ipv4Prefix, ipv6Prefix);
    }
    const key = addressKey(address, ipv4Prefix, ipv6Prefix);
    remember(text, key);
    return key;
  };
  const keyOf = options.key ?? defaultKey;

  // Per-call policies are normalized once per array object, so headers and the limiter's cache agree.
  const normalized = new WeakMap<object, readonly Policy[]>();
  const normalize = (input: Policy | readonly Policy[]): readonly Policy[] => {
    let list = normalized.get(input);
    if (list === undefined) {
      list = normalizePolicies(input, 'policies');
      if (refunds) checkRefundable(list);
      normalized.set(input, list);
    }
    return list;
  };

  /** Decides once, after the response, whether the request's cost comes back. */
  const settler = (
    request: Req,
    key: string,
    cost: number,
    policies: readonly Policy[] | undefined,
    atUs: number,
  ): ((statusCode: number | undefined) => Promise<void>) => {
    let settled = false;
    const refund = (succeeded: boolean): Promise<void> | undefined => {
      if (!(succeeded ? skipSuccessful : skipFailed)) return undefined;
      const call = policies === undefined ? undefined : { policies };
      return giveBack(limiter, key, cost, atUs, cost, call).then(() => undefined);
    };
    return (statusCode) => {
      if (settled) return Promise.resolve();
      settled = true;
      try {
        // Cut short: the work was done whoever hung up, and a refund would reward hanging up.
        if (statusCode === undefined) return Promise.resolve();
        const verdict = wasSuccessful === undefined ? statusCode < 400 : wasSuccessful(request, statusCode);
        if (!isThenable(verdict)) return refund(verdict === true) ?? Promise.resolve();
        return verdict.then(
          (ok) => refund(ok === true),
          (error: unknown) => settleFailed(error),
        );
      } catch (error) {
        settleFailed(error);
        return Promise.resolve();
      }
    };
  };
  // A throwing `requestWasSuccessful` leaves the request counted: the conservative side.
  const settleFailed = (error: unknown): void => {
    warnOnce(
      'FLOODGATE_SETTLE_FAILED',
      `requestWasSuccessful threw, so the request stays counted: ${error instanceof Error ? error.message : String(error)}`,
    );
  };

  const denied = (
    decision: Decision,
    key: string,
    cost: number,
    headers: string[],
    status: number,
    body: string,
    contentType: string,
  ): RateLimitOutcome => {
    headers.push('Content-Type', contentType);
    return { key, cost, decision, allowed: false, status, headers, body, settle: undefined };
  };

  const respond = (
    request: Req,
    key: string,
    cost: number,
    decision: Decision,
    policies: readonly Policy[],
    settle: RateLimitOutcome['settle'],
  ): MaybePromise<RateLimitOutcome> => {
    const headers: string[] = [];
    const degraded = decision.reason === 'degraded';
    // A decision made without the store knows nothing of the client's quota: no numbers to advertise.
    if (!degraded) writeHeaders(decision, policies, clock.nowUs() / 1000, headers);
    if (decision.allowed) return { key, cost, decision, allowed: true, status: 200, headers, body: undefined, settle };
    if (Number.isFinite(decision.retryAfterMs)) headers.push('Retry-After', String(seconds(decision.retryAfterMs)));
    headers.push('Cache-Control', 'no-store');
    const status = degraded ? degradedStatus : deniedStatus;
    if (fixedMessage !== undefined) {
      return denied(decision, key, cost, headers, status, fixedMessage.body, fixedMessage.contentType);
    }
    if (messageOf !== undefined) {
      const custom = messageOf(request, { key, cost, decision });
      const answer = (value: DenialBody): RateLimitOutcome => {
        const { body, contentType } = denialBody(value);
        return denied(decision, key, cost, headers, status, body, contentType);
      };
      return isThenable(custom) ? custom.then(answer) : answer(custom);
    }
    const problem = JSON.stringify(deniedProblem(decision, status, cost, policies));
    return denied(decision, key, cost, headers, status, problem, PROBLEM_CONTENT_TYPE);
  };

  // With a synchronous store and synchronous hooks a request is decided without a promise: the memory
  // store's decision costs less than the promises around it. Any hook that returns a promise, or an
  // asynchronous store, switches that request to the promise path.
  const syncStore = isSyncStore(limiter.store);
  type Result = MaybePromise<RateLimitOutcome | undefined>;

  const finish = (
    request: Req,
    key: string,
    cost: number,
    decision: Decision,
    policies: readonly Policy[] | undefined,
    settle: RateLimitOutcome['settle'],
  ): Result => {
    const outcome = respond(request, key, cost, decision, policies ?? defaultPolicies, settle);
    if (decision.delayMs === undefined || decision.delayMs <= 0) return outcome;
    return clock.sleep(decision.delayMs).then(() => outcome);
  };

  const limited = (request: Req, key: string, cost: number, policies: readonly Policy[] | undefined): Result => {
    if (refunds && cost > 0) {
      // A lease of the request's cost: the same decision, with the time the store took it, which is
      // what giving the cost back needs.
      const call = policies === undefined ? undefined : { policies };
      return takeLease(limiter, key, cost, cost, call).then(({ decision, atUs }) => {
        const consumed = decision.allowed && decision.reason !== 'degraded' && atUs !== undefined;
        const settle = consumed ? settler(request, key, cost, policies, atUs) : undefined;
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
    const cost = costOf === undefined ? fixedCost : costOf(request);
    if (isThenable(key) || isThenable(cost)) {
      return Promise.all([key, cost]).then(([k, c]) => limited(request, k, c, policies));
    }
    return limited(request, key, cost, policies);
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
    value: (overrides: RateLimitOptions<Req>): HttpRateLimiter<Req> =>
      build(derivedOptions(options, overrides, limiter), access, shared),
  });
  return middleware;
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

/** The body and content type of a `message` option's value. */
function denialBody(value: unknown): { body: string; contentType: string } {
  if (typeof value === 'string') return { body: value, contentType: TEXT_CONTENT_TYPE };
  let body: string | undefined;
  try {
    body = JSON.stringify(value);
  } catch (error) {
    throw new FloodgateError('ERR_INVALID_OPTION', 'message cannot be sent as JSON', {
      option: 'message',
      cause: error,
    });
  }
  if (body === undefined) throw invalid('ERR_INVALID_OPTION', 'message', value, 'a string or a JSON value');
  return { body, contentType: JSON_CONTENT_TYPE };
}
