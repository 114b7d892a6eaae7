import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { parseList } from 'structured-headers';
import { describe, expect, it } from 'vitest';
import { rateLimit as fastifyRateLimit } from '../../src/http/fastify.js';
import { windowSeconds } from '../../src/http/headers.js';
import { createHttpRateLimiter, type RateLimitOptions, type RequestAccess } from '../../src/http/index.js';
import { rateLimit as nodeRateLimit } from '../../src/http/node.js';
import {
  createLimiter,
  fixedWindow,
  gcra,
  isFloodgateError,
  leakyBucket,
  memoryStore,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { manualClock } from '../../src/testing/index.js';
import { collectWarnings } from './warnings.js';

/** Requests as plain objects: the core needs only a peer address and headers. */
interface FakeRequest {
  peer?: string;
  headers?: Record<string, string>;
}
const access: RequestAccess<FakeRequest> = {
  peer: (request) => request.peer,
  header: (request, name) => request.headers?.[name],
};
const client = { peer: '192.0.2.1' };
const perMinute = gcra({ limit: 2, periodMs: 60_000, name: 'per-minute' });

function optionError(options: RateLimitOptions<FakeRequest>): string | undefined {
  try {
    createHttpRateLimiter(options, access);
  } catch (error) {
    expect(isFloodgateError(error)).toBe(true);
    return isFloodgateError(error) ? error.option : undefined;
  }
  return expect.unreachable('options were accepted');
}

describe('options', () => {
  it('are checked when the middleware is built, naming the option at fault', () => {
    const policies = perMinute;
    expect(optionError({})).toBe('policies');
    expect(optionError({ policies, headers: 'draft-9' as 'ietf' })).toBe('headers');
    expect(optionError({ policies, statusCode: 200 })).toBe('statusCode');
    expect(optionError({ policies, degradedStatusCode: 600 })).toBe('degradedStatusCode');
    expect(optionError({ policies, ipv6PrefixLength: 129 })).toBe('ipv6PrefixLength');
    expect(optionError({ policies, ipv4PrefixLength: 8.5 })).toBe('ipv4PrefixLength');
    expect(optionError({ policies, cost: -1 })).toBe('cost');
    expect(optionError({ policies, key: 'user' as never })).toBe('key');
    expect(optionError({ policies, skip: true as never })).toBe('skip');
    expect(optionError({ policies, quotaUnit: 'Bytes!' })).toBe('quotaUnit');
    expect(optionError({ policies, trustProxy: { hops: 0 } })).toBe('trustProxy.hops');
    expect(optionError({ policies, trustProxy: { cidrs: ['10.0.0.0/40'] } })).toBe('trustProxy.cidrs[0]');
    expect(optionError({ policies, limiter: createLimiter({ policies }), store: memoryStore() })).toBe('store');
    expect(optionError({ policies, limiter: {} as never })).toBe('limiter');
    expect(optionError({ policies, message: null as never })).toBe('message');
    expect(optionError({ policies, message: 42 as never })).toBe('message');
    expect(optionError({ policies, message: { big: 10n } })).toBe('message');
    expect(optionError({ policies, skipFailedRequests: 'yes' as never })).toBe('skipFailedRequests');
    expect(optionError({ policies, skipSuccessfulRequests: 1 as never })).toBe('skipSuccessfulRequests');
    expect(optionError({ policies, requestWasSuccessful: true as never })).toBe('requestWasSuccessful');
    // A queue-mode leaky bucket has booked later calls behind a request by the time it could be given back.
    const queue = leakyBucket({ capacity: 2, leakPerSecond: 1, mode: 'queue' });
    expect(optionError({ policies: queue, skipSuccessfulRequests: true })).toBe('skipSuccessfulRequests');
    expect(optionError({ policies: [perMinute, queue], skipFailedRequests: true })).toBe('skipFailedRequests');
  });

  it('refuses per-request policies that cannot give a request back, when the request comes', async () => {
    const queue = [leakyBucket({ capacity: 2, leakPerSecond: 1, mode: 'queue' })];
    const decide = createHttpRateLimiter({ policies: () => queue, skipFailedRequests: true }, access);
    await expect(decide(client)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'skipFailedRequests' });
  });
});

