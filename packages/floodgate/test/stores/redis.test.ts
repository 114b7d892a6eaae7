import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLimiter,
  encodeKey,
  fixedWindow,
  gcra,
  isFloodgateError,
  slidingLog,
  storageKey,
  tokenBucket,
} from '../../src/index.js';
import { type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { manualClock, runConformanceSuite, uniquePrefix } from '../../src/testing/index.js';
import { connectSingle, DRIVERS, holdStore } from './redis/clients.js';
import { HOSTILE_KEYS } from './redis/hostile-keys.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

/** The adapted client, counting the script calls that reach it. */
function counting(client: RedisScriptClient): RedisScriptClient & { calls: number } {
  const counted = {
    cluster: client.cluster,
    calls: 0,
    evalsha: (sha: string, keys: readonly string[], args: readonly string[]) => {
      counted.calls++;
      return client.evalsha(sha, keys, args);
    },
    eval: (script: string, keys: readonly string[], args: readonly string[]) => {
      counted.calls++;
      return client.eval(script, keys, args);
    },
  };
  return counted;
}

function expectError(fn: () => unknown, code: string, option: string): void {
  try {
    fn();
  } catch (error) {
    expect(isFloodgateError(error) && [error.code, error.option]).toEqual([code, option]);
    return;
  }
  throw new Error(`expected ${code} on ${option}`);
}

describe.skipIf(!available)('redis store', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
  });
  afterAll(async () => {
    await raw?.quit();
  });

  for (const driver of DRIVERS) {
    describe(`single node, ${driver}`, () => {
      const held = holdStore(() => connectSingle(driver));

      it('the adapter reports a single-node client', () => {
        expect(held.connection.client.cluster).toBe(false);
      });

      runConformanceSuite({ describe, it }, { store: () => held.store, randomRuns: 16 });

      it('decides calls queued behind a script call together, in arrival order per key', async () => {
        const client = counting(held.connection.client);
        const batching = redisStore({ client, maxInFlight: 1 });
        const limiter = createLimiter({
          store: batching,
          policies: [fixedWindow({ limit: 3, windowMs: 60_000, align: 'first-request' })],
          prefix: uniquePrefix(),
        });
        const ops = ['limit', 'limit', 'limit', 'limit', 'reset', 'limit', 'limit', 'limit', 'limit'] as const;
        const results = await Promise.all(
          ops.map((op) =>
            op === 'reset' ? limiter.reset('k').then(() => 'reset') : limiter.limit('k').then((d) => d.allowed),
          ),
        );
        expect(results).toEqual([true, true, true, false, 'reset', true, true, true, false]);
        // The first call went alone (no waiting at low load); the rest rode together in the next one.
        expect(client.calls).toBe(2);

        const many = await Promise.all(Array.from({ length: 1000 }, (_, i) => limiter.limit(`key-${i % 50}`)));
        expect(many.filter((d) => d.allowed).length).toBe(150);
        expect(many.slice(0, 150).every((d) => d.allowed)).toBe(true);
        expect(client.calls).toBeLessThan(2 + 10);
        await batching.close();
      });

      it('keeps arrival order per key with several script calls pipelined', async () => {
        const client = counting(held.connection.client);
        const pipelined = redisStore({ client, maxInFlight: 3, maxBatchSize: 2 });
        const limiter = createLimiter({
          store: pipelined,
          policies: [slidingLog({ limit: 5, windowMs: 60_000 })],
          prefix: uniquePrefix(),
        });
        const results = await Promise.all(
          Array.from({ length: 40 }, (_, i) =>
            i === 20 ? limiter.reset('k').then(() => 'reset') : limiter.limit('k').then((d) => d.allowed),
          ),
        );
        const expected = [...Array(5).fill(true), ...Array(15).fill(false), 'reset', ...Array(5).fill(true)];
        expect(results).toEqual([...expected, ...Array(14).fill(false)]);
        expect(client.calls).toBeGreaterThan(3);
        expect(client.calls).toBeLessThan(40);
        await pipelined.close();
      });

      it('hostile keys work and never collide', async () => {
        const prefix = uniquePrefix('hostile');
        const limiter = createLimiter({
          store: held.store,
          policies: [
            fixedWindow({ limit: 1, windowMs: 60_000, align: 'first-request', name: 'w' }),
            slidingLog({ limit: 2, windowMs: 60_000, name: 'l' }),
          ],
          prefix,
        });
        expect((await Promise.all(HOSTILE_KEYS.map((key) => limiter.limit(key)))).every((d) => d.allowed)).toBe(true);
        expect((await Promise.all(HOSTILE_KEYS.map((key) => limiter.limit(key)))).some((d) => d.allowed)).toBe(false);
        for (const key of HOSTILE_KEYS) {
          expect(await raw.exists(storageKey(prefix, encodeKey(key), 'w'))).toBe(1);
          await limiter.reset(key);
          expect(await raw.exists(storageKey(prefix, encodeKey(key), 'w'))).toBe(0);
        }
      });
    });
  }

  describe('single node, ioredis, every call through the full script (no single-call fast path)', () => {
    const held = holdStore(() => connectSingle('ioredis'), { fastPath: false });
    runConformanceSuite({ describe, it }, { store: () => held.store, randomRuns: 8, seed: 500 });
  });

  describe('storage', () => {
    const held = holdStore(() => connectSingle('ioredis'));

    it('a GCRA key is one integer with an expiry at its untouched time, rounded up', async () => {
      const prefix = uniquePrefix();
      const limiter = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 3, periodMs: 1000, name: 'g' })],
        prefix,
      });
      const decision = await limiter.limit('k');
      expect(decision.resetAfterMs).toBe(334);
      const key = storageKey(prefix, 'k', 'g');
      expect(await raw.get(key)).toMatch(/^[0-9]{16}$/);
      expect(await raw.object('ENCODING', key)).toBe('int');
      const ttl = await raw.pttl(key);
      expect(ttl).toBeGreaterThan(334 - 50);
      expect(ttl).toBeLessThanOrEqual(335);
    });

    it('on the caller’s clock, keys get expiryGraceMs more (Redis expires them on its own clock)', async () => {
      const prefix = uniquePrefix();
      const clock = manualClock({ startMs: Date.now() });
      clock.advanceUs(123);
      const policies = [gcra({ limit: 3, periodMs: 1000, name: 'g' })];
      const key = storageKey(prefix, 'k', 'g');
      for (const [graceMs, limiterStore] of [
        [5000, held.store],
        [0, redisStore({ client: held.connection.client, expiryGraceMs: 0 })],
      ] as const) {
        const limiter = createLimiter({ store: limiterStore, policies, prefix, clock });
        await limiter.reset('k');
        await limiter.limit('k');
        expect(await raw.get(key)).toBe(String(clock.nowUs() + 333_334));
        const ttl = await raw.pttl(key);
        expect(ttl).toBeGreaterThan(334 + graceMs - 50);
        expect(ttl).toBeLessThanOrEqual(335 + graceMs);
      }
    });

    it('blocked keys and other algorithms keep their expiry too', async () => {
      const prefix = uniquePrefix();
      const limiter = createLimiter({
        store: held.store,
        policies: [tokenBucket({ capacity: 1, refillAmount: 1, refillIntervalMs: 1000, blockMs: 60_000, name: 't' })],
        prefix,
      });
      await limiter.limit('k');
      const denied = await limiter.limit('k');
      expect([denied.allowed, denied.retryAfterMs]).toEqual([false, 60_000]);
      const ttl = await raw.pttl(storageKey(prefix, 'k', 't'));
      expect(ttl).toBeGreaterThan(59_000);
      // Expiry is the absolute untouched time rounded up to a whole ms; PTTL counts from the current ms.
      expect(ttl).toBeLessThanOrEqual(60_001);
    });

    it('a value left by another algorithm under the same name reads as untouched', async () => {
      const prefix = uniquePrefix();
      const fixed = createLimiter({
        store: held.store,
        policies: [fixedWindow({ limit: 1, windowMs: 60_000, align: 'first-request', name: 'x' })],
        prefix,
      });
      const meter = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 1, periodMs: 60_000, name: 'x' })],
        prefix,
      });
      expect((await fixed.limit('k')).allowed).toBe(true);
      expect((await meter.limit('k')).allowed).toBe(true);
      expect((await fixed.limit('k')).allowed).toBe(true);
      expect((await fixed.limit('k')).allowed).toBe(false);
      await fixed.reset('k');
    });

    it('uses Redis time, not the app server’s: limiters on clocks an hour apart agree', async () => {
      const policies = [fixedWindow({ limit: 10, windowMs: 3_600_000, name: 'hour' })];
      // Injected clocks an hour apart disagree on the window: each sees a fresh one.
      const skewedPrefix = uniquePrefix();
      const base = Date.now();
      const early = createLimiter({
        store: held.store,
        policies,
        prefix: skewedPrefix,
        clock: manualClock({ startMs: base }),
      });
      const late = createLimiter({
        store: held.store,
        policies,
        prefix: skewedPrefix,
        clock: manualClock({ startMs: base + 3_600_000 }),
      });
      for (let i = 0; i < 5; i++) await early.limit('k');
      expect((await late.limit('k')).remaining).toBe(9);
      // Without a clock both decide on Redis TIME: one window, one count, one reset time.
      const prefix = uniquePrefix();
      const a = createLimiter({ store: held.store, policies, prefix });
      const b = createLimiter({ store: held.store, policies, prefix });
      for (let i = 0; i < 5; i++) await a.limit('k');
      const seen = await b.limit('k');
      expect(seen.remaining).toBe(4);
      const [seconds, micros] = await raw.time();
      const redisNowMs = Number(seconds) * 1000 + Number(micros) / 1000;
      const windowEnd = Math.ceil(redisNowMs / 3_600_000) * 3_600_000;
      expect(Math.abs(seen.resetAfterMs - (windowEnd - redisNowMs))).toBeLessThan(1000);
      await Promise.all([a.reset('k'), early.reset('k')]);
    });

    it('validates its options and the caller’s clock', async () => {
      expectError(() => redisStore({ client: raw as unknown as RedisScriptClient }), 'ERR_INVALID_OPTION', 'client');
      expectError(
        () => redisStore({ client: held.connection.client, maxInFlight: 0 }),
        'ERR_INVALID_OPTION',
        'maxInFlight',
      );
      expectError(
        () => redisStore({ client: held.connection.client, expiryGraceMs: -1 }),
        'ERR_INVALID_OPTION',
        'expiryGraceMs',
      );
      expectError(
        () => redisStore({ client: held.connection.client, maxBatchSize: 1.5 }),
        'ERR_INVALID_OPTION',
        'maxBatchSize',
      );
      const limiter = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 1, periodMs: 1000 })],
        clock: { nowUs: () => Number.NaN, sleep: () => Promise.resolve() },
      });
      await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'clock.nowUs()' });
    });

    it('a closed store refuses new calls', async () => {
      const closing = redisStore({ client: held.connection.client });
      const limiter = createLimiter({ store: closing, policies: [gcra({ limit: 1, periodMs: 1000 })] });
      await closing.close();
      await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    });
  });
});
