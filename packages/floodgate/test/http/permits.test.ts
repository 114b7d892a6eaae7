import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { Redis } from 'ioredis';
import Koa from 'koa';
import { parseList } from 'structured-headers';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { RateLimitOptions } from '../../src/http/core.js';
import { rateLimit as expressRateLimit } from '../../src/http/express.js';
import { rateLimit as fastifyRateLimit } from '../../src/http/fastify.js';
import { rateLimit as honoRateLimit } from '../../src/http/hono.js';
import { rateLimit as koaRateLimit } from '../../src/http/koa.js';
import { rateLimit as nodeRateLimit } from '../../src/http/node.js';
import { concurrency, createLimiter, fixedWindow, isFloodgateError, memoryPermitStore } from '../../src/index.js';
import { fromIoredis, redisPermitStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { redisAvailable, requireServer } from '../stores/redis/servers.js';
import { type Answer, CountedPermits, Gates, get, modeOf, until } from './permit-kit.js';

// Every adapter over real HTTP with a concurrency policy: a request holds a permit for the life of its
// response and gives it back when the response ends, when the client goes away, or when the handler
// throws; the permits in flight always come back to 0.

interface Running {
  url: string;
  close(): Promise<void>;
}

/** What the tests give an app: the middleware options (the permit store inside) and the gates. */
type Start = (options: RateLimitOptions<never>, gates: Gates) => Promise<Running>;

function listening(server: Server): Promise<Running> {
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

/** The handler every app runs, written against node's request and response. */
async function work(gates: Gates, url: string | undefined, signal?: AbortSignal): Promise<string> {
  const { mode, id } = modeOf(url);
  if (mode === 'throw') throw new Error('handler failed');
  if (mode === 'wait') await gates.wait(id, signal);
  return 'done';
}

const ADAPTERS: Record<string, Start> = {
  'node:http': async (options, gates) => {
    const limit = nodeRateLimit(options as RateLimitOptions<IncomingMessage>);
    const server = createServer(
      limit.wrap(
        async (req: IncomingMessage, res: ServerResponse) => {
          res.end(await work(gates, req.url));
        },
        {
          onError: (_error, _req, res) => {
            res.statusCode = 500;
            res.end();
          },
        },
      ),
    );
    return listening(server);
  },
  express: async (options, gates) => {
    const app = express();
    app.use(expressRateLimit(options as never));
    app.get('/work', async (req, res, next) => {
      try {
        res.send(await work(gates, req.url));
      } catch (error) {
        next(error);
      }
    });
    return listening(createServer(app));
  },
  fastify: async (options, gates) => {
    const app = Fastify();
    await app.register(fastifyRateLimit(options as never));
    app.get('/work', async (req) => work(gates, req.url));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}`,
      close: async () => {
        app.server.closeAllConnections();
        await app.close();
      },
    };
  },
  hono: async (options, gates) => {
    const app = new Hono();
    app.use(honoRateLimit(options as never));
    app.get('/work', async (c) => c.text(await work(gates, c.req.url, c.req.raw.signal)));
    const server = await new Promise<Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
    });
    const { port } = server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}`,
      close: () =>
        new Promise<void>((done) => {
          server.closeAllConnections();
          server.close(() => done());
        }),
    };
  },
  koa: async (options, gates) => {
    const app = new Koa();
    app.silent = true;
    app.use(koaRateLimit(options as never));
    app.use(async (ctx) => {
      ctx.body = await work(gates, ctx.url);
    });
    const callback = app.callback();
    return listening(
      createServer((req, res) => {
        void callback(req, res);
      }),
    );
  },
};

/** At most 2 requests in flight (and 1000 a minute, so the rate never decides here). */
function options(permits: CountedPermits, extra: Partial<RateLimitOptions<never>> = {}): RateLimitOptions<never> {
  return {
    prefix: uniquePrefix('http-permits'),
    policies: [
      fixedWindow({ limit: 1000, windowMs: 60_000, name: 'rate' }),
      concurrency({ limit: 2, leaseMs: 60_000, name: 'busy' }),
    ],
    permits,
    key: () => 'client',
    ...extra,
  };
}

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const redis = redisUp ? new Redis({ host: '127.0.0.1', port: 6379 }) : undefined;
afterAll(() => redis?.disconnect());

/** The permit store of each run: memory for every adapter, Redis too for node:http and Express. */
const CASES: [string, Start, () => CountedPermits][] = [
  ...Object.entries(ADAPTERS).map(([name, start]): [string, Start, () => CountedPermits] => [
    name,
    start,
    () => new CountedPermits(),
  ]),
  ...(redis === undefined
    ? []
    : (['node:http', 'express'] as const).map((name): [string, Start, () => CountedPermits] => [
        `${name} on Redis`,
        ADAPTERS[name] as Start,
        () => new CountedPermits(redisPermitStore({ client: fromIoredis(redis) })),
      ])),
];

