import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient as createClient4 } from 'redis4';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, isFloodgateError, slidingLog, tokenBucket } from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { encodeKey, storageKey } from '../../src/stores/index.js';
import {
  fromIoredis,
  fromNodeRedis,
  isNoScriptError,
  type RedisScriptClient,
  redisStore,
} from '../../src/stores/redis/index.js';
import { SERVER_POLICY_SCRIPT } from '../../src/stores/redis/server-policy.js';
import {
  manualClock,
  runConformanceSuite,
  runFastPathSuite,
  runPlainDataSuite,
  uniquePrefix,
} from '../../src/testing/index.js';
import { ALL_DRIVERS, connectSingle, holdStore } from './redis/clients.js';
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
      // The store's one read of the server's eviction settings is no decision.
      if (script !== SERVER_POLICY_SCRIPT) counted.calls++;
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

  for (const driver of ALL_DRIVERS) {
    describe(`single node, ${driver}`, () => {
      const held = holdStore(() => connectSingle(driver));

      it('the adapter reports a single-node client', () => {
        expect(held.connection.client.cluster).toBe(false);
      });

      it('the adapter runs scripts, and a script the node lacks rejects with an error isNoScriptError knows', async () => {
        const { client } = held.connection;
        const script = "return {KEYS[1], ARGV[1], tonumber(ARGV[2]), {tonumber(ARGV[2]) * 2, 'x'}}";
        const keys = [uniquePrefix('adapter')];
        const expected = [keys[0], 'a', 21, [42, 'x']];
        expect(await client.eval(script, keys, ['a', '21'])).toEqual(expected);
        const sha = createHash('sha1').update(script).digest('hex');
        expect(await client.evalsha(sha, keys, ['a', '21'])).toEqual(expected);
        const missing = createHash('sha1').update(`${script} -- ${uniquePrefix()}`).digest('hex');
        const error = await client.evalsha(missing, keys, []).then(
          () => undefined,
          (reason: unknown) => reason,
        );
        expect(isNoScriptError(error)).toBe(true);
        // Other server errors are not taken for NOSCRIPT.
        const other = await client.eval("return redis.error_reply('ERR not this one')", keys, []).then(
          () => undefined,
          (reason: unknown) => reason,
        );
        expect([other instanceof Error, isNoScriptError(other)]).toEqual([true, false]);
      });

      it('after SCRIPT FLUSH, both scripts fall back to EVAL and decide on', async () => {
        const prefix = uniquePrefix('flush');
        const single = createLimiter({
          store: held.store,
          policies: [gcra({ limit: 3, periodMs: 60_000, name: 'g' })],
          prefix,
        });
        const double = createLimiter({
          store: held.store,
          policies: [gcra({ limit: 3, periodMs: 60_000, name: 'g' }), slidingLog({ limit: 3, windowMs: 60_000 })],
          prefix,
        });
        expect((await single.limit('k')).remaining).toBe(2);
        await raw.script('FLUSH');
        expect((await single.limit('k')).remaining).toBe(1);
        await raw.script('FLUSH');
        expect((await double.limit('k')).remaining).toBe(0);
        expect((await double.limit('k')).allowed).toBe(false);
        await double.reset('k');
      });

      runConformanceSuite({ describe, it }, { store: () => held.store, randomRuns: 16 });
      runPlainDataSuite({ describe, it }, { store: () => held.store });

      it('decides calls queued behind a script call together, in arrival order per key', async () => {
        const client = counting(held.connection.client);
        const batching = redisStore({ client, maxInFlight: 1 });
        const limiter = createLimiter({
          store: batching,
          policies: [fixedWindow({ limit: 3, windowMs: 60_000, align: 'first-request' })],
          prefix: uniquePrefix(),
        });
        // A call alone first, so that Redis holds the single-call script before the count starts (a first
        // call on a server that lacks it sends EVALSHA, then EVAL).
        await limiter.limit('warm');
        client.calls = 0;
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

  describe('every path decides as the model', () => {
    // Sequential calls of one meter, or of one fixed window, sliding window or interval token bucket
    // without a penalty box, take that kind's single-call script; every other call (several policies, other kinds and variants),
    // and every call with fastPath: false, the full script. Calls queued
    // together take the batch script, compared with the model in redis-meter-batch.test.ts.
    const fast = holdStore(() => connectSingle('ioredis'));
    const full = holdStore(() => connectSingle('ioredis'), { fastPath: false });
    runFastPathSuite(
      { describe, it },
      {
        variants: [
          { name: 'single-call scripts', store: () => fast.store, calls: ['bare'], methods: ['promise'] },
          { name: 'full script', store: () => full.store, calls: ['bare', 'options'], methods: ['promise'] },
        ],
        randomOperations: 120,
      },
    );
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

    it('close() twice: both calls get one promise, resolved once the calls in flight are answered', async () => {
      const closing = redisStore({ client: held.connection.client });
      const limiter = createLimiter({ store: closing, policies: [gcra({ limit: 1, periodMs: 1000 })] });
      const inFlight = limiter.limit(uniquePrefix());
      const first = closing.close();
      const second = closing.close();
      expect(second).toBe(first);
      const timeout = new Promise((resolve) => setTimeout(() => resolve('pending'), 2000));
      expect(await Promise.race([Promise.all([first, second]).then(() => 'resolved'), timeout])).toBe('resolved');
      expect((await inFlight).allowed).toBe(true);
    });

    it('a closed store refuses new calls', async () => {
      const closing = redisStore({ client: held.connection.client });
      const limiter = createLimiter({ store: closing, policies: [gcra({ limit: 1, periodMs: 1000 })] });
      await closing.close();
      await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    });
  });

  describe('robustness', () => {
    const policies = (limit: number) => [compilePolicy(fixedWindow({ limit, windowMs: 60_000, name: 'fw' }))];
    const request = (prefix: string, key: string, limit: number) => ({
      prefix,
      key,
      policies: policies(limit),
      cost: 1,
      commit: true,
      nowUs: undefined,
      maxDelayUs: 0,
    });

    it('parses replies of a client that hands integers over as strings (ioredis stringNumbers)', async () => {
      const client = new Redis({ host: REDIS_HOST, port: REDIS_PORT, stringNumbers: true });
      try {
        for (const fastPath of [true, false]) {
          const store = redisStore({ client: fromIoredis(client), fastPath });
          const prefix = uniquePrefix('strnum');
          const single = createLimiter({ store, policies: [gcra({ limit: 5, periodMs: 12_000 })], prefix });
          const first = await single.limit('k');
          expect([first.allowed, first.remaining, first.retryAfterMs]).toEqual([true, 4, 0]);
          expect(typeof first.resetAfterMs).toBe('number');
          const double = createLimiter({
            store,
            policies: [fixedWindow({ limit: 5, windowMs: 60_000, name: 'w' }), gcra({ limit: 5, periodMs: 12_000 })],
            prefix: `${prefix}2`,
          });
          const both = await double.limit('k');
          expect([both.allowed, both.remaining]).toEqual([true, 4]);
          // A reservation on the store's clock, cancelled: nowUs must be a number for its TATs.
          const booker = createLimiter({ store, policies: [gcra({ limit: 1, periodMs: 1000 })], prefix: `${prefix}3` });
          await booker.limit('k');
          const booked = await booker.limit('k', { maxDelayMs: 5000 });
          expect([booked.allowed, (booked.delayMs ?? 0) > 0]).toEqual([true, true]);
          expect(await booker.cancel('k', booked)).toBe(true);
          const denied = await single.limit('k', { cost: 100 });
          expect([denied.allowed, denied.reason, denied.remaining]).toEqual([false, 'exceeds-capacity', 4]);
          await store.close();
        }
      } finally {
        await client.quit();
      }
    });

    it('keeps per-key order when the node lost its scripts while calls were pipelined (NOSCRIPT)', async () => {
      const client = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
      const base = fromIoredis(client);
      // The first two EVALSHA replies are held until the test hands them over, one at a time.
      const held: { settle: () => void }[] = [];
      let arrived = 0;
      const wrapped: RedisScriptClient = {
        cluster: false,
        evalsha: (sha, keys, args) => {
          const reply = base.evalsha(sha, keys, args);
          if (held.length >= 2) return reply;
          return new Promise((resolve, reject) => {
            const slot = { settle: () => {} };
            held.push(slot);
            reply.then(
              (value) => {
                arrived++;
                slot.settle = () => resolve(value);
              },
              (error: unknown) => {
                arrived++;
                slot.settle = () => reject(error);
              },
            );
          });
        },
        eval: base.eval,
      };
      const prefix = uniquePrefix('noscript');
      const store = redisStore({ client: wrapped, maxInFlight: 4, fastPath: false });
      const order: string[] = [];
      const call = (label: string) =>
        store.decide(request(prefix, 'k', 2)).then((r) => {
          order.push(`${label}:${r.allowed ? 'admitted' : 'denied'}`);
        });
      const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
      try {
        await client.script('FLUSH');
        const first = call('call1');
        const second = call('call2');
        while (arrived < 2) await pause(1);
        (held[0] as { settle: () => void }).settle(); // call1: NOSCRIPT
        await pause(30);
        const third = call('call3'); // made after call1's NOSCRIPT was handled, before call2's
        await pause(30);
        (held[1] as { settle: () => void }).settle(); // call2: NOSCRIPT
        await Promise.all([first, second, third]);
        expect(order).toEqual(['call1:admitted', 'call2:admitted', 'call3:denied']);
      } finally {
        await store.close();
        await client.quit();
      }
    });

    it('takes a node-redis 4 client in legacyMode (callback API) through its promise API, client.v4', async () => {
      const client = createClient4({ legacyMode: true, socket: { host: REDIS_HOST, port: REDIS_PORT } });
      await client.connect();
      try {
        const adapted = fromNodeRedis(client);
        expect(adapted.cluster).toBe(false);
        const store = redisStore({ client: adapted });
        const limiter = createLimiter({
          store,
          policies: [gcra({ limit: 2, periodMs: 60_000 }), slidingLog({ limit: 3, windowMs: 60_000 })],
          prefix: uniquePrefix('legacy'),
        });
        const decisions = await Promise.all([1, 2, 3].map(() => limiter.limit('k')));
        expect(decisions.map((d) => d.allowed)).toEqual([true, true, false]);
        await raw.script('FLUSH');
        expect((await limiter.limit('k')).allowed).toBe(false);
        await limiter.reset('k');
        await store.close();
      } finally {
        await client.v4.quit();
      }
    });

    for (const driver of ALL_DRIVERS) {
      it(`one key of another type fails its own call, not the others of its batch (${driver})`, async () => {
        const connection = await connectSingle(driver);
        const prefix = uniquePrefix('wrongtype');
        const poison = storageKey(prefix, encodeKey('poison'), 'fw');
        try {
          await raw.hset(poison, 'x', '1');
          const store = redisStore({ client: connection.client, maxInFlight: 1 });
          const keys = ['warmup', 'alice', 'poison', 'bob'];
          const results = await Promise.allSettled(keys.map((key) => store.decide(request(prefix, key, 10))));
          expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
          expect(results.map((r) => (r.status === 'fulfilled' ? r.value.allowed : undefined))).toEqual([
            true,
            true,
            undefined,
            true,
          ]);
          const failure = (results[2] as PromiseRejectedResult).reason;
          // The server refused this call alone: a rejection, not a store fault.
          expect(isFloodgateError(failure) && failure.code).toBe('ERR_STORE_REJECTED');
          expect(String((failure as Error).message)).toMatch(/WRONGTYPE/);
          // The others were stored, and are reported as stored.
          expect(await raw.exists(storageKey(prefix, encodeKey('alice'), 'fw'))).toBe(1);
          expect(await raw.exists(storageKey(prefix, encodeKey('bob'), 'fw'))).toBe(1);
          // Cancels and refunds in a batch fail alone too.
          const limiter = createLimiter({ store, policies: [gcra({ limit: 1, periodMs: 1000, name: 'fw' })], prefix });
          await limiter.limit('bob2');
          const booked = await limiter.limit('bob2', { maxDelayMs: 5000 });
          const settled = await Promise.allSettled([
            limiter.limit('carol'),
            limiter.cancel('poison', booked),
            limiter.cancel('bob2', booked),
          ]);
          expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
          expect((settled[2] as PromiseFulfilledResult<boolean>).value).toBe(true);
          await store.close();
        } finally {
          await raw.del(poison);
          await connection.close();
        }
      });
    }
  });
});
