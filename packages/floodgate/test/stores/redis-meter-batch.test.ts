import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { gcra, leakyBucket, type Policy, tokenBucket } from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { encodeKey, storageKey } from '../../src/stores/index.js';
import { fromIoredis, type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { METER_BATCH_SHA } from '../../src/stores/redis/script.js';
import type { StoreRequest } from '../../src/stores/store.js';
import { modelStore, uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

/** Meter policies of every shape the batch script takes: GCRA, continuous bucket, leaky meter and queue, penalty box. */
const POLICIES: Policy[] = [
  gcra({ limit: 5, periodMs: 1000, name: 'g' }),
  gcra({ limit: 3, periodMs: 900, burst: 6, blockMs: 4000, name: 'gb' }),
  tokenBucket({ capacity: 4, refillAmount: 1, refillIntervalMs: 333, name: 't' }),
  leakyBucket({ capacity: 3, leakPerSecond: 2, name: 'lm' }),
  leakyBucket({ capacity: 3, leakPerSecond: 2, mode: 'queue', name: 'lq' }),
];
const COMPILED = POLICIES.map(compilePolicy);

describe.skipIf(!available)('Redis meter batch script: batches decide exactly like the model, call by call', () => {
  const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
  afterAll(() => redis.quit());

  it('random batches of single-meter calls, against the reference model in arrival order', async () => {
    // Counts the script calls that went through the batch script, to show the property tested it.
    let batchCalls = 0;
    const base = fromIoredis(redis);
    const client: RedisScriptClient = {
      cluster: false,
      evalsha: (sha, keys, args) => {
        if (sha === METER_BATCH_SHA) batchCalls++;
        return base.evalsha(sha, keys, args);
      },
      eval: base.eval,
    };
    const call = fc.record({
      key: fc.integer({ min: 0, max: 1 }),
      // The penalty-box policy more often: its writes are the rarest.
      policy: fc.constantFrom(0, 1, 1, 1, 2, 3, 4),
      cost: fc.oneof(fc.constantFrom(0, 1, 1, 1, 2, 7), fc.double({ min: 1e-9, max: 3, noNaN: true })),
      commit: fc.boolean(),
      maxDelayUs: fc.constantFrom(0, 0, 500_000, 5_000_000),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.tuple(
            fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 700_000 })),
            fc.array(call, { minLength: 2, maxLength: 24 }),
          ),
          {
            minLength: 1,
            maxLength: 12,
          },
        ),
        async (steps) => {
          // maxInFlight 1: the first call of a step goes alone, the rest queue behind it and go as one batch.
          const store = redisStore({ client, maxInFlight: 1 });
          // The same calls through the full script: the states it writes and their expiry must match.
          const full = redisStore({ client: base, maxInFlight: 1, fastPath: false });
          const model = modelStore();
          const prefix = uniquePrefix('mbatch');
          const fullPrefix = `${prefix}f`;
          let nowUs = Date.UTC(2031, 0, 1) * 1000;
          for (const [advanceUs, calls] of steps) {
            nowUs += advanceUs;
            const requests: StoreRequest[] = calls.map((c) => ({
              prefix,
              key: `k${c.key}`,
              policies: [COMPILED[c.policy] as (typeof COMPILED)[number]],
              cost: c.cost,
              commit: c.commit,
              nowUs,
              maxDelayUs: c.maxDelayUs,
            }));
            const got = await Promise.all(requests.map((r) => store.decide(r)));
            await Promise.all(requests.map((r) => full.decide({ ...r, prefix: fullPrefix })));
            for (const c of new Set(calls.map((c) => `${c.key}:${c.policy}`))) {
              const [key, policy] = c.split(':').map(Number);
              const name = (COMPILED[policy as number] as (typeof COMPILED)[number]).name;
              const mine = storageKey(prefix, encodeKey(`k${key}`), name);
              const theirs = storageKey(fullPrefix, encodeKey(`k${key}`), name);
              expect(await redis.get(mine), `state of ${mine}`).toBe(await redis.get(theirs));
              const [a, b] = [Number(await redis.pexpiretime(mine)), Number(await redis.pexpiretime(theirs))];
              // Both written within the same few ms of Redis time, for the same untouched time.
              expect(Math.abs(a - b), `expiry of ${mine}: ${a} vs ${b}`).toBeLessThan(250);
            }
            for (let i = 0; i < requests.length; i++) {
              const want = await model.decide(requests[i] as StoreRequest);
              const strip = (r: typeof want) => ({
                allowed: r.allowed,
                evaluations: r.evaluations.map((e) => ({
                  allowed: e.allowed,
                  reason: e.reason,
                  remaining: e.remaining,
                  retryAfterUs: e.retryAfterUs,
                  resetAfterUs: e.resetAfterUs,
                  delayUs: e.delayUs,
                })),
              });
              expect(strip(got[i] as typeof want), `step at ${nowUs}, call ${i}`).toEqual(strip(want));
            }
          }
          await store.close();
          await full.close();
        },
      ),
      { numRuns: 60 },
    );
    expect(batchCalls).toBeGreaterThan(100);
  }, 120_000);

  it('on Redis time, each write expires exactly at its TAT rounded up to the ms: fresh keys, kept ones, repeats', async () => {
    const prefix = uniquePrefix('mbatchexp');
    // maxInFlight 1: the first call of each round goes alone, the others queue behind it and go as one batch.
    const store = redisStore({ client: fromIoredis(redis), maxInFlight: 1 });
    const c = COMPILED[0] as (typeof COMPILED)[number];
    const request = (key: string, cost: number): StoreRequest => ({
      prefix,
      key,
      policies: [c],
      cost,
      commit: true,
      nowUs: undefined,
      maxDelayUs: 0,
    });
    const keys = new Set<string>();
    let written = 0;
    for (let round = 0; round < 4; round++) {
      // Keys new to the batch, keys written by earlier rounds, keys repeated within the batch; costs
      // that differ split the batch into runs.
      const calls: [string, number][] = [
        ['a', 1],
        [`n${round}`, 1],
        ['b', 1],
        ['a', 1],
        [`m${round}`, 2],
        ['b', 2],
        ['c', 1],
        ['a', 1],
        [`n${round}`, 1],
      ];
      const results = await Promise.all(calls.map(([key, cost]) => store.decide(request(key, cost))));
      written += results.filter((r) => r.allowed).length;
      for (const [key] of calls) keys.add(key);
      for (const key of keys) {
        const name = storageKey(prefix, encodeKey(key), c.name);
        const tat = Number(await redis.get(name));
        expect(Number.isSafeInteger(tat), `state of ${name}`).toBe(true);
        expect(Number(await redis.pexpiretime(name)), `expiry of ${name}`).toBe(Math.ceil(tat / 1000));
      }
    }
    expect(written).toBeGreaterThan(20);
    await store.close();
  });

  it('a batch of more keys than one MGET reads (parts of 1000) decides like the model', async () => {
    const prefix = uniquePrefix('mbatchbig');
    const store = redisStore({ client: fromIoredis(redis), maxInFlight: 1, maxBatchSize: 3000 });
    const model = modelStore();
    let denied = 0;
    // Twice: the second batch reads, across MGET's parts, the states the first one wrote.
    for (const nowUs of [Date.UTC(2031, 0, 1) * 1000, Date.UTC(2031, 0, 1) * 1000 + 150_000]) {
      // 2,600 calls over 1,300 keys, each key twice, the second far from the first; the penalty-box
      // policy on every third key, so repeats across parts and both kinds of state are met.
      const requests: StoreRequest[] = Array.from({ length: 2600 }, (_, i) => ({
        prefix,
        key: `k${i % 1300}`,
        policies: [COMPILED[i % 3 === 0 ? 1 : 0] as (typeof COMPILED)[number]],
        cost: 1 + (i % 4),
        commit: true,
        nowUs,
        maxDelayUs: 0,
      }));
      const got = await Promise.all(requests.map((r) => store.decide(r)));
      for (let i = 0; i < requests.length; i++) {
        const want = await model.decide(requests[i] as StoreRequest);
        expect(got[i]?.allowed, `call ${i}`).toBe(want.allowed);
        expect(got[i]?.evaluations[0]?.remaining, `call ${i}`).toBe(want.evaluations[0]?.remaining);
        expect(got[i]?.evaluations[0]?.resetAfterUs, `call ${i}`).toBe(want.evaluations[0]?.resetAfterUs);
        if (!want.allowed) denied++;
      }
    }
    expect(denied).toBeGreaterThan(100);
    await store.close();
  });

  it('a key of another type fails its own call in a batch, and the others go on', async () => {
    const prefix = uniquePrefix('mbatchwrong');
    const store = redisStore({ client: fromIoredis(redis), maxInFlight: 1 });
    const c = COMPILED[0] as (typeof COMPILED)[number];
    await redis.lpush(storageKey(prefix, encodeKey('bad'), c.name), 'x');
    const request = (key: string): StoreRequest => ({
      prefix,
      key,
      policies: [c],
      cost: 1,
      commit: true,
      nowUs: undefined,
      maxDelayUs: 0,
    });
    const results = await Promise.allSettled(['a', 'b', 'bad', 'c', 'd'].map((k) => store.decide(request(k))));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((results[2] as PromiseRejectedResult).reason).toMatchObject({ code: 'ERR_STORE_REJECTED' });
    for (const r of results) if (r.status === 'fulfilled') expect(r.value.allowed).toBe(true);
    await redis.del(storageKey(prefix, encodeKey('bad'), c.name));
    await store.close();
  });
});
