import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import express4 from 'express4';
import Fastify from 'fastify';
import Koa from 'koa';
import Koa3 from 'koa3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { rateLimit as expressRateLimit } from '../../src/http/express.js';
import { rateLimit as fastifyRateLimit } from '../../src/http/fastify.js';
import { rateLimit as koaRateLimit } from '../../src/http/koa.js';
import { rateLimit as nodeRateLimit } from '../../src/http/node.js';
import { gcra } from '../../src/index.js';

// Another part of the app (a timeout middleware, an auth guard) answers while floodgate's decision is
// still pending on an async `key` hook. When the decision lands, the adapter must add nothing to that
// response, must not run the handler, and must never leave a rejected promise behind. An error from
// writing the outcome goes to the framework's error path.

const policies = gcra({ limit: 10, periodMs: 60_000 });

/** A gate the async `key` hook waits on, opened by the test once the early answer went out. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { open, opened };
}

/** Lets pending promise chains (the decision, then the adapter's continuation) run to their end. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

let rejections: unknown[];
const onRejection = (reason: unknown) => rejections.push(reason);
beforeEach(() => {
  rejections = [];
  process.on('unhandledRejection', onRejection);
});
afterEach(() => {
  process.off('unhandledRejection', onRejection);
});

function listen(server: Server): Promise<{ url: string; close: () => Promise<void> }> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}

interface Events {
  handled: number;
  errors: unknown[];
}

describe.each([
  ['express 4', express4],
  ['express 5', express],
] as const)('%s', (_name, factory) => {
  async function start(mode: 'answered' | 'throws', key: () => Promise<string>, events: Events) {
    const app = factory();
    app.use((_request, response, next) => {
      if (mode === 'throws') {
        response.setHeader = () => {
          throw new Error('setHeader refused');
        };
        next();
        return;
      }
      next();
      // floodgate's decision is now pending on `key`: answer first, as a timeout middleware would.
      response.status(503).end('busy');
    });
    app.use(expressRateLimit({ policies, key }));
    app.get('/', (_request, response) => {
      events.handled++;
      response.end('ok');
    });
    app.use((error: unknown, _request: express.Request, response: express.Response, _next: express.NextFunction) => {
      events.errors.push(error);
      response.statusCode = 500;
      response.end('error');
    });
    return listen(createServer(app));
  }

  it('adds nothing to a response another middleware sent first, and does not go on', async () => {
    const events: Events = { handled: 0, errors: [] };
    const g = gate();
    const server = await start(
      'answered',
      async () => {
        await g.opened;
        return 'k';
      },
      events,
    );
    try {
      const response = await fetch(server.url);
      expect(response.status).toBe(503);
      expect(await response.text()).toBe('busy');
      expect(response.headers.get('ratelimit')).toBeNull();
      g.open();
      await settle();
      expect(rejections).toEqual([]);
      expect(events).toEqual({ handled: 0, errors: [] });
    } finally {
      await server.close();
    }
  });

  it('hands an error from writing the outcome to the error handler', async () => {
    const events: Events = { handled: 0, errors: [] };
    const server = await start('throws', async () => 'k', events);
    try {
      const response = await fetch(server.url, { signal: AbortSignal.timeout(5000) });
      expect(response.status).toBe(500);
      await settle();
      expect(rejections).toEqual([]);
      expect(events.handled).toBe(0);
      expect(events.errors.map((e) => (e as Error).message)).toEqual(['setHeader refused']);
    } finally {
      await server.close();
    }
  });
});

describe.each([
  ['express 4', express4],
  ['express 5', express],
] as const)('%s, a response whose headers went out but that has not ended', (_name, factory) => {
  it.each([
    ['allowed', 10],
    ['denied', 1],
  ] as const)('adds nothing and does not go on when %s; the response stays its owner’s', async (_outcome, limit) => {
    const events: Events = { handled: 0, errors: [] };
    let g = gate();
    let finish: (() => void) | undefined;
    const app = factory();
    app.use((request, response, next) => {
      if (request.headers['x-stream'] === undefined) {
        next();
        return;
      }
      next();
      // floodgate's decision is now pending on `key`: start a streamed answer first.
      response.status(200);
      response.flushHeaders();
      response.write('streaming ');
      finish = () => response.end('done');
    });
    app.use(
      expressRateLimit({
        policies: gcra({ limit, periodMs: 60_000 }),
        key: async () => {
          await g.opened;
          return 'k';
        },
      }),
    );
    app.get('/', (_request, response) => {
      events.handled++;
      response.end('ok');
    });
    app.use((error: unknown, _request: express.Request, response: express.Response, _next: express.NextFunction) => {
      events.errors.push(error);
      response.end();
    });
    const server = await listen(createServer(app));
    try {
      // A first request uses up the single unit when limit is 1, so the streamed one is denied.
      g.open();
      expect((await fetch(server.url)).status).toBe(200);
      events.handled = 0;
      g = gate();
      const response = await fetch(server.url, { headers: { 'x-stream': '1' } });
      expect(response.status).toBe(200);
      expect(response.headers.get('ratelimit')).toBeNull();
      g.open();
      await settle();
      expect(events).toEqual({ handled: 0, errors: [] });
      expect(rejections).toEqual([]);
      finish?.();
      expect(await response.text()).toBe('streaming done');
      expect(events).toEqual({ handled: 0, errors: [] });
    } finally {
      await server.close();
    }
  });
});

describe('fastify', () => {
  it('adds nothing to a reply sent first, and does not go on', async () => {
    const g = gate();
    let handled = 0;
    const errors: unknown[] = [];
    const app = Fastify();
    app.setErrorHandler((error, _request, reply) => {
      errors.push(error);
      reply.code(500).send('error');
    });
    app.addHook('onRequest', (_request, reply, done) => {
      done();
      // floodgate's decision is now pending on `key`: answer first.
      reply.code(503).send('busy');
    });
    await app.register(
      fastifyRateLimit({
        policies,
        key: async () => {
          await g.opened;
          return 'k';
        },
      }),
    );
    app.get('/', async () => {
      handled++;
      return 'ok';
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const { port } = app.server.address() as AddressInfo;
      const response = await fetch(`http://127.0.0.1:${port}/`);
      expect(response.status).toBe(503);
      expect(await response.text()).toBe('busy');
      expect(response.headers.get('ratelimit')).toBeNull();
      g.open();
      await settle();
      expect(rejections).toEqual([]);
      expect(errors).toEqual([]);
      expect(handled).toBe(0);
    } finally {
      await app.close();
    }
  });
});

describe('fastify, a reply that refuses the headers', () => {
  it('hands the error to the error handler', async () => {
    let handled = 0;
    const errors: unknown[] = [];
    const app = Fastify();
    app.setErrorHandler((error, _request, reply) => {
      errors.push(error);
      reply.code(500).send('error');
    });
    app.addHook('onRequest', (_request, reply, done) => {
      reply.header = () => {
        throw new Error('header refused');
      };
      done();
    });
    await app.register(fastifyRateLimit({ policies, key: async () => 'k' }));
    app.get('/', async () => {
      handled++;
      return 'ok';
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const { port } = app.server.address() as AddressInfo;
      const response = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(5000) });
      expect(response.status).toBe(500);
      await settle();
      expect(rejections).toEqual([]);
      expect(errors.map((e) => (e as Error).message)).toEqual(['header refused']);
      expect(handled).toBe(0);
    } finally {
      await app.close();
    }
  });
});

describe.each([
  ['koa 2', Koa],
  ['koa 3', Koa3],
] as const)('%s', (_name, Factory) => {
  it('adds nothing to a response sent first, and does not go on', async () => {
    const g = gate();
    let handled = 0;
    const errors: unknown[] = [];
    const app = new Factory();
    app.silent = true;
    app.on('error', (error) => errors.push(error));
    app.use(async (ctx, next) => {
      const pending = next();
      // floodgate's decision is now pending on `key`: answer first, straight on the socket's response.
      ctx.respond = false;
      ctx.res.statusCode = 503;
      ctx.res.end('busy');
      await pending;
    });
    app.use(
      koaRateLimit({
        policies,
        key: async () => {
          await g.opened;
          return 'k';
        },
      }),
    );
    app.use(async (ctx) => {
      handled++;
      ctx.body = 'ok';
    });
    const handle = app.callback();
    const server = await listen(
      createServer((request, response) => {
        void handle(request, response);
      }),
    );
    try {
      const response = await fetch(server.url);
      expect(response.status).toBe(503);
      expect(await response.text()).toBe('busy');
      expect(response.headers.get('ratelimit')).toBeNull();
      g.open();
      await settle();
      expect(rejections).toEqual([]);
      expect(errors).toEqual([]);
      expect(handled).toBe(0);
    } finally {
      await server.close();
    }
  });
});

describe('node:http', () => {
  it('the wrapper adds nothing to a response sent first, and the handler does not run', async () => {
    const g = gate();
    let handled = 0;
    const errors: unknown[] = [];
    const limit = nodeRateLimit({
      policies,
      key: async () => {
        await g.opened;
        return 'k';
      },
    });
    const handler = limit.wrap(
      (_request: IncomingMessage, response: ServerResponse) => {
        handled++;
        response.end('ok');
      },
      { onError: (error) => errors.push(error) },
    );
    const server = await listen(
      createServer((request, response) => {
        handler(request, response);
        response.statusCode = 503;
        response.end('busy');
      }),
    );
    try {
      const response = await fetch(server.url);
      expect(response.status).toBe(503);
      expect(await response.text()).toBe('busy');
      g.open();
      await settle();
      expect(rejections).toEqual([]);
      expect(errors).toEqual([]);
      expect(handled).toBe(0);
    } finally {
      await server.close();
    }
  });
});
