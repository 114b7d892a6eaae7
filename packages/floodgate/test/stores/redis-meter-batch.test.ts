import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { fixedWindow, gcra, leakyBucket, type Policy, slidingWindow, tokenBucket } from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { encodeKey, storageKey } from '../../src/stores/index.js';
import { fromIoredis, type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { METER_BATCH_SHA, WINDOW_BATCHES } from '../../src/stores/redis/script.js';
import { METER_BATCH_WIRE, WINDOW_BATCH_WIRE } from '../../src/stores/redis/wire.js';
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
/**
 * The first two policies at minutes instead of seconds, for the tests that read keys back after deciding:
 * their states live for minutes, so a busy machine reading them slowly never finds one expired.
 */
const LASTING = [
  gcra({ limit: 5, periodMs: 600_000, name: 'g' }),
  gcra({ limit: 3, periodMs: 540_000, burst: 6, blockMs: 2_400_000, name: 'gb' }),
].map(compilePolicy);

/**
 * The links a meter batch script call carries (see lua/meter-batch.ts, ARGV, j × 16384 + k in hexadecimal): pairs [j, k],
 * call j's key next at call k, 1-based. Read back from the arguments, to show which repeats a test sent.
 */
function linksOf(
  args: readonly (string | number)[],
  perPolicy: number = METER_BATCH_WIRE.policy.size,
): [number, number][] {
  const at = 3 + perPolicy * Number(args[1]);
  return Array.from({ length: Number(args[2]) }, (_, l) => {
    const link = Number.parseInt(String(args[at + l]), 16);
    return [Math.floor(link / 16384), link % 16384];
  });
}

/** How many links of a script call continue a chain: the key's third or later call in that script call. */
function chained(links: readonly [number, number][]): number {
  const later = new Set(links.map(([, k]) => k));
  return links.filter(([j]) => later.has(j)).length;
}

describe.skipIf(!available)(
  'Redis batch scripts (meter, windows): batches decide exactly like the model, call by call',
  () => {
    const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
    afterAll(() => redis.quit());

    /**
     * The batch scripts' families: the meter's, and each window kind whose calls alone take the single-call
     * window script (a batch of one kind takes that kind's batch script).
     */
    const FAMILIES = [
      {
        name: 'single-meter calls',
        sha: METER_BATCH_SHA,
        compiled: COMPILED,
        // The penalty-box policy more often: its writes are the rarest.
        pick: fc.constantFrom(0, 1, 1, 1, 2, 3, 4),
        perPolicy: METER_BATCH_WIRE.policy.size,
        runs: 60,
        least: { batchCalls: 100, repeats: 50, chains: 30 },
      },
      {
        name: 'single fixed-window calls',
        sha: WINDOW_BATCHES['fixed-window'].sha,
        compiled: [
          fixedWindow({ limit: 4, windowMs: 1000, name: 'fw' }),
          fixedWindow({ limit: 3, windowMs: 700, align: 'first-request', name: 'fwf' }),
          fixedWindow({ limit: 3, windowMs: 800, countDenied: true, name: 'fwc' }),
          // Under the name of the first: a key's calls under both link across the two policies.
          fixedWindow({ limit: 2, windowMs: 600, align: 'first-request', countDenied: true, name: 'fw' }),
        ].map(compilePolicy),
        pick: fc.constantFrom(0, 1, 2, 2, 3, 3),
        perPolicy: WINDOW_BATCH_WIRE.policy.size,
        runs: 40,
        least: { batchCalls: 60, repeats: 30, chains: 15 },
      },
      {
        name: 'single sliding-window calls',
        sha: WINDOW_BATCHES['sliding-window'].sha,
        compiled: [
          slidingWindow({ limit: 4, windowMs: 1000, name: 'sw' }),
          slidingWindow({ limit: 3, windowMs: 700, name: 'sw7' }),
        ].map(compilePolicy),
        pick: fc.constantFrom(0, 1),
        perPolicy: WINDOW_BATCH_WIRE.policy.size,
        runs: 40,
        least: { batchCalls: 60, repeats: 30, chains: 15 },
      },
      {
        name: 'single interval token bucket calls',
        sha: WINDOW_BATCHES['token-interval'].sha,
        compiled: [
          tokenBucket({ capacity: 4, refillAmount: 1, refillIntervalMs: 250, refill: 'interval', name: 'ti' }),
          tokenBucket({ capacity: 3, refillAmount: 2, refillIntervalMs: 400, refill: 'interval', name: 'ti2' }),
        ].map(compilePolicy),
        pick: fc.constantFrom(0, 1),
        perPolicy: WINDOW_BATCH_WIRE.policy.size,
        runs: 40,
        least: { batchCalls: 60, repeats: 30, chains: 15 },
      },
    ];

    for (const family of FAMILIES) {
      it(`random batches of ${family.name}, against the reference model in arrival order`, async () => {
        const COMPILED = family.compiled;
        // Counts the script calls that went through the batch script, those with a key twice and those with
        // a key three times or more, to show the property tested them.
        let batchCalls = 0;
        let repeats = 0;
        let chains = 0;
        const base = fromIoredis(redis);
        const client: RedisScriptClient = {
          cluster: false,
          evalsha: (sha, keys, args) => {
            if (sha === family.sha) {
              batchCalls++;
              const links = linksOf(args, family.perPolicy);
              // Each link joins a call to the next one on its key.
              for (const [j, k] of links) {
                expect(keys[j - 1]).toBe(keys[k - 1]);
                for (let m = j + 1; m < k; m++) expect(keys[m - 1]).not.toBe(keys[j - 1]);
              }
              expect(links.length).toBe(keys.length - new Set(keys).size);
              if (links.length > 0) repeats++;
              if (chained(links) > 0) chains++;
            }
            return base.evalsha(sha, keys, args);
          },
          eval: base.eval,
        };
        const call = fc.record({
          key: fc.integer({ min: 0, max: 1 }),
          policy: family.pick,
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
          { numRuns: family.runs },
        );
        expect(batchCalls).toBeGreaterThan(family.least.batchCalls);
        expect(repeats).toBeGreaterThan(family.least.repeats);
        expect(chains).toBeGreaterThan(family.least.chains);
      }, 120_000);
    }

    it('on Redis time, each write expires exactly at its TAT rounded up to the ms: fresh keys, kept ones, repeats', async () => {
      const prefix = uniquePrefix('mbatchexp');
      // maxInFlight 1: the first call of each round goes alone, the others queue behind it and go as one batch.
      const store = redisStore({ client: fromIoredis(redis), maxInFlight: 1 });
      const c = LASTING[0] as (typeof LASTING)[number];
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

    it('a batch of more keys than one MGET reads (parts of 1000), keys repeated across parts, decides like the model and the full script', async () => {
      const prefix = uniquePrefix('mbatchbig');
      const fullPrefix = `${prefix}f`;
      // The links of each batch script call, to show that repeats (and chains of them) crossed MGET's parts.
      const sent: [number, number][][] = [];
      const base = fromIoredis(redis);
      const client: RedisScriptClient = {
        cluster: false,
        evalsha: (sha, keys, args) => {
          if (sha === METER_BATCH_SHA) sent.push(linksOf(args));
          return base.evalsha(sha, keys, args);
        },
        eval: base.eval,
      };
      const store = redisStore({ client, maxInFlight: 1, maxBatchSize: 3000 });
      const full = redisStore({ client: base, maxInFlight: 1, maxBatchSize: 3000, fastPath: false });
      const model = modelStore();
      let denied = 0;
      // Twice: the second batch reads, across MGET's parts, the states the first one wrote.
      for (const nowUs of [Date.UTC(2031, 0, 1) * 1000, Date.UTC(2031, 0, 1) * 1000 + 150_000]) {
        // 2,600 calls over 1,100 keys in a scattered order (as bench:redis picks them), so that a key comes
        // once, twice, three times or more, often in different parts of 1000; the penalty-box policy on
        // every third key, so both kinds of state are met.
        let seed = 7;
        const requests: StoreRequest[] = Array.from({ length: 2600 }, (_, i) => {
          seed = (seed * 1103515245 + 12345) % 2147483648;
          const key = (seed >> 8) % 1100;
          return {
            prefix,
            key: `k${key}`,
            policies: [LASTING[key % 3 === 0 ? 1 : 0] as (typeof LASTING)[number]],
            cost: 1 + (i % 4),
            commit: true,
            nowUs,
            maxDelayUs: 0,
          };
        });
        const got = await Promise.all(requests.map((r) => store.decide(r)));
        await Promise.all(requests.map((r) => full.decide({ ...r, prefix: fullPrefix })));
        for (let i = 0; i < requests.length; i++) {
          const want = await model.decide(requests[i] as StoreRequest);
          expect(got[i]?.allowed, `call ${i}`).toBe(want.allowed);
          expect(got[i]?.evaluations[0]?.remaining, `call ${i}`).toBe(want.evaluations[0]?.remaining);
          expect(got[i]?.evaluations[0]?.resetAfterUs, `call ${i}`).toBe(want.evaluations[0]?.resetAfterUs);
          if (!want.allowed) denied++;
        }
        for (let key = 0; key < 1100; key++) {
          const name = (LASTING[key % 3 === 0 ? 1 : 0] as (typeof LASTING)[number]).name;
          const mine = storageKey(prefix, encodeKey(`k${key}`), name);
          expect(await redis.get(mine), `state of ${mine}`).toBe(
            await redis.get(storageKey(fullPrefix, encodeKey(`k${key}`), name)),
          );
        }
      }
      expect(denied).toBeGreaterThan(100);
      // The big batches (the first call of each went alone): links from one part of 1000 to another, and
      // chains (a key's third call or later) whose link crosses parts.
      const big = sent.filter((links) => links.length > 500);
      expect(big.length).toBe(2);
      for (const links of big) {
        const part = (call: number) => Math.floor((call - 1) / 1000);
        const across = links.filter(([j, k]) => part(j) !== part(k));
        expect(across.length).toBeGreaterThan(100);
        expect(chained(across)).toBeGreaterThan(50);
      }
      await store.close();
      await full.close();
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
      // The first call goes alone; in the batch, 'bad' three times, and 'a' twice around it.
      const keys = ['x', 'a', 'b', 'bad', 'c', 'bad', 'a', 'bad'];
      const results = await Promise.allSettled(keys.map((k) => store.decide(request(k))));
      expect(results.map((r) => r.status)).toEqual(keys.map((k) => (k === 'bad' ? 'rejected' : 'fulfilled')));
      for (const r of results) {
        if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'ERR_STORE_REJECTED' });
        else expect(r.value.allowed).toBe(true);
      }
      // The batch's second call on 'a' decided on the state its first one wrote: 5 a second, 4 left, then 3.
      expect(results[1]).toMatchObject({ status: 'fulfilled', value: { evaluations: [{ remaining: 4 }] } });
      expect(results[6]).toMatchObject({ status: 'fulfilled', value: { evaluations: [{ remaining: 3 }] } });
      expect(await redis.type(storageKey(prefix, encodeKey('bad'), c.name))).toBe('list');
      await redis.del(storageKey(prefix, encodeKey('bad'), c.name));
      await store.close();
    });
  },
);
