import type { FastifyPluginCallback, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { invalid } from '../errors.js';
import type { Limiter } from '../limiter/limiter.js';
import {
  createHttpRateLimiter,
  type HttpRateLimiter,
  isThenable,
  type RateLimitOptions,
  type RateLimitOutcome,
  withLimiter,
} from './core.js';

/** The request lifecycle hook the limit runs in. Use `'preHandler'` when `cost` reads the parsed body. */
export type FastifyRateLimitHook = 'onRequest' | 'preValidation' | 'preHandler';

/** A route's `config.rateLimit`: options replacing the plugin's for this route, or `false` to turn it off. */
export interface FastifyRouteRateLimit extends RateLimitOptions<FastifyRequest> {
  /** @default the plugin's hook */
  hook?: FastifyRateLimitHook;
}

/** Options of the Fastify {@link rateLimit} plugin. */
export interface FastifyRateLimitOptions extends RateLimitOptions<FastifyRequest> {
  /** @default 'onRequest' */
  hook?: FastifyRateLimitHook;
  /** Limit every route; when false only routes with a `config.rateLimit` object are limited. @default true */
  global?: boolean;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** floodgate's per-route options, or `false` to exempt the route. */
    rateLimit?: FastifyRouteRateLimit | false;
  }
}

/** The plugin function, with the limiter deciding. */
export type FastifyRateLimit = FastifyPluginCallback & { readonly limiter: Limiter };

const HOOKS: readonly FastifyRateLimitHook[] = ['onRequest', 'preValidation', 'preHandler'];

function validateHook(hook: unknown, option: string): FastifyRateLimitHook | undefined {
  if (hook !== undefined && !(HOOKS as readonly unknown[]).includes(hook)) {
    throw invalid('ERR_INVALID_OPTION', option, hook, HOOKS.map((h) => `'${h}'`).join(', '));
  }
  return hook as FastifyRateLimitHook | undefined;
}

const access = {
  peer: (request: FastifyRequest) => request.raw.socket?.remoteAddress,
  header: (request: FastifyRequest, name: string) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  },
};

function apply(outcome: RateLimitOutcome | undefined, reply: FastifyReply, done: (error?: Error) => void): void {
  if (outcome === undefined) {
    done();
    return;
  }
  // Answered elsewhere while the decision was pending (a timeout, another plugin): add nothing, and leave
  // the request where that answer ended it.
  if (reply.sent) return;
  try {
    const headers = outcome.headers;
    for (let i = 0; i < headers.length; i += 2) reply.header(headers[i] as string, headers[i + 1]);
    // Answering from a callback hook ends the request there; `done` is not called. A Buffer keeps the
    // content type as set (a string would gain `; charset=utf-8`).
    if (!outcome.allowed) {
      reply.code(outcome.status).send(Buffer.from(outcome.body ?? ''));
      return;
    }
  } catch (error) {
    done(error as Error);
    return;
  }
  done();
}

/** A callback-style hook: with the memory store a request is decided without a promise. */
function hookFor(decide: HttpRateLimiter<FastifyRequest>) {
  return function floodgateRateLimit(
    request: FastifyRequest,
    reply: FastifyReply,
    done: (error?: Error) => void,
  ): void {
    let result: ReturnType<typeof decide.decide>;
    try {
      result = decide.decide(request);
    } catch (error) {
      done(error as Error);
      return;
    }
    if (isThenable(result)) result.then((outcome) => apply(outcome, reply, done), done);
    else apply(result, reply, done);
  };
}

/**
 * Rate limiting for Fastify 5, as a plugin that limits every route registered after it (await the
 * registration). A route's `config.rateLimit` replaces options for that route (its own `policies`,
 * `cost`, `key`, `hook`…) or, set to `false`, exempts it.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/fastify';
 *
 * const app = Fastify();
 * await app.register(rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * app.get('/health', { config: { rateLimit: false } }, () => 'ok');
 * app.post('/login', { config: { rateLimit: { policies: gcra({ limit: 5, periodMs: 60_000 }) } } }, login);
 * ```
 */
export function rateLimit(options: FastifyRateLimitOptions): FastifyRateLimit {
  const { hook: hookOption, global: globalOption, ...limitOptions } = options ?? ({} as FastifyRateLimitOptions);
  const defaultHook = validateHook(hookOption, 'hook') ?? 'onRequest';
  if (globalOption !== undefined && typeof globalOption !== 'boolean') {
    throw invalid('ERR_INVALID_OPTION', 'global', globalOption, 'a boolean');
  }
  const base = createHttpRateLimiter<FastifyRequest>(limitOptions, access);
  const plugin = function floodgate(fastify, _options, done) {
    fastify.addHook('onRoute', (route: RouteOptions) => {
      const config = route.config?.rateLimit;
      if (config === false || (config === undefined && globalOption === false)) return;
      let decide = base;
      let hookName = defaultHook;
      if (config !== undefined) {
        const { hook, ...overrides } = config;
        hookName = validateHook(hook, `${route.method} ${route.url} config.rateLimit.hook`) ?? defaultHook;
        decide = base.derive(overrides);
      }
      const handler = hookFor(decide);
      const existing = route[hookName];
      // Limit first, so a denied request costs no other hook's work.
      route[hookName] = (existing === undefined ? [handler] : [handler, ...[existing].flat()]) as never;
    });
    done();
  } as FastifyRateLimit;
  Object.assign(plugin, { [Symbol.for('skip-override')]: true, [Symbol.for('fastify.display-name')]: 'floodgate' });
  withLimiter(plugin, base.limiter);
  return plugin;
}

export type { TrustProxy } from './client-address.js';
export type { RateLimitOptions } from './core.js';
export type { HeaderFormat } from './headers.js';
