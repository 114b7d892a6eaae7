import type { Context, MiddlewareHandler } from 'hono';
import type { Limiter } from '../limiter/limiter.js';
import { createHttpRateLimiter, type RateLimitOptions, type RequestAccess, withLimiter } from './core.js';

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

const access: RequestAccess<Context> = {
  peer: (c) => {
    const env = c.env as RuntimeEnv | undefined;
    if (env === undefined || env === null) return undefined;
    return (
      env.incoming?.socket?.remoteAddress ??
      env.server?.incoming?.socket?.remoteAddress ??
      (typeof env.requestIP === 'function' ? (env.requestIP(c.req.raw)?.address ?? undefined) : undefined) ??
      env.remoteAddr?.hostname
    );
  },
  header: (c, name) => c.req.header(name),
};

/** A Hono middleware, with the limiter deciding. */
export type HonoRateLimit = MiddlewareHandler & { readonly limiter: Limiter };

/**
 * Rate limiting for Hono 4. The default key is the peer address on Node.js (@hono/node-server), Bun and
 * Deno; elsewhere (e.g. behind Cloudflare) pass `key`, or `trustProxy` for a proxy's forwarded header.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/hono';
 *
 * const app = new Hono();
 * app.use('/api/*', rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * ```
 */
export function rateLimit(options: RateLimitOptions<Context>): HonoRateLimit {
  const decide = createHttpRateLimiter<Context>(options, access);
  const middleware: MiddlewareHandler = async function floodgateRateLimit(c, next) {
    const outcome = await decide(c);
    if (outcome === undefined) {
      await next();
      return undefined;
    }
    const headers = outcome.headers;
    if (!outcome.allowed) {
      const record: Record<string, string> = {};
      for (let i = 0; i < headers.length; i += 2) record[headers[i] as string] = headers[i + 1] as string;
      return c.body(outcome.body ?? '', outcome.status as 429, record);
    }
    await next();
    // After the handler, so the headers reach whatever response it built, `c.json()` or a raw Response.
    for (let i = 0; i < headers.length; i += 2) c.header(headers[i] as string, headers[i + 1] as string);
    return undefined;
  };
  withLimiter(middleware, decide.limiter);
  return middleware as HonoRateLimit;
}

export type { TrustProxy } from './client-address.js';
export type { RateLimitOptions } from './core.js';
export type { HeaderFormat } from './headers.js';
