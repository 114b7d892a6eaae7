import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import {
  SkipThrottle,
  Throttle,
  ThrottlerGuard,
  ThrottlerModule,
  type ThrottlerStorage,
  ThrottlerStorageService,
} from '@nestjs/throttler';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, expectTypeOf, it, vi } from 'vitest';
import { type FloodgateThrottlerStorage, throttlerStorage } from '../../src/http/nestjs.js';
import { isFloodgateError, memoryStore, type Store } from '../../src/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { type ManualClock, manualClock, uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from '../stores/redis/servers.js';
import { connect, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';
import { PLATFORMS, type Platform, type RunningApp, startApp } from './apps.js';

// The storage for @nestjs/throttler: its decorators and guard unchanged, the hits counted by a floodgate
// store. Compared with the throttler's own in-memory storage, then run in real Nest apps.

const START_MS = Date.UTC(2030, 0, 1);
const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const redis = redisUp ? new Redis({ host: REDIS_HOST, port: REDIS_PORT }) : undefined;
const postgresUp = await requirePostgres();
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  redis?.disconnect();
});

interface StoreCase {
  name: string;
  make(): Promise<Store>;
}
const STORES: StoreCase[] = [
  { name: 'memory', make: async () => memoryStore() },
  ...(redis === undefined ? [] : [{ name: 'redis', make: async () => redisStore({ client: fromIoredis(redis) }) }]),
];

async function postgres(): Promise<Store> {
  const connection = connect('pg', 8);
  const schema = uniqueSchema('throttler');
  const store = postgresStore({ client: connection.client, schema, table: 'hits' });
  await store.migrate();
  cleanups.push(async () => {
    await store.close();
    await connection.sql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await connection.close();
  });
  return store;
}

describe('throttlerStorage', () => {
  it("is a ThrottlerStorage as @nestjs/throttler's current major version defines it", () => {
    expectTypeOf(throttlerStorage()).toExtend<ThrottlerStorage>();
    expectTypeOf<FloodgateThrottlerStorage['increment']>().toEqualTypeOf<ThrottlerStorage['increment']>();
  });

  it('refuses what no policy can count, with a typed error naming the field', async () => {
    const storage = throttlerStorage();
    for (const [ttl, limit, option] of [
      [0, 5, 'windowMs'],
      [1000, 0, 'limit'],
      [Number.NaN, 5, 'windowMs'],
      [1000, 2.5e12, 'limit'],
    ] as const) {
      const error = await storage.increment('k', ttl, limit, 0, 'default').catch((e: unknown) => e);
      expect(isFloodgateError(error) && error.code).toBe('ERR_INVALID_POLICY');
      expect(isFloodgateError(error) && error.option).toContain(option);
    }
    // Any throttler name works: names that are not policy names get a stable one of their own.
    expect((await storage.increment('k', 1000, 1, 0, 'Per Second!')).isBlocked).toBe(false);
    expect((await storage.increment('k', 1000, 1, 0, 'Per Second!')).isBlocked).toBe(true);
    expect((await storage.increment('k', 1000, 1, 0, 'Per Minute!')).isBlocked).toBe(false);
  });

  // Throttlers as apps configure them; `blockDuration` defaults to `ttl` in the throttler's guard.
  const THROTTLERS = [
    { name: 'short', ttl: 1000, limit: 3, blockDuration: 1000 },
    { name: 'long', ttl: 10_000, limit: 5, blockDuration: 0 },
    { name: 'penalty', ttl: 2000, limit: 2, blockDuration: 7000 },
  ];

  describe.each(STORES.map((s) => [s.name, s] as [string, StoreCase]))(
    "decides like the throttler's in-memory storage (%s)",
    (_name, storeCase) => {
      afterEach(() => {
        vi.useRealTimers();
      });

      it('for random hits over time, under each throttler', async () => {
        const step = fc.record({
          advanceMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2500 })),
          client: fc.constantFrom('a', 'b'),
          throttler: fc.constantFrom(...THROTTLERS),
        });
        await fc.assert(
          fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 60 }), async (steps) => {
            vi.useFakeTimers({ now: START_MS, toFake: ['Date', 'setInterval', 'clearInterval'] });
            const theirs = new ThrottlerStorageService();
            const clock = manualClock({ startMs: START_MS });
            const ours = throttlerStorage({ store: await storeCase.make(), clock, prefix: uniquePrefix('throttler') });
            try {
              for (const { advanceMs, client, throttler } of steps) {
                vi.advanceTimersByTime(advanceMs);
                clock.advance(advanceMs);
                // The throttler's guard hashes the throttler name into the key.
                const key = `${client}-${throttler.name}`;
                const args = [key, throttler.ttl, throttler.limit, throttler.blockDuration, throttler.name] as const;
                const expected = await theirs.increment(...args);
                const actual = await ours.increment(...args);
                expect(actual.isBlocked).toBe(expected.isBlocked);
                if (expected.isBlocked) expect(actual.timeToBlockExpire).toBe(expected.timeToBlockExpire);
                else expect(actual.totalHits).toBe(expected.totalHits);
              }
            } finally {
              theirs.onApplicationShutdown();
              vi.useRealTimers();
            }
          }),
          { numRuns: storeCase.name === 'memory' ? 60 : 15, seed: 17 },
        );
      });
    },
  );

  it('with a block shorter than ttl keeps counting the hits it blocked for, which is stricter', async () => {
    const clock = manualClock({ startMs: START_MS });
    const storage = throttlerStorage({ clock });
    const hit = () => storage.increment('k', 60_000, 2, 5000, 'default');
    expect((await hit()).isBlocked).toBe(false);
    expect((await hit()).isBlocked).toBe(false);
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 60 });
    clock.advance(5000);
    // The in-memory storage would start over here; the two hits are still within the minute.
    expect((await hit()).isBlocked).toBe(true);
    clock.advance(55_000);
    expect(await hit()).toEqual({ totalHits: 1, timeToExpire: 60, isBlocked: false, timeToBlockExpire: 0 });
  });

  it('counts limits above the largest sliding log with the sliding-window counter', async () => {
    const clock = manualClock({ startMs: START_MS });
    const storage = throttlerStorage({ clock });
    for (let i = 1; i <= 2000; i++) {
      const record = await storage.increment('k', 60_000, 2000, 0, 'bulk');
      if (record.isBlocked || record.totalHits !== i) expect.unreachable(`hit ${i}: ${JSON.stringify(record)}`);
    }
    expect((await storage.increment('k', 60_000, 2000, 0, 'bulk')).isBlocked).toBe(true);
  });
});

