import { mkdtempSync, rmSync } from 'node:fs';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import Koa from 'koa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { rateLimit as expressRateLimit } from '../../src/http/express.js';
import { rateLimit as fastifyRateLimit } from '../../src/http/fastify.js';
import { rateLimit as koaRateLimit } from '../../src/http/koa.js';
import { rateLimit as nodeRateLimit } from '../../src/http/node.js';
import {
  fixedWindow,
  gcra,
  memoryStore,
  type Policy,
  type Store,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { type ManualClock, manualClock, uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from '../stores/redis/servers.js';
import { connect, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';
import {
  type App,
  HANDLED,
  type Harness,
  harnesses,
  type NeutralOptions,
  type Running,
  SEEN_KEY,
  SEEN_REMAINING,
  type View,
} from './harness.js';
import { Watched } from './watched-store.js';

// The options users reach for (a denial message or handler, counting only failures or only successes,
// the decision on the request), written once and run through every adapter over real HTTP.

const status = (request: View) => Number(request.header('x-status') ?? 200);

function optionsApp(
  clock: ManualClock,
  store: Watched,
  policy: Policy = fixedWindow({ limit: 2, windowMs: 60_000, name: 'two' }),
): App {
  const one = (name: string) => fixedWindow({ limit: 1, windowMs: 60_000, name });
  const common = { clock };
  const text: NeutralOptions = { ...common, policies: one('text'), message: 'Slow down.' };
  const json: NeutralOptions = { ...common, policies: one('json'), message: { error: 'too many requests' } };
  const computed: NeutralOptions = {
    ...common,
    policies: one('computed'),
    message: async (request, info) => ({
      path: request.path,
      policy: info.decision.policy,
      retryAfterMs: info.decision.retryAfterMs,
      key: info.key,
    }),
  };
  const handled: NeutralOptions = { ...common, policies: one('handled') };
  const successesFree: NeutralOptions = { ...common, store, policies: policy, skipSuccessfulRequests: true };
  const failuresFree: NeutralOptions = {
    ...common,
    store,
    policies: fixedWindow({ limit: 2, windowMs: 60_000, name: 'failures-free' }),
    skipFailedRequests: true,
  };
  const judged: NeutralOptions = {
    ...common,
    store,
    policies: fixedWindow({ limit: 1, windowMs: 60_000, name: 'judged' }),
    skipSuccessfulRequests: true,
    // A 404 is the client's own miss, not a failure of the service: it counts as a success here.
    requestWasSuccessful: async (request, statusCode) => statusCode < 500 && request.header('x-flaky') === undefined,
  };
  return {
    global: text,
    routes: [
      { method: 'GET', path: '/text', limit: text },
      { method: 'GET', path: '/json', limit: json },
      { method: 'GET', path: '/computed', limit: computed },
      { method: 'GET', path: '/handled', limit: handled, handler: true },
      { method: 'POST', path: '/login', limit: successesFree, status },
      { method: 'POST', path: '/upload', limit: failuresFree, status },
      { method: 'GET', path: '/judged', limit: judged, status },
    ],
  };
}

interface Answer {
  status: number;
  headers: Headers;
  body: string;
}

async function send(
  server: Running,
  path: string,
  init: { method?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const response = await fetch(`${server.url}${path}`, init);
  return { status: response.status, headers: response.headers, body: await response.text() };
}

function expectDenial(answer: Answer, contentType: string): void {
  expect(answer.status).toBe(429);
  expect(answer.headers.get('content-type')?.replace(/; ?charset=utf-8/i, '')).toBe(contentType);
  expect(answer.headers.get('retry-after')).toBe('60');
  expect(answer.headers.get('cache-control')).toBe('no-store');
  expect(answer.headers.get('ratelimit')).toMatch(/;r=0;t=60$/);
}

describe.each(harnesses.map((h) => [h.name, h] as [string, Harness]))('%s', (_name, harness) => {
  const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
  const store = new Watched(memoryStore());
  let server: Running;
  beforeAll(async () => {
    server = await harness.start(optionsApp(clock, store), '127.0.0.1');
  });
  afterAll(async () => {
    await server?.close();
  });

  it('message: a string is sent as text, with the status and headers of a denial', async () => {
    expect((await send(server, '/text')).status).toBe(200);
    const denied = await send(server, '/text');
    expectDenial(denied, 'text/plain');
    expect(denied.body).toBe('Slow down.');
  });

  it('message: an object is sent as JSON', async () => {
    await send(server, '/json');
    const denied = await send(server, '/json');
    expectDenial(denied, 'application/json');
    expect(JSON.parse(denied.body)).toEqual({ error: 'too many requests' });
  });

  it('message: a function of the request and the decision', async () => {
    await send(server, '/computed');
    const denied = await send(server, '/computed');
    expectDenial(denied, 'application/json');
    expect(JSON.parse(denied.body)).toEqual({
      path: '/computed',
      policy: 'computed',
      retryAfterMs: 60_000,
      key: '127.0.0.1',
    });
  });

  it("handler: a denial answered the framework's way, after the status and headers were set", async () => {
    await send(server, '/handled');
    const denied = await send(server, '/handled');
    expectDenial(denied, 'application/json');
    expect(JSON.parse(denied.body)).toEqual({ [HANDLED]: 'handled' });
  });

  it('puts the decision where handlers look for it', async () => {
    const first = await send(server, '/login', { method: 'POST', headers: { 'x-status': '200' } });
    expect(first.headers.get(SEEN_KEY)).toBe('127.0.0.1');
    expect(first.headers.get(SEEN_REMAINING)).toBe('1');
    await store.refunded(1);
  });

  it('skipSuccessfulRequests: a login counts only when it fails', async () => {
    const before = store.refunds;
    const login = (password: 'right' | 'wrong') =>
      send(server, '/login', { method: 'POST', headers: { 'x-status': password === 'right' ? '200' : '401' } });
    for (let i = 1; i <= 3; i++) {
      const ok = await login('right');
      expect(ok.status).toBe(200);
      // Each success was given back before the next request: the count never moves.
      expect(ok.headers.get(SEEN_REMAINING)).toBe('1');
      await store.refunded(before + i);
    }
    expect((await login('wrong')).status).toBe(401);
    expect((await login('wrong')).status).toBe(401);
    const denied = await login('wrong');
    expect(denied.status).toBe(429);
    expect(denied.headers.get('retry-after')).toBe('60');
    expect((await login('right')).status).toBe(429);
    expect(store.refunds).toBe(before + 3);
  });

  it('skipFailedRequests: failed responses do not count, a denial gives nothing back', async () => {
    const before = store.refunds;
    const upload = (statusCode: number) =>
      send(server, '/upload', { method: 'POST', headers: { 'x-status': String(statusCode) } });
    expect((await upload(500)).status).toBe(500);
    await store.refunded(before + 1);
    expect((await upload(404)).status).toBe(404);
    await store.refunded(before + 2);
    expect((await upload(201)).status).toBe(201);
    expect((await upload(200)).headers.get(SEEN_REMAINING)).toBe('0');
    expect((await upload(500)).status).toBe(429);
    expect(store.refunds).toBe(before + 2);
  });

  it('requestWasSuccessful decides what a success is', async () => {
    const before = store.refunds;
    // 404: a success by this app's rule, given back; twice.
    expect((await send(server, '/judged', { headers: { 'x-status': '404' } })).status).toBe(404);
    await store.refunded(before + 1);
    expect((await send(server, '/judged', { headers: { 'x-status': '404' } })).status).toBe(404);
    await store.refunded(before + 2);
    // A 200 the rule calls a failure counts.
    expect((await send(server, '/judged', { headers: { 'x-status': '200', 'x-flaky': '1' } })).status).toBe(200);
    expect((await send(server, '/judged', { headers: { 'x-status': '404' } })).status).toBe(429);
    expect(store.refunds).toBe(before + 2);
  });
});

// Giving a request back runs the store's own refund: the same sequence on every store, for each
// algorithm that can give a request back, through one adapter.
const POLICIES: Policy[] = [
  fixedWindow({ limit: 2, windowMs: 60_000, name: 'fixed' }),
  fixedWindow({ limit: 2, windowMs: 60_000, align: 'first-request', name: 'first' }),
  gcra({ limit: 2, periodMs: 60_000, name: 'gcra' }),
  tokenBucket({ capacity: 2, refillAmount: 2, refillIntervalMs: 60_000, refill: 'interval', name: 'interval' }),
  tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 30_000, name: 'bucket' }),
  slidingWindow({ limit: 2, windowMs: 60_000, name: 'window' }),
  slidingLog({ limit: 2, windowMs: 60_000, name: 'log' }),
  slidingLog({ limit: 2, windowMs: 60_000, blockMs: 600_000, name: 'log-block' }),
];

const express5 = harnesses.find((h) => h.name === 'express 5') ?? expect.unreachable('the express 5 harness');
const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const postgresUp = await requirePostgres();

interface StoreCase {
  name: string;
  /** Whether the store decides on its own clock (no `clock` given to the middleware). */
  ownClock?: boolean;
  make(): Promise<Store>;
}

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

const STORES: StoreCase[] = [
  { name: 'memory', make: async () => memoryStore() },
  {
    name: 'sqlite',
    make: async () => {
      const directory = mkdtempSync(join(tmpdir(), 'floodgate-options-'));
      const database = new Database(join(directory, 'state.db'));
      cleanups.push(() => {
        database.close();
        rmSync(directory, { recursive: true, force: true });
      });
      const store = sqliteStore({ database, table: 'refunds' });
      store.migrate();
      return store;
    },
  },
  ...(redisUp
    ? [false, true].map(
        (ownClock): StoreCase => ({
          name: ownClock ? 'redis (its own clock)' : 'redis',
          ownClock,
          make: async () => {
            const client = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
            cleanups.push(() => void client.disconnect());
            return redisStore({ client: fromIoredis(client) });
          },
        }),
      )
    : []),
  ...(postgresUp
    ? [
        {
          name: 'postgres',
          make: async () => {
            const connection = connect('pg', 4);
            const schema = uniqueSchema('http_refunds');
            const store = postgresStore({ client: connection.client, schema, table: 'refunds' });
            await store.migrate();
            cleanups.push(async () => {
              await store.close();
              await connection.sql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
              await connection.close();
            });
            return store;
          },
        },
      ]
    : []),
];

describe.each(STORES.map((s) => [s.name, s] as [string, StoreCase]))('refunds on %s', (_name, storeCase) => {
  let servers: Running[] = [];
  afterEach(async () => {
    await Promise.all(servers.map((server) => server.close()));
    servers = [];
  });

  it.each(POLICIES.map((p) => [p.name, p] as [string, Policy]))(
    '%s: only failed logins count',
    async (_policy, policy) => {
      const store = new Watched(await storeCase.make());
      const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
      const login: NeutralOptions = {
        ...(storeCase.ownClock ? {} : { clock }),
        store,
        prefix: uniquePrefix('http-refund'),
        policies: policy,
        skipSuccessfulRequests: true,
      };
      const app: App = { global: login, routes: [{ method: 'POST', path: '/login', limit: login, status }] };
      const server = await express5.start(app, '127.0.0.1');
      servers.push(server);
      const attempt = (code: number) =>
        send(server, '/login', { method: 'POST', headers: { 'x-status': String(code) } });
      for (let i = 1; i <= 4; i++) {
        expect((await attempt(200)).status).toBe(200);
        await store.refunded(i);
      }
      expect((await attempt(401)).status).toBe(401);
      expect((await attempt(401)).status).toBe(401);
      expect((await attempt(401)).status).toBe(429);
      expect((await attempt(200)).status).toBe(429);
    },
  );
});

// A client that hangs up before its response is over gets nothing back: the server did the work.
describe('a request cut short stays counted, even under skipFailedRequests', () => {
  type Held = (request: IncomingMessage, response: ServerResponse) => Promise<void>;
  const limitOptions = (store: Store) => ({
    policies: fixedWindow({ limit: 1, windowMs: 60_000, name: 'held' }),
    store,
    clock: manualClock({ startMs: Date.UTC(2030, 0, 1) }),
    skipFailedRequests: true,
  });
  // Each app serves GET /held through the adapter, and hands the request to `hold` before answering 500.
  const APPS: Record<string, (store: Store, hold: Held) => Promise<Running>> = {
    'node:http': async (store, hold) => {
      const limit = nodeRateLimit(limitOptions(store));
      const server = createServer(
        limit.wrap(async (request, response) => {
          await hold(request, response);
          response.statusCode = 500;
          response.end();
        }),
      );
      return listenOn(server);
    },
    express: async (store, hold) => {
      const app = express();
      app.get('/held', expressRateLimit(limitOptions(store)), async (request, response) => {
        await hold(request, response);
        response.status(500).end();
      });
      return listenOn(createServer(app));
    },
    fastify: async (store, hold) => {
      const app = Fastify();
      await app.register(fastifyRateLimit(limitOptions(store)));
      app.get('/held', async (request, reply) => {
        await hold(request.raw, reply.raw);
        return reply.code(500).send();
      });
      await app.listen({ port: 0, host: '127.0.0.1' });
      return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, close: () => app.close() };
    },
    koa: async (store, hold) => {
      const app = new Koa();
      app.use(koaRateLimit(limitOptions(store)));
      app.use(async (ctx) => {
        await hold(ctx.req, ctx.res);
        ctx.status = 500;
      });
      const handle = app.callback();
      return listenOn(
        createServer((request, response) => {
          void handle(request, response);
        }),
      );
    },
  };

  it.each(Object.keys(APPS))('%s', async (name) => {
    const store = new Watched(memoryStore());
    let arrived!: () => void;
    const arrival = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    let closed!: () => void;
    const closing = new Promise<void>((resolve) => {
      closed = resolve;
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const server = await (APPS[name] as (typeof APPS)[string])(store, async (_request, response) => {
      // Listeners run in order: the middleware's, registered first, has settled by the time this one runs.
      response.once('close', closed);
      arrived();
      await released;
    });
    try {
      const hungUp = httpRequest(`${server.url}/held`, { agent: false });
      hungUp.on('error', () => {});
      hungUp.end();
      await arrival;
      hungUp.destroy();
      await closing;
      release();
      // The first request was cut short, with a 500 on its way: still counted.
      expect((await send(server, '/held')).status).toBe(429);
      expect(store.refunds).toBe(0);
    } finally {
      release();
      await server.close();
    }
  });
});

function listenOn(server: Server): Promise<Running> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      }),
    );
  });
}