describe('the core', () => {
  it('sends a caller limiter the middleware policies with each call', async () => {
    const limiter = createLimiter({ store: memoryStore(), clock: manualClock() });
    const decide = createHttpRateLimiter({ limiter, policies: perMinute }, access);
    expect((await decide(client))?.headers).toContain('"per-minute";r=1;t=30');
    expect((await limiter.status('192.0.2.1', { policies: perMinute })).remaining).toBe(1);
  });

  it('uses the caller limiter policies when it has its own', async () => {
    const limiter = createLimiter({ policies: perMinute, clock: manualClock() });
    const decide = createHttpRateLimiter({ limiter }, access);
    expect((await decide(client))?.allowed).toBe(true);
    expect((await decide(client))?.allowed).toBe(true);
    const denied = await decide(client);
    expect(denied?.status).toBe(429);
    expect(JSON.parse(denied?.body ?? '{}')['violated-policies']).toEqual(['per-minute']);
  });

  it('advertises the quota unit when costs are not requests', async () => {
    const decide = createHttpRateLimiter(
      {
        policies: tokenBucket({ capacity: 1e6, refillAmount: 1e5, refillIntervalMs: 1000, name: 'bytes' }),
        quotaUnit: 'content-bytes',
        cost: 5000,
      },
      access,
    );
    const outcome = await decide(client);
    const policy = parseList(outcome?.headers[1] ?? '');
    expect(String(policy[0]?.[0])).toBe('bytes');
    expect(Object.fromEntries(policy[0]?.[1] ?? [])).toEqual({ q: 1e6, w: 10, qu: 'content-bytes' });
    expect(outcome?.headers[3]).toBe('"bytes";r=995000;t=1');
  });

  it('holds a request admitted in queue mode until its turn comes', async () => {
    const clock = manualClock();
    const decide = createHttpRateLimiter(
      { policies: leakyBucket({ capacity: 2, leakPerSecond: 1, mode: 'queue', name: 'queue' }), clock },
      access,
    );
    expect((await decide(client))?.allowed).toBe(true);
    let released = false;
    const second = decide(client).then((outcome) => {
      released = true;
      return outcome;
    });
    // The decision itself is synchronous on the memory store; only the queue delay is awaited.
    for (let i = 0; i < 5 && clock.pending === 0; i++) await Promise.resolve();
    expect(clock.pending).toBe(1);
    expect(released).toBe(false);
    clock.advance(1000);
    expect((await second)?.allowed).toBe(true);
    expect(released).toBe(true);
  });

  it('rejects when the caller limiter throws on a store failure, for the framework to report', async () => {
    // A Redis client on a port nothing listens on: every call fails.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const redis = new Redis({ host: '127.0.0.1', port, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    redis.on('error', () => {});
    try {
      const store = redisStore({ client: fromIoredis(redis) });
      const limiter = createLimiter({ store, policies: perMinute, failure: 'throw', breaker: false });
      const decide = createHttpRateLimiter({ limiter }, access);
      await expect(decide(client)).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    } finally {
      redis.disconnect();
    }
  });

  it('puts requests without a client address on one shared key, warning once', async () => {
    const warnings = collectWarnings();
    try {
      const decide = createHttpRateLimiter({ policies: perMinute, clock: manualClock() }, access);
      expect((await decide({}))?.key).toBe('unknown');
      expect((await decide({ peer: '' }))?.allowed).toBe(true);
      const third = await decide({ peer: 'not an address' });
      expect([third?.key, third?.status]).toEqual(['unknown', 429]);
      // A client with an address keeps its own key.
      expect((await decide(client))?.allowed).toBe(true);
      await warnings.flush();
      expect(warnings.codes()).toEqual(['FLOODGATE_UNKNOWN_ADDRESS']);
      const keyed = createHttpRateLimiter({ policies: perMinute, key: () => 'user-1' }, access);
      expect((await keyed({}))?.key).toBe('user-1');
    } finally {
      warnings.stop();
    }
  });

  it('keys clients per IPv4 prefix when asked', async () => {
    const decide = createHttpRateLimiter({ policies: perMinute, ipv4PrefixLength: 24 }, access);
    await decide({ peer: '198.51.100.1' });
    await decide({ peer: '198.51.100.200' });
    expect((await decide({ peer: '198.51.100.77' }))?.status).toBe(429);
    expect((await decide({ peer: '198.51.101.1' }))?.allowed).toBe(true);
  });
});

describe('windowSeconds', () => {
  it('is the time from fully spent to untouched, in whole seconds rounded up', () => {
    expect(windowSeconds(gcra({ limit: 100, periodMs: 60_000 }))).toBe(60);
    expect(windowSeconds(gcra({ limit: 100, periodMs: 60_000, burst: 10 }))).toBe(6);
    expect(windowSeconds(tokenBucket({ capacity: 10, refillAmount: 3, refillIntervalMs: 1000 }))).toBe(4);
    expect(
      windowSeconds(tokenBucket({ capacity: 10, refillAmount: 3, refillIntervalMs: 1000, refill: 'interval' })),
    ).toBe(4);
    expect(windowSeconds(leakyBucket({ capacity: 5, leakPerSecond: 2 }))).toBe(3);
    expect(windowSeconds(fixedWindow({ limit: 5, windowMs: 1500 }))).toBe(2);
    expect(windowSeconds(slidingWindow({ limit: 5, windowMs: 3_600_000 }))).toBe(3600);
    expect(windowSeconds(slidingLog({ limit: 5, windowMs: 10 }))).toBe(1);
  });
});

function serve(server: ReturnType<typeof createServer>): Promise<string> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)),
  );
}

describe('node:http wrap', () => {
  it('answers 500 and emits a warning when deciding fails', async () => {
    const limit = nodeRateLimit({
      policies: perMinute,
      key: (request: IncomingMessage) => {
        throw new Error(`no user for ${request.url}`);
      },
    });
    const server = createServer(limit.wrap((_request, response) => response.end('never')));
    const url = await serve(server);
    const warned = new Promise<Error>((resolve) => process.once('warning', resolve));
    try {
      const response = await fetch(`${url}/private`);
      expect(response.status).toBe(500);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect((await warned).message).toBe('no user for /private');
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});

describe('fastify', () => {
  it('with global: false limits only routes that ask for it', async () => {
    const app = Fastify();
    await app.register(fastifyRateLimit({ policies: perMinute, global: false }));
    app.get('/free', async () => 'free');
    app.get(
      '/limited',
      { config: { rateLimit: { policies: gcra({ limit: 1, periodMs: 60_000, name: 'one' }) } } },
      async () => 'limited',
    );
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    try {
      for (let i = 0; i < 3; i++) {
        const free = await fetch(`${url}/free`);
        expect(free.status).toBe(200);
        expect(free.headers.get('ratelimit')).toBeNull();
      }
      expect((await fetch(`${url}/limited`)).headers.get('ratelimit')).toBe('"one";r=0;t=60');
      expect((await fetch(`${url}/limited`)).status).toBe(429);
    } finally {
      await app.close();
    }
  });

  it('rejects an unknown hook naming the route', () => {
    expect(() => fastifyRateLimit({ policies: perMinute, hook: 'onSend' as 'onRequest' })).toThrow(/hook/);
  });
});
