import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { rateLimit as expressRateLimit } from '../src/http/express.js';
import { rateLimit as fastifyRateLimit } from '../src/http/fastify.js';
import { rateLimit as honoRateLimit } from '../src/http/hono.js';
import { rateLimit as koaRateLimit } from '../src/http/koa.js';
import { rateLimit as nodeRateLimit } from '../src/http/node.js';
import {
  createLimiter,
  fixedWindow,
  gcra,
  isFloodgateError,
  leasedLimiter,
  memoryStore,
  throttle,
} from '../src/index.js';
import { smoothLimiter } from '../src/smooth/index.js';
import {
  fromPg,
  fromPgListener,
  fromPostgres,
  fromPostgresListener,
  postgresPermitStore,
  postgresStore,
} from '../src/stores/postgres/index.js';
import { fromIoredis, fromNodeRedis, redisStore } from '../src/stores/redis/index.js';
import { sqliteStore } from '../src/stores/sqlite/index.js';
import { manualClock } from '../src/testing/index.js';

/**
 * Hostile values: every JS shape, numbers that break arithmetic, strings that break layouts and
 * queries, functions and symbols, objects posing as options or clients.
 */
const hostile = fc.oneof(
  fc.anything({ withBigInt: true, withDate: true, withMap: true, withSet: true, withNullPrototype: true }),
  fc.constantFrom(
    Number.NaN,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    -0,
    -1,
    0.5,
    2 ** 53,
    2 ** 31,
    1e308,
    '',
    '{',
    '}:',
    "'; DROP TABLE floodgate_state; --",
    'redis.call("FLUSHALL")',
    '\u0000',
    '__proto__',
    'x'.repeat(10_000),
    () => {},
    Symbol('s'),
  ),
  fc.record({ evalsha: fc.constant(() => Promise.resolve()), eval: fc.anything(), cluster: fc.anything() }),
  fc.record({
    query: fc.oneof(
      fc.constant(() => Promise.resolve([])),
      fc.anything(),
    ),
  }),
  fc.record({ prepare: fc.anything(), exec: fc.anything() }),
);

/** Runs fn: it may return or throw a FloodgateError, nothing else. */
function typedOnly(fn: () => unknown): void {
  try {
    const result = fn();
    if (result instanceof Promise) result.catch(() => {});
  } catch (error) {
    if (!isFloodgateError(error)) throw error;
  }
}

async function typedRejectionsOnly(fn: () => unknown): Promise<void> {
  try {
    await fn();
  } catch (error) {
    if (!isFloodgateError(error)) throw error;
  }
}

/** Structurally valid clients that never do I/O: constructors must not touch them. */
const quietRedis = { cluster: false, evalsha: () => Promise.resolve([]), eval: () => Promise.resolve([]) };
const quietPostgres = { query: () => Promise.resolve([]) };
const quietSqlite = { prepare: () => ({ run: () => ({}), get: () => undefined }), exec: () => undefined };

