import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import type { Limiter } from '../limiter/limiter.js';
import {
  answeredElsewhere,
  createHttpRateLimiter,
  isThenable,
  type MaybePromise,
  optionalFunction,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  requireOptions,
  withLimiter,
} from './core.js';
import { expressAccess, sendDenial, setDenialHeaders, setOutcomeHeaders, settleOnClose } from './node-access.js';

declare module 'node:http' {
  interface IncomingMessage {
    /** The limit floodgate decided on this request (the last middleware's); absent when skipped. */
    rateLimit?: RateLimitInfo;
  }
}

/**
 * Options of the Express {@link rateLimit}: the shared options and a denial `handler`. Every hook sees
 * Express's own `Request` and `Response` (from `@types/express`, as express-rate-limit types them), so
 * `key: (req) => req.ip ?? ''` and `handler: (req, res) => res.json(…)` need no annotation; give your own
 * extension of them as `Req` and `Res` when a middleware before this one adds fields (`req.user`).
 */
export interface ExpressRateLimitOptions<Req extends IncomingMessage = Request, Res extends ServerResponse = Response>
  extends Omit<RateLimitOptions<Req>, 'key'> {
  /**
   * The client's key (a user id, an API key). Express types `req.ip` as `string | undefined` (a socket
   * already gone has no address), so `key: (req) => req.ip` is accepted: `undefined` is counted under the
   * key `'unknown'`, as the default key counts a request without an address. Default: the client address
   * under the app's `trust proxy` setting, grouped per `ipv6PrefixLength`.
   */
  key?: (request: Req) => MaybePromise<string | undefined>;
  /**
   * Answers a denied request in place of the default denial (like express-rate-limit's `handler`). The
   * status (429, or 503 when degraded), the rate-limit headers and `Retry-After` are already set; the
   * handler writes the body, or passes an error to `next`. A returned promise that rejects goes to `next`.
   */
  handler?: (request: Req, response: Res, next: NextFunction, outcome: RateLimitOutcome) => unknown;
}

/** An Express middleware (Express 4 and 5); `Req` is Express's `Request` or your extension of it. */
export interface ExpressRateLimit<Req extends IncomingMessage = Request, Res extends ServerResponse = Response> {
  (request: Req, response: Res, next: NextFunction): void;
  /** The limiter deciding. */
  readonly limiter: Limiter;
}

/**
 * Rate limiting for Express 4 and 5. Admitted requests get the rate-limit headers and go on; denied ones
 * get 429 (or 503 when the store is down and the failure policy is `'closed'`) with a problem body, or
 * whatever `message` or `handler` says. The client's key follows the app's `trust proxy` setting
 * (`req.ip`), and the decision is on `req.rateLimit` for the handlers after it.
 * Errors (a throwing `key` hook, a limiter that throws, a response that refuses the headers) go to
 * Express's error handling through `next`. When another middleware answered while the decision was
 * pending (its headers went out, even if its response has not ended), the middleware adds nothing to that
 * response and does not go on; ending that response is left to whoever started it.
 *
 * @example
 * ```ts
 * import express from 'express';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/express';
 *
 * const app = express();
 * app.set('trust proxy', 1); // one load balancer in front
 * app.use(rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * ```
 */
export function rateLimit<Req extends IncomingMessage = Request, Res extends ServerResponse = Response>(
  options: ExpressRateLimitOptions<Req, Res>,
): ExpressRateLimit<Req, Res> {
  const { key, ...shared } = requireOptions(options);
  optionalFunction(key, 'key');
  const decide = createHttpRateLimiter<Req>(
    key === undefined ? shared : { ...shared, key: (request) => definedKey(key(request)) },
    expressAccess,
  );
  const handler = options.handler;
  optionalFunction(handler, 'handler');

  const apply = (request: Req, outcome: RateLimitOutcome | undefined, response: Res, next: NextFunction): void => {
    if (outcome === undefined) {
      next();
      return;
    }
    // Another middleware (a timeout, a guard, a stream) answered while the decision was pending, ended or
    // not: there is nothing to add to its response, which stays its own to end, and the request does not
    // go on (as with the node:http and Koa adapters), allowed or denied.
    if (answeredElsewhere(outcome, response.headersSent)) return;
    request.rateLimit = outcome;
    try {
      if (!outcome.allowed) {
        if (handler === undefined) {
          sendDenial(response, outcome);
        } else {
          setDenialHeaders(response, outcome);
          const done = handler(request, response, next, outcome);
          if (isThenable(done)) done.then(undefined, next);
        }
        return;
      }
      setOutcomeHeaders(response, outcome);
      if (outcome.settle !== undefined) settleOnClose(response, outcome.settle);
    } catch (error) {
      next(error);
      return;
    }
    next();
  };

  const middleware = function floodgateRateLimit(request: Req, response: Res, next: NextFunction): void {
    let result: ReturnType<typeof decide.decide>;
    try {
      result = decide.decide(request);
    } catch (error) {
      next(error);
      return;
    }
    // `apply` catches its own errors and hands them to `next`, so the chain never rejects unhandled.
    if (isThenable(result)) result.then((outcome) => apply(request, outcome, response, next), next);
    else apply(request, result, response, next);
  } as ExpressRateLimit<Req, Res>;
  withLimiter(middleware, decide.limiter);
  return middleware;
}

/** The key that `undefined` from a `key` hook stands for: the default key's for a request without an address. */
const NO_KEY = 'unknown';

function definedKey(key: MaybePromise<string | undefined>): MaybePromise<string> {
  if (isThenable(key)) return key.then((k) => k ?? NO_KEY);
  return key ?? NO_KEY;
}

export type { TrustProxy } from './client-address.js';
export type { DenialMessage, RateLimitInfo, RateLimitOptions, RateLimitOutcome } from './core.js';
export type { HeaderFormat } from './headers.js';
