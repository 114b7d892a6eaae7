import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import express4 from 'express4';
import Fastify, { type FastifyRequest } from 'fastify';
import { type Context, Hono } from 'hono';
import Koa from 'koa';
import Koa3 from 'koa3';
import type { RateLimitOptions } from '../../src/http/core.js';
import { rateLimit as expressRateLimit } from '../../src/http/express.js';
import { rateLimit as fastifyRateLimit } from '../../src/http/fastify.js';
import { rateLimit as honoRateLimit } from '../../src/http/hono.js';
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
}

export interface App {
  /** The route whose options are the global ones (Fastify's plugin options). */
  global: NeutralOptions;
  routes: Route[];
}

export interface Running {
  url: string;
  close(): Promise<void>;
}

export interface Harness {
  name: string;
  start(app: App, host: string): Promise<Running>;
}

const HOOKS = ['key', 'cost', 'skip', 'policies'] as const;

/** Rewrites the View hooks of neutral options into hooks of the framework's request. */
function adapt<Req>(options: NeutralOptions, view: (request: Req) => View): RateLimitOptions<Req> {
  const adapted: Record<string, unknown> = { ...options };
  for (const hook of HOOKS) {
    const fn = options[hook];
    if (typeof fn === 'function') adapted[hook] = (request: Req) => (fn as (v: View) => unknown)(view(request));
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

/** One middleware per distinct options object, as an app would mount it. */
function perOptions<M>(build: (options: NeutralOptions) => M): (options: NeutralOptions) => M {
  const built = new Map<NeutralOptions, M>();
  return (options) => {
    let middleware = built.get(options);
    if (middleware === undefined) {
      middleware = build(options);
      built.set(options, middleware);
    }
    return middleware;
  };
}

const ok = JSON.stringify({ ok: true });

const nodeHarness: Harness = {
  name: 'node:http',
  async start(app, host) {
    const bodies = new WeakMap<IncomingMessage, unknown>();
    const view = (request: IncomingMessage) => nodeView(request, async () => bodies.get(request));
    const limiterOf = perOptions((options) => nodeRateLimit(adapt(options, view)));
    const handlers = new Map<
      string,
      (request: IncomingMessage, response: import('node:http').ServerResponse) => unknown
    >();
    for (const route of app.routes) {
      const reply = (_: IncomingMessage, response: import('node:http').ServerResponse) => {
        response.setHeader('Content-Type', 'application/json');
        response.end(ok);
      };
      let handler: (request: IncomingMessage, response: import('node:http').ServerResponse) => unknown = reply;
      if (route.limit !== false) {
        const limit = limiterOf(route.limit);
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
    start(app, host) {
      const server = factory();
      server.set('env', 'test');
      server.use(factory.json());
      const view = (request: import('express').Request): View => ({
        path: request.path,
        header: (header) => request.get(header),
        body: async () => request.body,
      });
      const limiterOf = perOptions((options) => expressRateLimit<import('express').Request>(adapt(options, view)));
      for (const route of app.routes) {
        const handlers = route.limit === false ? [] : [limiterOf(route.limit)];
        const method = route.method === 'GET' ? 'get' : 'post';
        server[method](route.path, ...handlers, (_request, response) => {
          response.json({ ok: true });
        });
      }
      return listen(createServer(server), host);
    },
  };
}

const fastifyHarness: Harness = {
  name: 'fastify',
  async start(app, host) {
    const server = Fastify();
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
          : route.limit === app.global
            ? undefined
            : { ...adapt(route.limit, view), ...(route.readsBody ? { hook: 'preHandler' as const } : {}) };
      server.route({
        method: route.method,
        url: route.path,
        ...(rateLimit === undefined ? {} : { config: { rateLimit } }),
        handler: async () => ({ ok: true }),
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

const honoHarness: Harness = {
  name: 'hono',
  start(app, host) {
    const server = new Hono();
    server.onError((_error, c) => c.text('Internal Server Error', 500));
    const view = (c: Context): View => {
      const body = once(() => c.req.json().catch(() => undefined));
      return { path: c.req.path, header: (name) => c.req.header(name), body };
    };
    const limiterOf = perOptions((options) => honoRateLimit(adapt(options, view)));
    for (const route of app.routes) {
      const handler = (c: Context) => c.json({ ok: true });
      if (route.limit === false) server.on(route.method, route.path, handler);
      else server.on(route.method, route.path, limiterOf(route.limit), handler);
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
    start(app, host) {
      const server = new Factory();
      server.silent = true;
      const view = (ctx: KoaContext): View => ({
        path: ctx.path,
        header: (header) => ctx.get(header) || undefined,
        body: async () => ctx.state.body,
      });
      const limiterOf = perOptions((options) => koaRateLimit<KoaContext>(adapt(options, view)));
      const routes = new Map<string, Route>();
      for (const route of app.routes) routes.set(`${route.method} ${route.path}`, route);
      server.use(async (ctx, next) => {
        if (ctx.method === 'POST') ctx.state.body = await readBody(ctx.req);
        await next();
      });
      server.use(async (ctx, next) => {
        const route = routes.get(`${ctx.method} ${ctx.path}`);
        if (route === undefined) return;
        const reply = async () => {
          ctx.body = { ok: true };
        };
        if (route.limit === false) await reply();
        else await limiterOf(route.limit)(ctx as unknown as KoaContext, reply);
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
  fastifyHarness,
  honoHarness,
  koaHarness('koa 2', Koa),
  koaHarness('koa 3', Koa3),
];