for (const [name, start, makePermits] of CASES) {
  describe(`${name}: a concurrency policy over real HTTP`, () => {
    let running: Running | undefined;
    let gates = new Gates();
    afterEach(async () => {
      gates.openAll();
      await running?.close();
      running = undefined;
      gates = new Gates();
    });

    it('holds a permit while the handler runs and releases it when the response ends', async () => {
      const permits = makePermits();
      running = await start(options(permits), gates);
      const base = running.url;
      const a = get(base, '/work?mode=wait&id=a');
      const b = get(base, '/work?mode=wait&id=b');
      await until(() => gates.entered.has('a') && gates.entered.has('b'), 'both handlers running');
      expect(permits.inFlight).toBe(2);
      // The third is refused by the concurrency policy, with its quota in the IETF fields.
      const third = (await get(base, '/work')) as Answer;
      expect(third.status).toBe(429);
      expect(third.headers['ratelimit-policy']).toBe('"rate";q=1000;w=60, "busy";q=2;qu="concurrent-requests"');
      const fields = parseList(third.headers.ratelimit as string);
      expect(fields[1]?.[0]).toBe('busy');
      expect(Object.fromEntries(fields[1]?.[1] ?? [])).toMatchObject({ r: 0 });
      expect(JSON.parse(third.body)['violated-policies']).toEqual(['busy']);
      gates.open('a');
      expect(((await a) as Answer).status).toBe(200);
      await until(() => permits.inFlight === 1, 'the first permit released');
      const fourth = get(base, '/work?mode=ok');
      expect(((await fourth) as Answer).status).toBe(200);
      gates.open('b');
      expect(((await b) as Answer).status).toBe(200);
      await until(() => permits.inFlight === 0, 'every permit released');
    });

    it('releases the permit when the client goes away while the handler still runs', async () => {
      const permits = makePermits();
      running = await start(options(permits), gates);
      let hangUp!: () => void;
      const aborted = get(
        running.url,
        '/work?mode=wait&id=gone',
        new Promise<void>((resolve) => {
          hangUp = resolve;
        }),
      );
      await until(() => gates.entered.has('gone'), 'the handler running');
      expect(permits.inFlight).toBe(1);
      hangUp();
      expect(await aborted).toBe('aborted');
      await until(() => permits.inFlight === 0, 'the permit released on close');
      // Two fit again, so nothing leaked.
      const [x, y] = await Promise.all([get(running.url, '/work'), get(running.url, '/work')]);
      expect([(x as Answer).status, (y as Answer).status]).toEqual([200, 200]);
      await until(() => permits.inFlight === 0, 'every permit released');
    });

    it('releases the permit when the handler throws', async () => {
      const permits = makePermits();
      running = await start(options(permits), gates);
      for (let i = 0; i < 5; i++) {
        const answer = (await get(running.url, '/work?mode=throw')) as Answer;
        expect(answer.status).toBe(500);
      }
      await until(() => permits.inFlight === 0, 'every permit released after the errors');
    });

    it('answers a concurrency refusal with concurrencyStatusCode (503 for a global shed), never leaking', async () => {
      const permits = makePermits();
      running = await start(options(permits, { concurrencyStatusCode: 503, key: () => 'everyone' }), gates);
      const held = [get(running.url, '/work?mode=wait&id=1'), get(running.url, '/work?mode=wait&id=2')];
      await until(() => gates.entered.size === 2, 'two handlers running');
      const refused = (await get(running.url, '/work')) as Answer;
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toBeDefined();
      gates.openAll();
      await Promise.all(held);
      // Many at once: some refused, all admitted ones released.
      const burst = await Promise.all(Array.from({ length: 20 }, () => get(running?.url ?? '', '/work')));
      expect(burst.every((r) => (r as Answer).status === 200 || (r as Answer).status === 503)).toBe(true);
      await until(() => permits.inFlight === 0, 'every permit released after the burst');
    });
  });
}

describe('middleware options with a concurrency policy', () => {
  it('refuses skipFailedRequests beside a concurrency policy, and a concurrency policy beside `limiter`', () => {
    const permits = memoryPermitStore();
    const policies = [concurrency({ limit: 1, leaseMs: 1000 })];
    const thrown = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        return error;
      }
      return undefined;
    };
    const a = thrown(() => nodeRateLimit({ policies, permits, skipFailedRequests: true }));
    expect(isFloodgateError(a) && a.option).toBe('skipFailedRequests');
    const limiter = createLimiter({ policies, permits });
    const b = thrown(() => nodeRateLimit({ policies, limiter }));
    expect(isFloodgateError(b) && b.option).toBe('policies');
    const c = thrown(() => nodeRateLimit({ policies, permits, concurrencyStatusCode: 200 }));
    expect(isFloodgateError(c) && c.option).toBe('concurrencyStatusCode');
    // A limiter with a concurrency policy works as the middleware's own.
    expect(() => nodeRateLimit({ limiter })).not.toThrow();
  });
});
