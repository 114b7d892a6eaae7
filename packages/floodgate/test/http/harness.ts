import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { getConnInfo } from '@hono/node-server/conninfo';
import express from 'express';
import express4 from 'express4';
import Fastify, { type FastifyRequest } from 'fastify';
import Fastify4 from 'fastify4';
import { type Context, Hono } from 'hono';
import Koa from 'koa';
import Koa3 from 'koa3';
import type { RateLimitInfo, RateLimitOptions, RateLimitOutcome } from '../../src/http/core.js';
import { rateLimit as expressRateLimit } from '../../src/http/express.js';
import { rateLimit as fastifyRateLimit } from '../../src/http/fastify.js';
import { rateLimit as honoRateLimit, type RateLimitVariables } from '../../src/http/hono.js';
import { type KoaContextLike, rateLimit as koaRateLimit } from '../../src/http/koa.js';
import { rateLimit as nodeRateLimit } from '../../src/http/node.js';

/** A framework-neutral view of a request, so one scenario's hooks run unchanged on every adapter. */
export interface View {
  path: string;
  header(name: string): string | undefined;
  body(): Promise<unknown>;
}

/** Middleware options written once against {@link View}. */
export type NeutralOptions = RateLimitOptions<View>;

export interface Route {
  method: 'GET' | 'POST';
  path: string;
  /** The middleware options of the route (routes sharing the object share the middleware), or none. */
  limit: NeutralOptions | false;
  /** The hooks read the parsed body (Fastify: limit in `preHandler`). */
  readsBody?: boolean;
  /** The status the route's handler answers with. @default 200 */
  status?: (request: View) => number;
  /** Denials go to a handler written in the framework's own way, answering {@link HANDLED}. */
  handler?: boolean;
}

export interface App {
  /** The route whose options are the global ones (Fastify's plugin options). */
  global: NeutralOptions;
  routes: Route[];
  /** The framework's own trusted-proxy setting, as a number of proxies (where the framework has one). */
  proxyHops?: number;
}

export interface Running {
  url: string;
  close(): Promise<void>;
}

export interface Harness {
  name: string;
  /** The framework has a trusted-proxy setting of its own (`App.proxyHops`). */
  proxySetting: boolean;
  start(app: App, host: string): Promise<Running>;
}

/** The body of a denial answered by a route's framework-native `handler`, with the binding policy. */
export const HANDLED = 'handled';

/**
 * Response headers echoing what the handler found where the framework keeps the decision
 * (`req.rateLimit`, `request.rateLimit`, `ctx.state.rateLimit`, `c.get('rateLimit')`).
 */
export const SEEN_KEY = 'x-seen-key';
export const SEEN_REMAINING = 'x-seen-remaining';

function seen(info: RateLimitInfo | undefined): [string, string][] {
  if (info === undefined) return [];
  return [
    [SEEN_KEY, info.key],
    [SEEN_REMAINING, String(info.decision.remaining)],
  ];
}

const HOOKS = ['key', 'cost', 'skip', 'policies', 'message', 'requestWasSuccessful', 'settle'] as const;

/** Rewrites the View hooks of neutral options into hooks of the framework's request. */
function adapt<Req>(options: NeutralOptions, view: (request: Req) => View): RateLimitOptions<Req> {
  const adapted: Record<string, unknown> = { ...options };
  for (const hook of HOOKS) {
    const fn = options[hook];
    if (typeof fn === 'function') {
      adapted[hook] = (request: Req, ...rest: unknown[]) =>
        (fn as (v: View, ...r: unknown[]) => unknown)(view(request), ...rest);
    }
  }
  return adapted as RateLimitOptions<Req>;
}

function once<T>(fn: () => T): () => T {
  let done = false;
  let value: T;
  return () => {
    if (!done) {
      value = fn();
      done = true;
    }
    return value;
  };
}

function readBody(request: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      resolve(text === '' ? undefined : JSON.parse(text));
    });
    request.on('error', reject);
  });
}

function nodeView(request: IncomingMessage, body: () => Promise<unknown>): View {
  return {
    path: new URL(request.url ?? '/', 'http://x').pathname,
    header: (name) => {
      const value = request.headers[name];
      return Array.isArray(value) ? value.join(', ') : value;
    },
    body,
  };
}