describe('fuzzing the stores, their adapters, leases, waiting and the HTTP factories', () => {
  it('store constructors and driver adapters: typed errors only, no I/O', () => {
    fc.assert(
      fc.property(hostile, hostile, (value, other) => {
        typedOnly(() => redisStore(value as never));
        typedOnly(() => redisStore({ client: value as never }));
        typedOnly(() => redisStore({ client: quietRedis, maxInFlight: value as never }));
        typedOnly(() =>
          redisStore({ client: quietRedis, maxBatchSize: value as never, expiryGraceMs: other as never }),
        );
        typedOnly(() => fromIoredis(value as never));
        typedOnly(() => fromNodeRedis(value as never));
        typedOnly(() => postgresStore(value as never));
        typedOnly(() => postgresStore({ client: value as never }));
        typedOnly(() => postgresStore({ client: quietPostgres, schema: value as never, table: other as never }));
        typedOnly(() =>
          postgresStore({ client: quietPostgres, concurrency: value as never, maxBatch: other as never }),
        );
        typedOnly(() => postgresStore({ client: quietPostgres, unlogged: value as never }));
        typedOnly(() => fromPg(value as never));
        typedOnly(() => fromPostgres(value as never));
        typedOnly(() => fromPgListener(value as never));
        typedOnly(() => fromPostgresListener(value as never));
        typedOnly(() => postgresPermitStore({ client: quietPostgres, listener: value as never }));
        typedOnly(() => sqliteStore(value as never));
        typedOnly(() => sqliteStore({ database: value as never }));
        typedOnly(() =>
          sqliteStore({ database: quietSqlite as never, table: value as never, busyTimeoutMs: other as never }),
        );
        typedOnly(() => memoryStore({ maxKeys: value as never }));
      }),
      { numRuns: 1500 },
    );
  });

  it('leases: typed errors and rejections only', async () => {
    const clock = manualClock();
    const limiter = createLimiter({ clock, policies: [gcra({ limit: 20, periodMs: 100 })] });
    const lease = leasedLimiter(limiter, { size: 5, clock });
    await fc.assert(
      fc.asyncProperty(hostile, hostile, async (value, key) => {
        clock.advanceUs(13);
        typedOnly(() => leasedLimiter(value as never, { size: 1 }));
        typedOnly(() => leasedLimiter(limiter, value as never));
        typedOnly(() => leasedLimiter(limiter, { size: value as never }));
        typedOnly(() => leasedLimiter(limiter, { size: 1, ttlMs: value as never, maxKeys: key as never }));
        typedOnly(() => leasedLimiter(limiter, { size: 1, clock: value as never }));
        await typedRejectionsOnly(() => lease.limit(key as never));
        await typedRejectionsOnly(() => lease.limit('k', value as never));
        await typedRejectionsOnly(() => lease.limit('k', { cost: value as never }));
      }),
      { numRuns: 800 },
    );
    await lease.close();
  });

  it('acquire, cancel, throttle and the smooth limiter: typed errors and rejections only', async () => {
    const clock = manualClock();
    const limiter = createLimiter({ clock, policies: [gcra({ limit: 1000, periodMs: 10 })] });
    await fc.assert(
      fc.asyncProperty(hostile, hostile, async (value, key) => {
        clock.advanceUs(101);
        await typedRejectionsOnly(() => limiter.acquire(key as never));
        await typedRejectionsOnly(() => limiter.acquire('k', value as never));
        await typedRejectionsOnly(() => limiter.acquire('k', { timeoutMs: value as never, cost: 1 }));
        await typedRejectionsOnly(() => limiter.acquire('k', { signal: value as never }));
        await typedRejectionsOnly(() => limiter.cancel('k', value as never));
        await typedRejectionsOnly(() => limiter.cancel(key as never, { cost: 1, policies: [], tatUs: [] }));
        typedOnly(() => throttle(value as never, { limiter }));
        typedOnly(() => throttle(() => 1, value as never));
        typedOnly(() => throttle(() => 1, { limiter, key: value as never }));
        typedOnly(() => throttle(() => 1, { limiter, maxQueue: value as never, timeoutMs: key as never }));
        typedOnly(() => throttle(() => 1, { policies: value as never }));
        typedOnly(() => smoothLimiter(value as never));
        typedOnly(() => smoothLimiter({ permitsPerSecond: value as never }));
        typedOnly(() =>
          smoothLimiter({ permitsPerSecond: 5, maxBurstSeconds: value as never, warmupMs: key as never }),
        );
        typedOnly(() => smoothLimiter({ permitsPerSecond: 5, warmupMs: 100, coldFactor: value as never }));
        const smooth = smoothLimiter({ permitsPerSecond: 1e6, clock });
        await typedRejectionsOnly(() => smooth.acquire(value as never));
        typedOnly(() => smooth.tryAcquire(value as never));
      }),
      { numRuns: 600 },
    );
  });

  it('HTTP rateLimit factories: typed errors only, whatever an option holds', () => {
    const factories = [nodeRateLimit, expressRateLimit, fastifyRateLimit, honoRateLimit, koaRateLimit] as ((
      options: unknown,
    ) => unknown)[];
    const options = [
      'policies',
      'limiter',
      'store',
      'prefix',
      'timeoutMs',
      'failure',
      'breaker',
      'clock',
      'key',
      'cost',
      'skip',
      'headers',
      'quotaUnit',
      'trustProxy',
      'statusCode',
      'degradedStatusCode',
      'message',
      'onDenied',
      'hook',
      'global',
    ];
    const policies = [fixedWindow({ limit: 5, windowMs: 1000 })];
    fc.assert(
      fc.property(hostile, fc.constantFrom(...options), (value, name) => {
        for (const factory of factories) {
          typedOnly(() => factory(value));
          typedOnly(() => factory({ policies, [name]: value }));
        }
      }),
      { numRuns: 1500 },
    );
  });

  it('a hostile value really reaches validation (the harness itself is not a no-op)', () => {
    expect(() => redisStore({ client: quietRedis, maxInFlight: -1 })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'maxInFlight' }),
    );
    expect(() => nodeRateLimit({ policies: [gcra({ limit: 1, periodMs: 1 })], statusCode: 'x' } as never)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });
});
