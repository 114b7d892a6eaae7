import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context } from 'koa';
import type { Limiter } from '../limiter/limiter.js';
import {
  answeredElsewhere,
  createHttpRateLimiter,
  optionalFunction,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  type RequestAccess,
  requireOptions,
  withLimiter,
} from './core.js';
import { incomingMessageAccess, settleOnClose } from './node-access.js';

/** The part of a Koa context the middleware uses (Koa 2 and 3). */
export interface KoaContextLike {
  req: IncomingMessage;
  status: number;
  body: unknown;
  set(field: string, value: string): void;
  /** Koa's `ctx.headerSent`: whether the response already went out. */
  readonly headerSent?: boolean;
  /** Koa's `ctx.ip`: the client address under the app's `proxy` setting. */
  readonly ip?: string;
  /** The application, for its `proxy` setting. */
  readonly app?: { readonly proxy?: boolean };
  /** Where the decision goes: `ctx.state.rateLimit`. */
  readonly state?: object;
  /** The Node.js response, watched when a request's cost may be given back. */
  readonly res?: ServerResponse;
}

/** What the middleware puts on `ctx.state`; `new Koa<RateLimitState>()` types it. */
export interface RateLimitState {
  /** The limit decided on this request; absent when skipped. */
  rateLimit?: RateLimitInfo;
}

/**
 * Options of the Koa {@link rateLimit}. Every hook sees Koa's own `Context` (from `@types/koa`), so
 * `key: (ctx) => ctx.ip` and `handler: (ctx) => { ctx.body = … }` need no annotation; give your context
 * type as `Ctx` when your app extends it (`ParameterizedContext<MyState>`).
 */
export interface KoaRateLimitOptions<Ctx extends KoaContextLike = Context> extends RateLimitOptions<Ctx> {
  /**
   * Answers a denied request: `ctx.status` (429, or 503 when degraded), the rate-limit headers and
   * `Retry-After` are set; set `ctx.body`, or throw (`ctx.throw(429)`) for Koa's error handling. When it
   * leaves no body, the default denial goes out.
   */
  handler?: (ctx: Ctx, outcome: RateLimitOutcome) => unknown;
}

/** A Koa middleware, with the limiter deciding. */
export interface KoaRateLimit<Ctx extends KoaContextLike = Context> {
  (ctx: Ctx, next: () => Promise<unknown>): Promise<void>;
  readonly limiter: Limiter;
}

function setHeaders(ctx: KoaContextLike, outcome: RateLimitOutcome, contentType: boolean): void {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i += 2) {
    if (contentType || headers[i] !== 'Content-Type') ctx.set(headers[i] as string, headers[i + 1] as string);
  }
}

function sendDenial(ctx: KoaContextLike, outcome: RateLimitOutcome): void {
  setHeaders(ctx, outcome, true);
  ctx.status = outcome.status;
  ctx.body = outcome.body;
}

/**
 * Rate limiting for Koa 2 and 3. The client's key follows the app's `proxy` setting (`ctx.ip`; set
 * `app.maxIpsCount` to the number of your proxies, or Koa takes the leftmost forwarded address), and the
 * decision is on `ctx.state.rateLimit`. Errors (a throwing `key` hook, a limiter that throws) propagate
 * to Koa's error handling.
 *
 * @example
 * ```ts
 * import Koa from 'koa';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/koa';
 *
 * const app = new Koa({ proxy: true, maxIpsCount: 1 });
 * app.use(rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * ```
 */
export function rateLimit<Ctx extends KoaContextLike = Context>(options: KoaRateLimitOptions<Ctx>): KoaRateLimit<Ctx> {
  const { handler, ...limitOptions } = requireOptions(options);
  optionalFunction(handler, 'handler');
  const access: RequestAccess<Ctx> = {
    peer: (ctx) => incomingMessageAccess.peer(ctx.req),
    header: (ctx, name) => incomingMessageAccess.header(ctx.req, name),
    address: (ctx) => ctx.ip,
    trustsProxy: (ctx) => ctx.app?.proxy === true,
  };
  const decide = createHttpRateLimiter<Ctx>(limitOptions, access);
  const middleware = async function floodgateRateLimit(ctx: Ctx, next: () => Promise<unknown>): Promise<void> {
    const outcome = await decide(ctx);
    if (outcome === undefined) {
      await next();
      return;
    }
    // Answered elsewhere while the decision was pending: add nothing to that response and do not go on.
    if (answeredElsewhere(outcome, ctx.headerSent === true)) return;
    if (typeof ctx.state === 'object' && ctx.state !== null) (ctx.state as RateLimitState).rateLimit = outcome;
    if (!outcome.allowed) {
      if (handler === undefined) {
        sendDenial(ctx, outcome);
        return;
      }
      setHeaders(ctx, outcome, false);
      ctx.status = outcome.status;
      await handler(ctx, outcome);
      if (ctx.body === undefined || ctx.body === null) sendDenial(ctx, outcome);
      return;
    }
    setHeaders(ctx, outcome, true);
    const settle = outcome.settle;
    if (settle === undefined) {
      await next();
    } else if (ctx.res !== undefined) {
      // The status an error handler sets later is the one the client gets: wait for the response.
      settleOnClose(ctx.res, settle);
      await next();
    } else {
      try {
        await next();
      } catch (error) {
        void settle(undefined);
        throw error;
      }
      void settle(ctx.status);
    }
  } as KoaRateLimit<Ctx>;
  withLimiter(middleware, decide.limiter);
  return middleware;
}

export type { TrustProxy } from './client-address.js';
export type { DenialMessage, RateLimitInfo, RateLimitOptions, RateLimitOutcome } from './core.js';
export type { HeaderFormat } from './headers.js';
