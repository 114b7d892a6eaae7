import type { Clock } from '../clock.js';
import { invalid } from '../errors.js';
import type { BreakerOptions } from '../limiter/breaker.js';
import type { FailurePolicy, Limiter } from '../limiter/limiter.js';
import type { Decision, Policy } from '../model/index.js';
import type { ConcurrencyPolicy } from '../permits/policy.js';
import type { PermitStore } from '../permits/store.js';
import type { Store } from '../stores/store.js';
import type { TrustProxy } from './client-address.js';
import type { HeaderFormat } from './headers.js';

/** A value, or a promise of it: every hook may be synchronous or asynchronous. */
export type MaybePromise<T> = T | Promise<T>;

/** Policies, or a function choosing them per request (per plan, per route); `undefined` skips limiting. */
export type PoliciesOption<Req> =
  | Policy
  | ConcurrencyPolicy
  | readonly (Policy | ConcurrencyPolicy)[]
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
  /**
   * Permit store of the limiter built here, for a concurrency policy among `policies`
   * (`memoryPermitStore()`, `redisPermitStore({ client })`): an admitted request holds a permit until its
   * response is over or its client went away.
   */
  permits?: PermitStore;
  /** Key prefix of the limiter built here. @default 'http' */
  prefix?: string;
  /**
   * Longest wait for the store (limiter built here), ms; `false` for none. @default 1000 for stores that
   * answer asynchronously (network stores), none for the memory and SQLite stores
   */
  timeoutMs?: number | false;
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
  /**
   * Status of a request refused by the concurrency policy (all its permits in flight): 503 suits a limit
   * that sheds load for the whole service rather than one client's quota. @default statusCode (429)
   */
  concurrencyStatusCode?: number;
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
  /**
   * What a request really cost, known once its response is over (the tokens a model's response reported,
   * bytes sent): `cost` is then an estimate, charged when the request is admitted, and the request is
   * settled at what this returns (`limiter.settle`: above the estimate the difference is charged, past
   * the limit if need be; below it the difference comes back). Record what it needs on the request in
   * the handler (`req.tokensUsed = usage.total_tokens`). A response that never finished stays charged its
   * estimate; so does one whose `settle` throws or returns no valid cost (a warning says so). Meter
   * policies only; not with `skipFailedRequests` or `skipSuccessfulRequests`.
   */
  settle?: (request: Req, statusCode: number) => MaybePromise<number>;
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
   * Present when the request's cost may be given back (`skipFailedRequests`, `skipSuccessfulRequests`)
   * or settled (`settle`), or when it holds a permit of a concurrency policy (released by this call):
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

/** True for a promise (or any thenable): hooks may answer either way. */
export const isThenable = <T>(value: MaybePromise<T>): value is Promise<T> =>
  typeof (value as { then?: unknown } | null)?.then === 'function';

export function prefixLength(value: unknown, option: string, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || (value as number) < 0 || (value as number) > max) {
    throw invalid('ERR_INVALID_OPTION', option, value, `an integer from 0 to ${max}`);
  }
  return value as number;
}

export function statusCode(value: unknown, option: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || (value as number) < 400 || (value as number) > 599) {
    throw invalid('ERR_INVALID_OPTION', option, value, 'an HTTP error status from 400 to 599');
  }
  return value as number;
}

export function optionalBoolean(value: unknown, option: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw invalid('ERR_INVALID_OPTION', option, value, 'a boolean');
  return value;
}

/** Validates an optional function option (adapters' `handler`, hooks). */
export function optionalFunction(value: unknown, option: string): void {
  if (value !== undefined && typeof value !== 'function')
    throw invalid('ERR_INVALID_OPTION', option, value, 'a function');
}
