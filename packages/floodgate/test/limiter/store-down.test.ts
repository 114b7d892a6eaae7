import { createServer } from 'node:http';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rateLimit } from '../../src/http/node.js';
import { createLimiter, fixedWindow, isFloodgateError, type LimiterEvents } from '../../src/index.js';
import { DEFAULT_STORE_TIMEOUT_MS } from '../../src/limiter/validation.js';
import { fromIoredis, fromNodeRedis, redisStore } from '../../src/stores/redis/index.js';
import { freePorts } from '../free-ports.js';
import { collectWarnings } from '../http/warnings.js';

// A Redis that is down: a real client on a port nothing listens on. With its default retries ioredis
// holds each command for over a minute; the limiter's default timeout answers within a second.

const policies = fixedWindow({ limit: 10, windowMs: 60_000 });
/** A timeout fires on a busy machine's event loop: allow it this much lateness. */
const SLACK_MS = 2000;

let port: number;
let io: Redis;
let nodeRedis: ReturnType<typeof createClient>;

beforeAll(async () => {
  [port] = (await freePorts(1)) as [number];
  io = new Redis({ host: '127.0.0.1', port });
  io.on('error', () => {});
  // Adapted as an application does, as soon as it is created: the adapter sees its connection errors.
  fromIoredis(io);
  nodeRedis = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: 50 } });
  nodeRedis.on('error', () => {});
  fromNodeRedis(nodeRedis);
  // node-redis' connect() waits while it keeps reconnecting: the store is given the client meanwhile.
  void nodeRedis.connect().catch(() => {});
  // Let both clients meet the refused connection once.
  await new Promise((resolve) => setTimeout(resolve, 200));
});

afterAll(() => {
  io.disconnect();
  nodeRedis.destroy?.();
});

describe('a Redis store that is down', () => {
  it('answers within the default timeout, saying the connection is refused (ioredis)', async () => {
    const limiter = createLimiter({ store: redisStore({ client: fromIoredis(io) }), policies });
    expect(limiter.timeoutMs).toBe(DEFAULT_STORE_TIMEOUT_MS);
    const started = performance.now();
    const error = await limiter.limit('k').catch((e: unknown) => e);
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(DEFAULT_STORE_TIMEOUT_MS - 5);
    expect(took).toBeLessThan(DEFAULT_STORE_TIMEOUT_MS + SLACK_MS);
    expect(isFloodgateError(error) && error.code).toBe('ERR_TIMEOUT');
    expect((error as Error).message).toBe(
      `the redis store did not answer within 1000 ms: connection refused to 127.0.0.1:${port}`,
    );
  });

  it('says "connection refused to host:port" when the client gives up at once (ioredis, no offline queue)', async () => {
    const client = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: false });
    client.on('error', () => {});
    const store = redisStore({ client: fromIoredis(client) });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const limiter = createLimiter({ store, policies });
    const error = await limiter.limit('k').catch((e: unknown) => e);
    client.disconnect();
    expect(isFloodgateError(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
    expect((error as Error).message).toMatch(
      new RegExp(`^the redis store failed: connection refused to 127\\.0\\.0\\.1:${port} \\(Stream isn't writeable`),
    );
  });

  it('says "connection refused to host:port" with node-redis too', async () => {
    const limiter = createLimiter({
      store: redisStore({ client: fromNodeRedis(nodeRedis) }),
      policies,
      timeoutMs: 300,
    });
    const error = await limiter.limit('k').catch((e: unknown) => e);
    expect(isFloodgateError(error) && error.code).toMatch(/^ERR_(TIMEOUT|STORE_UNAVAILABLE)$/);
    expect((error as Error).message).toContain(`connection refused to 127.0.0.1:${port}`);
  });

  it('can be told to wait without a timer (timeoutMs: false)', () => {
    const limiter = createLimiter({ store: redisStore({ client: fromIoredis(io) }), policies, timeoutMs: false });
    expect(limiter.timeoutMs).toBeUndefined();
    // A store that decides synchronously gets no timer either.
    expect(createLimiter({ policies }).timeoutMs).toBeUndefined();
  });

  it("reports each breaker opening once, with the error and the failure policy, and answers 'open'", async () => {
    const limiter = createLimiter({
      store: redisStore({ client: fromIoredis(io) }),
      policies,
      failure: 'open',
      timeoutMs: 200,
      breaker: { failureThreshold: 2, cooldownMs: 60_000 },
    });
    const events: LimiterEvents['breaker'][] = [];
    limiter.on('breaker', (event) => events.push(event));
    const decisions = [];
    for (let i = 0; i < 6; i++) decisions.push(await limiter.limit('k'));
    expect(decisions.map((d) => [d.allowed, d.reason])).toEqual(Array(6).fill([true, 'degraded']));
    expect(events.map((e) => [e.state, e.failure, e.error?.code])).toEqual([['open', 'open', 'ERR_TIMEOUT']]);
    expect(events[0]?.error?.message).toContain(`connection refused to 127.0.0.1:${port}`);
  });
});

describe('the middleware with a Redis store that is down', () => {
  it('admits within the timeout and logs one line per breaker opening, not one per request', async () => {
    const warnings = collectWarnings();
    const limit = rateLimit({
      policies,
      store: redisStore({ client: fromIoredis(io) }),
      timeoutMs: 200,
      breaker: { failureThreshold: 2, cooldownMs: 400 },
    });
    const server = createServer(limit.wrap((_req, res) => res.end('ok')));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
    try {
      const statuses: number[] = [];
      const started = performance.now();
      for (let i = 0; i < 8; i++) statuses.push((await fetch(url)).status);
      await warnings.flush();
      expect(statuses).toEqual(Array(8).fill(200));
      // Two requests wait for the timeout, the others are answered by the open breaker at once.
      expect(performance.now() - started).toBeLessThan(2 * 200 + SLACK_MS);
      expect(warnings.codes()).toEqual(['FLOODGATE_STORE_FAILING']);
      expect(warnings.warnings[0]?.message).toBe(
        `the redis store is failing: the redis store did not answer within 200 ms: connection refused to 127.0.0.1:${port}; until it answers again, requests are admitted without limiting (failure: 'open')`,
      );
      // After the cool-down a probe fails: the breaker opens again, one more line.
      await new Promise((resolve) => setTimeout(resolve, 450));
      for (let i = 0; i < 4; i++) statuses.push((await fetch(url)).status);
      await warnings.flush();
      expect(warnings.codes()).toEqual(['FLOODGATE_STORE_FAILING', 'FLOODGATE_STORE_FAILING']);
    } finally {
      warnings.stop();
      server.close();
    }
  });
});