function throttledApp(storage: ThrottlerStorage) {
  @Controller()
  class Api {
    @Get('a')
    a() {
      return { ok: true };
    }

    @Throttle({ short: { limit: 1, ttl: 1000 } })
    @Get('strict')
    strict() {
      return { ok: true };
    }

    // SkipThrottle() alone names the 'default' throttler: these are named.
    @SkipThrottle({ short: true, long: true })
    @Get('free')
    free() {
      return { ok: true };
    }

    @SkipThrottle({ short: true })
    @Get('burst')
    burst() {
      return { ok: true };
    }
  }

  @Module({
    imports: [
      ThrottlerModule.forRoot({
        throttlers: [
          { name: 'short', ttl: 1000, limit: 2 },
          { name: 'long', ttl: 60_000, limit: 3 },
        ],
        storage,
      }),
    ],
    controllers: [Api],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })
  class AppModule {}
  return AppModule;
}

const headersOf = (response: Response, names: string[]) =>
  Object.fromEntries(names.map((n) => [n, response.headers.get(n)]));

describe.each(PLATFORMS.flatMap((platform) => STORES.map((s) => [`${platform}, ${s.name}`, platform, s] as const)))(
  'ThrottlerModule with throttlerStorage on %s',
  (_name, platform: Platform, storeCase) => {
    let running: RunningApp | undefined;
    let clock: ManualClock;
    afterEach(async () => {
      await running?.close();
      running = undefined;
    });
    const start = async () => {
      clock = manualClock({ startMs: START_MS });
      const storage = throttlerStorage({
        store: await storeCase.make(),
        clock,
        prefix: uniquePrefix('nest-throttler'),
      });
      running = await startApp(throttledApp(storage), platform);
      return running;
    };

    it("keeps the throttler's decorators, headers and exception", async () => {
      const app = await start();
      const get = (path: string) => fetch(`${app.url}${path}`);
      const first = await get('/a');
      expect(first.status).toBe(200);
      expect(
        headersOf(first, [
          'x-ratelimit-limit-short',
          'x-ratelimit-remaining-short',
          'x-ratelimit-limit-long',
          'x-ratelimit-remaining-long',
        ]),
      ).toEqual({
        'x-ratelimit-limit-short': '2',
        'x-ratelimit-remaining-short': '1',
        'x-ratelimit-limit-long': '3',
        'x-ratelimit-remaining-long': '2',
      });
      expect((await get('/a')).status).toBe(200);
      const denied = await get('/a');
      expect(denied.status).toBe(429);
      expect(denied.headers.get('retry-after-short')).toBe('1');
      expect(await denied.json()).toEqual({ statusCode: 429, message: 'ThrottlerException: Too Many Requests' });
      clock.advance(1000);
      expect((await get('/a')).headers.get('x-ratelimit-remaining-long')).toBe('0');
      clock.advance(1000);
      const long = await get('/a');
      expect(long.status).toBe(429);
      // Blocked for blockDuration (= ttl) from the refused hit.
      expect(long.headers.get('retry-after-long')).toBe('60');
      // @Throttle overrides a throttler for a route; @SkipThrottle skips all or one.
      expect((await get('/strict')).status).toBe(200);
      expect((await get('/strict')).status).toBe(429);
      for (let i = 0; i < 4; i++) expect((await get('/free')).status).toBe(200);
      const burst = await Promise.all([1, 2, 3, 4].map(() => get('/burst')));
      expect(burst.map((r) => r.status).sort()).toEqual([200, 200, 200, 429]);
    });
  },
);

// Two instances of an app, on the two platforms, share one store: together they admit exactly the limit,
// where the in-memory storage would give each instance a limit of its own.
const SHARED: StoreCase[] = [
  ...(redis === undefined ? [] : [{ name: 'redis', make: async () => redisStore({ client: fromIoredis(redis) }) }]),
  ...(postgresUp ? [{ name: 'postgres', make: postgres }] : []),
];

describe.each(SHARED.map((s) => [s.name, s] as [string, StoreCase]))(
  'two app instances on one %s store',
  (_name, storeCase) => {
    it('admit exactly the limit between them, under concurrent requests', async () => {
      const prefix = uniquePrefix('nest-fleet');
      const store = await storeCase.make();
      const apps: RunningApp[] = [];
      try {
        for (const platform of PLATFORMS) {
          apps.push(await startApp(throttledApp(throttlerStorage({ store, prefix })), platform));
        }
        // /burst skips the short throttler: the long one admits 3 per minute, whichever instance is asked.
        const answers = await Promise.all(
          Array.from({ length: 24 }, (_, i) => fetch(`${apps[i % 2]?.url}/burst`).then((r) => r.status)),
        );
        expect(answers.filter((s) => s === 200)).toHaveLength(3);
        expect(answers.filter((s) => s === 429)).toHaveLength(21);
      } finally {
        await Promise.all(apps.map((app) => app.close()));
      }
    });
  },
);
