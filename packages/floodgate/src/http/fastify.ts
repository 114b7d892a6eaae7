import type { FastifyPluginCallback, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { invalid } from '../errors.js';
import type { Limiter } from '../limiter/limiter.js';
import {
  answeredElsewhere,
  createHttpRateLimiter,
  type HttpRateLimiter,
  isThenable,
  optionalFunction,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  type RequestAccess,
  withLimiter,
} from './core.js';
import { settleOnClose } from './node-access.js';

/** The request lifecycle hook the limit runs in. Use `'preHandler'` when `cost` reads the parsed body. */
export type FastifyRateLimitHook = 'onRequest' | 'preValidation' | 'preHandler';

/**
 * Answers a denied request in place of the default denial. The status, the rate-limit headers and
 * `Retry-After` are already set on `reply`: send a body, or throw an error (with a `statusCode`) for
 * Fastify's error handler. When it returns without sending, the default denial goes out.
 */
export type FastifyDenialHandler = (request: FastifyRequest, reply: FastifyReply, outcome: RateLimitOutcome) => unknown;

/** A route's `config.rateLimit`: options replacing the plugin's for this route, or `false` to turn it off. */
export interface FastifyRouteRateLimit extends RateLimitOptions<FastifyRequest> {
  /** @default the plugin's hook */
  hook?: FastifyRateLimitHook;
  /** @default the plugin's handler */
  handler?: FastifyDenialHandler;
}

/** Options of the Fastify {@link rateLimit} plugin. */
export interface FastifyRateLimitOptions extends RateLimitOptions<FastifyRequest> {
  /** @default 'onRequest' */
  hook?: FastifyRateLimitHook;
  /** Limit every route; when false only routes with a `config.rateLimit` object are limited. @default true */
  global?: boolean;
  /** See {@link FastifyDenialHandler}. */
  handler?: FastifyDenialHandler;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** floodgate's per-route options, or `false` to exempt the route. */
    rateLimit?: FastifyRouteRateLimit | false;
  }
  interface FastifyRequest {
    /** The limit floodgate decided on this request; absent when the route is not limited or skipped. */
    rateLimit?: RateLimitInfo;
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

/** Reads a Fastify request: `request.ip` follows the server's `trustProxy` option. */
export const fastifyAccess: RequestAccess<FastifyRequest> = {
  peer: (request) => request.raw.socket?.remoteAddress,
  header: (request, name) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  },
  address: (request) => request.ip,
  // Fastify gives requests `ips` only when its `trustProxy` option is set (Fastify 4 and 5).
  trustsProxy: (request) => 'ips' in request,
};

function setHeaders(reply: FastifyReply, outcome: RateLimitOutcome, contentType: boolean): void {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i += 2) {
    if (contentType || headers[i] !== 'Content-Type') reply.header(headers[i] as string, headers[i + 1]);
  }
}

function sendDenial(reply: FastifyReply, outcome: RateLimitOutcome): void {
  setHeaders(reply, outcome, true);
  // A Buffer keeps the content type as set (a string would gain `; charset=utf-8`).
  reply.code(outcome.status).send(Buffer.from(outcome.body ?? ''));
}

function apply(
  request: FastifyRequest,
  outcome: RateLimitOutcome | undefined,
  reply: FastifyReply,
  done: (error?: Error) => void,
  handler: FastifyDenialHandler | undefined,
): void {
  if (outcome === undefined) {
    done();
    return;
  }
  // Answered elsewhere while the decision was pending (a timeout, another plugin): add nothing, and leave
  // the request where that answer ended it.
  if (answeredElsewhere(outcome, reply.sent)) return;
  request.rateLimit = outcome;
  try {
    // Answering from a callback hook ends the request there; `done` is not called.
    if (!outcome.allowed) {
      if (handler === undefined) {
        sendDenial(reply, outcome);
        return;
      }
      setHeaders(reply, outcome, false);
      reply.code(outcome.status);
      const answered = handler(request, reply, outcome);
      const fallback = () => {
        if (!reply.sent) sendDenial(reply, outcome);
      };
      if (isThenable(answered)) answered.then(fallback, (error: unknown) => done(error as Error));
      else fallback();
      return;
    }
    setHeaders(reply, outcome, true);
    if (outcome.settle !== undefined) settleOnClose(reply.raw, outcome.settle);
  } catch (error) {
    done(error as Error);
    return;
  }
  done();
}

/** A callback-style hook: with the memory store a request is decided without a promise. */
function hookFor(decide: HttpRateLimiter<FastifyRequest>, handler: FastifyDenialHandler | undefined) {
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
    if (isThenable(result)) result.then((outcome) => apply(request, outcome, reply, done, handler), done);
    else apply(request, result, reply, done, handler);
  };
}

/**
 * Rate limiting for Fastify 4 and 5, as a plugin that limits every route registered after it (await the
 * registration). A route's `config.rateLimit` replaces options for that route (its own `policies`,
 * `cost`, `key`, `hook`…) or, set to `false`, exempts it. The client's key follows the server's
 * `trustProxy` option (`request.ip`), and the decision is on `request.rateLimit`.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import { gcra } from 'floodgate';
 * import { rateLimit } from 'floodgate/fastify';
 *
 * const app = Fastify({ trustProxy: 1 });
 * await app.register(rateLimit({ policies: gcra({ limit: 100, periodMs: 60_000 }) }));
 * app.get('/health', { config: { rateLimit: false } }, () => 'ok');
 * ```
 */
export function rateLimit(options: FastifyRateLimitOptions): FastifyRateLimit {
  const {
    hook: hookOption,
    global: globalOption,
    handler: handlerOption,
    ...limitOptions
  } = options ?? ({} as FastifyRateLimitOptions);
  const defaultHook = validateHook(hookOption, 'hook') ?? 'onRequest';
  if (globalOption !== undefined && typeof globalOption !== 'boolean') {
    throw invalid('ERR_INVALID_OPTION', 'global', globalOption, 'a boolean');
  }
  optionalFunction(handlerOption, 'handler');
  const base = createHttpRateLimiter<FastifyRequest>(limitOptions, fastifyAccess);
  const plugin = function floodgate(fastify, _options, done) {
    // Decorated up front, so every request has the same shape.
    if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', undefined);
    fastify.addHook('onRoute', (route: RouteOptions) => {
      const config = route.config?.rateLimit;
      if (config === false || (config === undefined && globalOption === false)) return;
      let decide = base;
      let hookName = defaultHook;
      let handler = handlerOption;
      if (config !== undefined) {
        const { hook, handler: routeHandler, ...overrides } = config;
        const where = `${route.method} ${route.url} config.rateLimit`;
        hookName = validateHook(hook, `${where}.hook`) ?? defaultHook;
        optionalFunction(routeHandler, `${where}.handler`);
        handler = routeHandler ?? handlerOption;
        decide = base.derive(overrides);
      }
      const limit = hookFor(decide, handler);
      const existing = route[hookName];
      // Limit first, so a denied request costs no other hook's work.
      route[hookName] = (existing === undefined ? [limit] : [limit, ...[existing].flat()]) as never;
    });
    done();
  } as FastifyRateLimit;
  Object.assign(plugin, { [Symbol.for('skip-override')]: true, [Symbol.for('fastify.display-name')]: 'floodgate' });
  withLimiter(plugin, base.limiter);
  return plugin;
}

export type { TrustProxy } from './client-address.js';
export type { DenialMessage, RateLimitInfo, RateLimitOptions, RateLimitOutcome } from './core.js';
export type { HeaderFormat } from './headers.js';
