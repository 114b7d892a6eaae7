import type { Context, MiddlewareHandler } from 'hono';
import type { Limiter } from '../limiter/limiter.js';
import {
  createHttpRateLimiter,
  optionalFunction,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  type RequestAccess,
  requireOptions,
  withLimiter,
} from './core.js';

/** What the runtimes Hono runs on pass as `c.env`, as far as the peer address goes. */
interface RuntimeEnv {
  /** @hono/node-server (its bindings sit under `server` in some setups) */
  incoming?: { socket?: { remoteAddress?: string } };
  server?: { incoming?: { socket?: { remoteAddress?: string } } };
  /** Bun: the server, passed as `env` by `Bun.serve({ fetch: app.fetch })`. */
  requestIP?: (request: Request) => { address?: string } | null;
  /** Deno: the handler info of `Deno.serve(app.fetch)`. */
  remoteAddr?: { hostname?: string };
}

/** The `getConnInfo` of a Hono runtime adapter (`@hono/node-server/conninfo`, `hono/bun`, `hono/deno`, …). */
export type GetConnInfo = (c: Context) => { remote: { address?: string | undefined } };

/** Options of the Hono {@link rateLimit}. */
export interface HonoRateLimitOptions extends RateLimitOptions<Context> {
  /**
   * Your runtime adapter's `getConnInfo`, as Hono's own `ipRestriction` takes it: the client address is
   * what it says (on Cloudflare Workers, `hono/cloudflare-workers` reads the address Cloudflare sets).
   * Without it the peer is read from the Node.js (@hono/node-server), Bun or Deno bindings.
   */
  getConnInfo?: GetConnInfo;
  /**
   * Answers a denied request: return a Response (`c.json(…)`, `c.text(…)`), built after the status,
   * the rate-limit headers and `Retry-After` were set on `c`; returning nothing sends the default denial.
   */
  handler?: (c: Context, outcome: RateLimitOutcome) => Response | undefined | Promise<Response | undefined>;
}

/** The variables the middleware sets: `c.get('rateLimit')` in the handlers after it. */
export interface RateLimitVariables {
  /** The limit decided on this request; absent when skipped. */
  rateLimit?: RateLimitInfo;
}

/** A Hono middleware, with the limiter deciding. */
export type HonoRateLimit = MiddlewareHandler<{ Variables: RateLimitVariables }> & { readonly limiter: Limiter };

function peer(c: Context): string | undefined {
  const env = c.env as RuntimeEnv | undefined;
  if (env === undefined || env === null) return undefined;
  return (
    env.incoming?.socket?.remoteAddress ??
    env.server?.incoming?.socket?.remoteAddress ??
    (typeof env.requestIP === 'function' ? (env.requestIP(c.req.raw)?.address ?? undefined) : undefined) ??
    env.remoteAddr?.hostname
  );
}

/**
 * Rate limiting for Hono 4. The client address is what your runtime adapter's `getConnInfo` says, or
 * else the peer on Node.js (@hono/node-server), Bun and Deno. A request with no runtime bindings at all
 * (`app.request()` in tests) has no address: such requests share one key, with a warning, unless `key`
 * is given. The decision is on `c.get('rateLimit')`.
 *
 * @example
 * ```ts
 * import { getConnInfo } from '@hono/node-server/conninfo';
 * import { Hono } from 'hono';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/hono';
 *
 * const app = new Hono();
 * app.use('/api/*', rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }), getConnInfo }));
 * ```
 */
export function rateLimit(options: HonoRateLimitOptions): HonoRateLimit {
  const { getConnInfo, handler, ...limitOptions } = requireOptions(options);
  optionalFunction(getConnInfo, 'getConnInfo');
  optionalFunction(handler, 'handler');
  const access: RequestAccess<Context> = {
    peer,
    header: (c, name) => c.req.header(name),
    // Adapters' getConnInfo read the runtime bindings, which a request from app.request() does not have.
    // Where there is a socket (Node.js, Bun, Deno) getConnInfo reports its peer and proxy headers are not
    // believed; where there is none, the platform named the client (Cloudflare's address), and its
    // forwarding headers are no sign of a proxy left untrusted.
    ...(getConnInfo === undefined
      ? {}
      : {
          address: (c: Context) => (c.env === undefined ? undefined : getConnInfo(c).remote.address),
          trustsProxy: (c: Context) => c.env !== undefined && peer(c) === undefined,
        }),
  };
  const decide = createHttpRateLimiter<Context>(limitOptions, access);
  const middleware: MiddlewareHandler<{ Variables: RateLimitVariables }> = async function floodgateRateLimit(c, next) {
    const outcome = await decide(c);
    if (outcome === undefined) {
      await next();
      return undefined;
    }
    c.set('rateLimit', outcome);
    const headers = outcome.headers;
    if (!outcome.allowed) {
      if (handler !== undefined) {
        c.status(outcome.status as 429);
        for (let i = 0; i < headers.length; i += 2) {
          if (headers[i] !== 'Content-Type') c.header(headers[i] as string, headers[i + 1] as string);
        }
        const custom = await handler(c, outcome);
        if (custom !== undefined) return custom;
      }
      const record: Record<string, string> = {};
      for (let i = 0; i < headers.length; i += 2) record[headers[i] as string] = headers[i + 1] as string;
      return c.body(outcome.body ?? '', outcome.status as 429, record);
    }
    const settle = outcome.settle;
    // A client that goes away ends the request at once (and a permit it holds goes back), where the
    // runtime aborts the request's signal then (@hono/node-server, Bun, Deno): its handler may run on.
    const signal = settle === undefined ? undefined : (c.req.raw.signal as AbortSignal | undefined);
    if (signal !== undefined) {
      if (signal.aborted) void settle?.(undefined);
      else signal.addEventListener('abort', () => void settle?.(undefined), { once: true });
    }
    try {
      await next();
    } catch (error) {
      // Hono turns a handler's error into a response before this; should one still escape, a permit the
      // request holds goes back.
      void outcome.settle?.(undefined);
      throw error;
    }
    // After the handler, so the headers reach whatever response it built, `c.json()` or a raw Response.
    for (let i = 0; i < headers.length; i += 2) c.header(headers[i] as string, headers[i + 1] as string);
    if (outcome.settle !== undefined) {
      // Errors were turned into a response by then (Hono's onError), so its status is the final one.
      const settled = outcome.settle(c.res.status);
      try {
        // Edge runtimes stop work that outlives the response unless told to wait for it.
        c.executionCtx.waitUntil(settled);
      } catch {
        // No execution context (Node.js, Bun, Deno): the process keeps running.
      }
    }
    return undefined;
  };
  withLimiter(middleware, decide.limiter);
  return middleware as HonoRateLimit;
}

export type { TrustProxy } from './client-address.js';
export type { DenialMessage, RateLimitInfo, RateLimitOptions, RateLimitOutcome } from './core.js';
export type { HeaderFormat } from './headers.js';
