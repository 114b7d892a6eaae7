import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Limiter } from '../limiter/limiter.js';
import {
  answeredElsewhere,
  createHttpRateLimiter,
  isThenable,
  optionalFunction,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  withLimiter,
} from './core.js';
import {
  incomingMessageAccess,
  sendDenial,
  sendInternalError,
  setDenialHeaders,
  setOutcomeHeaders,
  settleOnClose,
} from './node-access.js';

declare module 'node:http' {
  interface IncomingMessage {
    /** The limit floodgate decided on this request (the last middleware's); absent when skipped. */
    rateLimit?: RateLimitInfo;
  }
}

/** Options of the node:http {@link rateLimit}; hooks receive the `IncomingMessage`. */
export interface NodeRateLimitOptions extends RateLimitOptions<IncomingMessage> {
  /**
   * Answers a denied request in place of the default denial. The status, the rate-limit headers and
   * `Retry-After` are already set; the handler writes the body and ends the response. The guard resolves
   * `false` once it has returned (or its promise has resolved); its errors reject the guard.
   */
  handler?: (request: IncomingMessage, response: ServerResponse, outcome: RateLimitOutcome) => unknown;
}

/** Options of {@link NodeRateLimit.wrap}. */
export interface WrapOptions<Req extends IncomingMessage, Res extends ServerResponse> {
  /**
   * Called when deciding fails (a throwing `key` or `cost` hook, a limiter whose failure policy is
   * `'throw'`) or the handler throws. @default answers 500 (or ends the response if it was under way)
   * and emits the error as a process warning
   */
  onError?: (error: unknown, request: Req, response: Res) => void;
}

/** The node:http middleware: a guard to call first thing in a handler, and a handler wrapper. */
export interface NodeRateLimit {
  /**
   * Decides the request, sets the rate-limit headers, and resolves `true` when the handler may go on.
   * On `false` the denial (429 or 503, problem body) is already sent, or another part of the app answered
   * while the decision was pending (then nothing is added to that response). Rejects on programming errors.
   */
  (request: IncomingMessage, response: ServerResponse): Promise<boolean>;
  /** Wraps a request handler so it runs only for admitted requests; its errors go to `onError` too. */
  wrap<Req extends IncomingMessage, Res extends ServerResponse>(
    handler: (request: Req, response: Res) => unknown,
    options?: WrapOptions<Req, Res>,
  ): (request: Req, response: Res) => void;
  /** The limiter deciding. */
  readonly limiter: Limiter;
}

function reportError(error: unknown, _request: IncomingMessage, response: ServerResponse): void {
  sendInternalError(response);
  process.emitWarning(error instanceof Error ? error : new Error(String(error)), 'FloodgateWarning');
}

/**
 * Rate limiting for a plain node:http server. node:http has no trusted-proxy setting of its own: the
 * client is the socket's peer unless `trustProxy` names the proxies to believe. The decision is on
 * `req.rateLimit` once the guard resolves.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/node';
 *
 * const limit = rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) });
 * createServer(limit.wrap((req, res) => res.end('ok'))).listen(3000);
 * // or, inside a handler: if (!(await limit(req, res))) return;
 * ```
 */
export function rateLimit(options: NodeRateLimitOptions): NodeRateLimit {
  const decide = createHttpRateLimiter(options, incomingMessageAccess);
  const handler = options.handler;
  optionalFunction(handler, 'handler');
  const apply = (
    request: IncomingMessage,
    outcome: RateLimitOutcome | undefined,
    response: ServerResponse,
  ): boolean | Promise<boolean> => {
    if (outcome === undefined) return true;
    // Something else answered while the decision was pending: add nothing, and the handler must not run.
    if (answeredElsewhere(outcome, response.headersSent)) return false;
    request.rateLimit = outcome;
    if (!outcome.allowed) {
      if (handler === undefined) {
        sendDenial(response, outcome);
        return false;
      }
      setDenialHeaders(response, outcome);
      const done = handler(request, response, outcome);
      return isThenable(done) ? done.then(() => false) : false;
    }
    setOutcomeHeaders(response, outcome);
    if (outcome.settle !== undefined) settleOnClose(response, outcome.settle);
    return true;
  };
  // Synchronous when the decision is (memory store, synchronous hooks); may throw.
  const admit = (request: IncomingMessage, response: ServerResponse): boolean | Promise<boolean> => {
    const result = decide.decide(request);
    return isThenable(result)
      ? result.then((outcome) => apply(request, outcome, response))
      : apply(request, result, response);
  };
  const guard = function floodgateGuard(request: IncomingMessage, response: ServerResponse): Promise<boolean> {
    try {
      return Promise.resolve(admit(request, response));
    } catch (error) {
      return Promise.reject(error);
    }
  } as NodeRateLimit;
  guard.wrap = <Req extends IncomingMessage, Res extends ServerResponse>(
    handler: (request: Req, response: Res) => unknown,
    wrapOptions?: WrapOptions<Req, Res>,
  ) => {
    const onError = wrapOptions?.onError ?? reportError;
    const serve = (request: Req, response: Res): void => {
      const done = handler(request, response);
      if (isThenable(done)) done.then(undefined, (error: unknown) => onError(error, request, response));
    };
    // A request listener returns nothing: failures go to `onError`, never to an unhandled rejection.
    return function floodgateHandler(request: Req, response: Res): void {
      try {
        const admitted = admit(request, response);
        if (isThenable(admitted)) {
          admitted
            .then((ok) => {
              if (ok) serve(request, response);
            })
            .catch((error: unknown) => onError(error, request, response));
        } else if (admitted) {
          serve(request, response);
        }
      } catch (error) {
        onError(error, request, response);
      }
    };
  };
  withLimiter(guard, decide.limiter);
  return guard;
}

export type { TrustProxy } from './client-address.js';
export type { DenialMessage, RateLimitInfo, RateLimitOptions, RateLimitOutcome } from './core.js';
export type { HeaderFormat } from './headers.js';