function listen(server: Server, host: string): Promise<Running> {
  return new Promise((resolve) => {
    server.listen(0, host, () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}

/** One middleware per distinct options object (and denial handling), as an app would mount it. */
function perOptions<M>(
  build: (options: NeutralOptions, route: Route) => M,
): (options: NeutralOptions, route: Route) => M {
  const built = new Map<string, Map<NeutralOptions, M>>();
  return (options, route) => {
    const kind = route.handler ? 'handler' : 'default';
    let byOptions = built.get(kind);
    if (byOptions === undefined) {
      byOptions = new Map();
      built.set(kind, byOptions);
    }
    let middleware = byOptions.get(options);
    if (middleware === undefined) {
      middleware = build(options, route);
      byOptions.set(options, middleware);
    }
    return middleware;
  };
}

const ok = JSON.stringify({ ok: true });

const nodeHarness: Harness = {
  name: 'node:http',
  proxySetting: false,
  async start(app, host) {
    const bodies = new WeakMap<IncomingMessage, unknown>();
    const view = (request: IncomingMessage) => nodeView(request, async () => bodies.get(request));
    const handlers = new Map<
      string,
      (request: IncomingMessage, response: import('node:http').ServerResponse) => unknown
    >();
    const limiterOf = perOptions((options, route: Route) =>
      nodeRateLimit({
        ...adapt(options, view),
        ...(route.handler
          ? {
              handler: (_request, response, outcome) => {
                response.setHeader('Content-Type', 'application/json');
                response.end(JSON.stringify({ [HANDLED]: outcome.decision.policy }));
              },
            }
          : {}),
      }),
    );
    for (const route of app.routes) {
      const reply = (request: IncomingMessage, response: import('node:http').ServerResponse) => {
        response.statusCode = route.status?.(view(request)) ?? 200;
        for (const [name, value] of seen(request.rateLimit)) response.setHeader(name, value);
        response.setHeader('Content-Type', 'application/json');
        response.end(ok);
      };
      let handler: (request: IncomingMessage, response: import('node:http').ServerResponse) => unknown = reply;
      if (route.limit !== false) {
        const limit = limiterOf(route.limit, route);
        // GET routes use the wrapper; POST routes read the body first and call the guard.
        handler =
          route.method === 'GET'
            ? limit.wrap(reply, {
                onError: (_error, _request, response) => {
                  response.statusCode = 500;
                  response.end();
                },
              })
            : async (request, response) => {
                bodies.set(request, await readBody(request));
                let admitted: boolean;
                try {
                  admitted = await limit(request, response);
                } catch {
                  response.statusCode = 500;
                  response.end();
                  return;
                }
                if (admitted) reply(request, response);
              };
      }
      handlers.set(`${route.method} ${route.path}`, handler);
    }
    const server = createServer((request, response) => {
      const handler = handlers.get(`${request.method} ${new URL(request.url ?? '/', 'http://x').pathname}`);
      if (handler === undefined) {
        response.statusCode = 404;
        response.end();
      } else {
        void handler(request, response);
      }
    });
    return listen(server, host);
  },
};

function expressHarness(name: string, factory: typeof express): Harness {
  return {
    name,
    proxySetting: true,
    start(app, host) {
      const server = factory();
      server.set('env', 'test');
      if (app.proxyHops !== undefined) server.set('trust proxy', app.proxyHops);
      server.use(factory.json());
      const view = (request: import('express').Request): View => ({
        path: request.path,
        header: (header) => request.get(header),
        body: async () => request.body,
      });
      const limiterOf = perOptions((options, route) =>
        expressRateLimit<import('express').Request, import('express').Response>({
          ...adapt(options, view),
          ...(route.handler
            ? {
                handler: (_request, response, _next, outcome) => {
                  response.json({ [HANDLED]: outcome.decision.policy });
                },
              }
            : {}),
        }),
      );
      for (const route of app.routes) {
        const handlers = route.limit === false ? [] : [limiterOf(route.limit, route)];
        const method = route.method === 'GET' ? 'get' : 'post';
        server[method](route.path, ...handlers, (request, response) => {
          for (const [header, value] of seen(request.rateLimit)) response.set(header, value);
          response.status(route.status?.(view(request)) ?? 200).json({ ok: true });
        });
      }
      return listen(createServer(server), host);
    },
  };
}

function fastifyHarness(name: string, factory: typeof Fastify): Harness {
  return {
    name,
    proxySetting: true,
    async start(app, host) {
      const hops = app.proxyHops;
      // Fastify's `trustProxy: n` written as the function it compiles to (its types leave numbers out).
      const server = factory({
        trustProxy: hops === undefined ? false : (_address: string, hop: number) => hop < hops,
      });
      const view = (request: FastifyRequest): View => ({
        path: new URL(request.url, 'http://x').pathname,
        header: (name) => {
          const value = request.headers[name];
          return Array.isArray(value) ? value.join(', ') : value;
        },
        body: async () => request.body,
      });
      await server.register(fastifyRateLimit(adapt(app.global, view)));
      for (const route of app.routes) {
        const rateLimit =
          route.limit === false
            ? false
            : route.limit === app.global && !route.handler
              ? undefined
              : {
                  ...adapt(route.limit, view),
                  ...(route.readsBody ? { hook: 'preHandler' as const } : {}),
                  ...(route.handler
                    ? {
                        handler: (
                          _request: FastifyRequest,
                          reply: import('fastify').FastifyReply,
                          outcome: RateLimitOutcome,
                        ) => reply.send({ [HANDLED]: outcome.decision.policy }),
                      }
                    : {}),
                };
        server.route({
          method: route.method,
          url: route.path,
          ...(rateLimit === undefined ? {} : { config: { rateLimit } }),
          handler: async (request, reply) => {
            for (const [header, value] of seen(request.rateLimit)) reply.header(header, value);
            reply.code(route.status?.(view(request)) ?? 200);
            return { ok: true };
          },
        });
      }
      await server.listen({ port: 0, host });
      const { port } = server.server.address() as AddressInfo;
      return {
        url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
        close: () => server.close(),
      };
    },
  };
}

const honoHarness: Harness = {
  name: 'hono',
  proxySetting: false,
  start(app, host) {
    const server = new Hono<{ Variables: RateLimitVariables }>();
    server.onError((_error, c) => c.text('Internal Server Error', 500));
    const views = new WeakMap<Context, View>();
    const view = (c: Context): View => {
      let known = views.get(c);
      if (known === undefined) {
        const body = once(() => c.req.json().catch(() => undefined));
        known = { path: c.req.path, header: (name) => c.req.header(name), body };
        views.set(c, known);
      }
      return known;
    };
    const limiterOf = perOptions((options, route) =>
      honoRateLimit({
        ...adapt(options, view),
        getConnInfo,
        ...(route.handler
          ? { handler: (c: Context, outcome: RateLimitOutcome) => c.json({ [HANDLED]: outcome.decision.policy }) }
          : {}),
      }),
    );
    for (const route of app.routes) {
      const handler = (c: Context<{ Variables: RateLimitVariables }>) => {
        for (const [name, value] of seen(c.get('rateLimit'))) c.header(name, value);
        return c.json({ ok: true }, (route.status?.(view(c)) ?? 200) as 200);
      };
      if (route.limit === false) server.on(route.method, route.path, handler);
      else server.on(route.method, route.path, limiterOf(route.limit, route), handler);
    }
    return new Promise((resolve) => {
      const running = serve({ fetch: server.fetch, port: 0, hostname: host }, (info) => {
        resolve({
          url: `http://${host.includes(':') ? `[${host}]` : host}:${info.port}`,
          close: () =>
            new Promise<void>((done) => {
              (running as Server).closeAllConnections();
              running.close(() => done());
            }),
        });
      });
    });
  },
};

interface KoaContext extends KoaContextLike {
  path: string;
  method: string;
  get(field: string): string;
  state: Record<string, unknown>;
}

function koaHarness(name: string, Factory: typeof Koa): Harness {
  return {
    name,
    proxySetting: true,
    start(app, host) {
      const server = new Factory();
      server.silent = true;
      if (app.proxyHops !== undefined) {
        server.proxy = true;
        server.maxIpsCount = app.proxyHops;
      }
      const view = (ctx: KoaContext): View => ({
        path: ctx.path,
        header: (header) => ctx.get(header) || undefined,
        body: async () => ctx.state.body,
      });
      const limiterOf = perOptions((options, route) =>
        koaRateLimit<KoaContext>({
          ...adapt(options, view),
          ...(route.handler
            ? {
                handler: (ctx: KoaContext, outcome: RateLimitOutcome) => {
                  ctx.body = { [HANDLED]: outcome.decision.policy };
                },
              }
            : {}),
        }),
      );
      const routes = new Map<string, Route>();
      for (const route of app.routes) routes.set(`${route.method} ${route.path}`, route);
      server.use(async (ctx, next) => {
        if (ctx.method === 'POST') ctx.state.body = await readBody(ctx.req);
        await next();
      });
      server.use(async (ctx, next) => {
        const route = routes.get(`${ctx.method} ${ctx.path}`);
        if (route === undefined) return;
        const context = ctx as unknown as KoaContext;
        const reply = async () => {
          for (const [header, value] of seen(context.state.rateLimit as RateLimitInfo | undefined))
            ctx.set(header, value);
          ctx.status = route.status?.(view(context)) ?? 200;
          ctx.body = { ok: true };
        };
        if (route.limit === false) await reply();
        else await limiterOf(route.limit, route)(context, reply);
        await next();
      });
      const handle = server.callback();
      return listen(
        createServer((request, response) => {
          void handle(request, response);
        }),
        host,
      );
    },
  };
}

/** Every adapter, each in each supported major version. */
export const harnesses: Harness[] = [
  nodeHarness,
  expressHarness('express 4', express4),
  expressHarness('express 5', express),
  fastifyHarness('fastify 4', Fastify4),
  fastifyHarness('fastify 5', Fastify),
  honoHarness,
  koaHarness('koa 2', Koa),
  koaHarness('koa 3', Koa3),
];
