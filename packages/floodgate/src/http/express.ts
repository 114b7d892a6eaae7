import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Limiter } from '../limiter/limiter.js';
import {
  createHttpRateLimiter,
  isThenable,
  type RateLimitOptions,
  type RateLimitOutcome,
  withLimiter,
} from './core.js';
import { incomingMessageAccess, sendDenial, setOutcomeHeaders } from './node-access.js';

/** An Express middleware (Express 4 and 5); `Req` is Express's `Request` or your extension of it. */
export interface ExpressRateLimit<Req extends IncomingMessage = IncomingMessage> {
  (request: Req, response: ServerResponse, next: (error?: unknown) => void): void;
  /** The limiter deciding. */
  readonly limiter: Limiter;
}

function apply(outcome: RateLimitOutcome | undefined, response: ServerResponse, next: (error?: unknown) => void): void {
  if (outcome === undefined) {
    next();
    return;
  }
  // Another middleware (a timeout, a guard, a stream) answered while the decision was pending, ended or
  // not: there is nothing to add to its response, which stays its own to end, and the request does not
  // go on (as with the node:http and Koa adapters), allowed or denied.
  if (response.headersSent) return;
  try {
    if (!outcome.allowed) {
      sendDenial(response, outcome);
      return;
    }
    setOutcomeHeaders(response, outcome);
  } catch (error) {
    next(error);
    return;
  }
  next();
}

/**
 * Rate limiting for Express 4 and 5. Admitted requests get the rate-limit headers and go on; denied ones
 * get 429 (or 503 when the store is down and the failure policy is `'closed'`) with a problem body.
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
 * app.use(rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * app.post('/login', rateLimit({ policies: gcra({ limit: 5, periodMs: 60_000, name: 'login' }) }), login);
 * ```
 */
export function rateLimit<Req extends IncomingMessage = IncomingMessage>(
  options: RateLimitOptions<Req>,
): ExpressRateLimit<Req> {
  const decide = createHttpRateLimiter<Req>(options, incomingMessageAccess);
  const middleware = function floodgateRateLimit(
    request: Req,
    response: ServerResponse,
    next: (error?: unknown) => void,
  ): void {
    let result: ReturnType<typeof decide.decide>;
    try {
      result = decide.decide(request);
    } catch (error) {
      next(error);
      return;
    }
    // `apply` catches its own errors and hands them to `next`, so the chain never rejects unhandled.
    if (isThenable(result)) result.then((outcome) => apply(outcome, response, next), next);
    else apply(result, response, next);
  } as ExpressRateLimit<Req>;
  withLimiter(middleware, decide.limiter);
  return middleware;
}

export type { TrustProxy } from './client-address.js';
export type { RateLimitOptions } from './core.js';
export type { HeaderFormat } from './headers.js';
