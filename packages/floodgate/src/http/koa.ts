import type { IncomingMessage } from 'node:http';
import type { Limiter } from '../limiter/limiter.js';
import { createHttpRateLimiter, type RateLimitOptions, type RequestAccess, withLimiter } from './core.js';
import { incomingMessageAccess } from './node-access.js';

/** The part of a Koa context the middleware uses (Koa 2 and 3). */
export interface KoaContextLike {
  req: IncomingMessage;
  status: number;
  body: unknown;
  set(field: string, value: string): void;
  /** Koa's `ctx.headerSent`: whether the response already went out. */
  readonly headerSent?: boolean;
}

/** A Koa middleware, with the limiter deciding. */
export interface KoaRateLimit<Ctx extends KoaContextLike> {
  (ctx: Ctx, next: () => Promise<unknown>): Promise<void>;
  readonly limiter: Limiter;
}

/**
 * Rate limiting for Koa 2 (and 3). Errors (a throwing `key` hook, a limiter that throws) propagate to
 * Koa's error handling.
 *
 * @example
 * ```ts
 * import Koa from 'koa';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/koa';
 *
 * const app = new Koa();
 * app.use(rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * ```
 */
export function rateLimit<Ctx extends KoaContextLike = KoaContextLike>(
  options: RateLimitOptions<Ctx>,
): KoaRateLimit<Ctx> {
  const access: RequestAccess<Ctx> = {
    peer: (ctx) => incomingMessageAccess.peer(ctx.req),
    header: (ctx, name) => incomingMessageAccess.header(ctx.req, name),
  };
  const decide = createHttpRateLimiter<Ctx>(options, access);
  const middleware = async function floodgateRateLimit(ctx: Ctx, next: () => Promise<unknown>): Promise<void> {
    const outcome = await decide(ctx);
    if (outcome === undefined) {
      await next();
      return;
    }
    // Answered elsewhere while the decision was pending: add nothing to that response and do not go on.
    if (ctx.headerSent === true) return;
    const headers = outcome.headers;
    for (let i = 0; i < headers.length; i += 2) ctx.set(headers[i] as string, headers[i + 1] as string);
    if (!outcome.allowed) {
      ctx.status = outcome.status;
      ctx.body = outcome.body;
      return;
    }
    await next();
  } as KoaRateLimit<Ctx>;
  withLimiter(middleware, decide.limiter);
  return middleware;
}

export type { TrustProxy } from './client-address.js';
export type { RateLimitOptions } from './core.js';
export type { HeaderFormat } from './headers.js';
