import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  fixedWindow,
  gcra,
  isFloodgateError,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/model/compile.js';
import { inspect } from '../../src/model/decide.js';
import { KIND_LIST } from '../../src/model/kinds.js';
import type { Evaluation, State } from '../../src/model/types.js';
import { encodeKey, storageKey } from '../../src/stores/index.js';
import { fromIoredis, type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { MAX_BAKED_METER_SCRIPTS, METER_BATCH_SHA, singleCallScript } from '../../src/stores/redis/script.js';
import { SERVER_POLICY_SCRIPT } from '../../src/stores/redis/server-policy.js';
import type { Store, StoreRequest } from '../../src/stores/store.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

const NOW_US = Date.UTC(2031, 0, 1) * 1000;
const GCRA = compilePolicy(gcra({ limit: 2, periodMs: 1000, name: 'g' }));

function request(prefix: string, policies: readonly CompiledPolicy[], key = 'k', cost = 1): StoreRequest {
  return { prefix, key, policies, cost, commit: true, nowUs: NOW_US, maxDelayUs: 0 };
}

/** The error a call rejected with. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to fail');
}

/** A state as the scripts store it (lua/prelude.ts), read back into the model's layout. */
function decodeState(c: CompiledPolicy, value: string | null): State | undefined {
  if (value === null) return undefined;
  const tag = (KIND_LIST[c.kind - 1] as (typeof KIND_LIST)[number]).tag;
  expect(value.startsWith(tag)).toBe(true);
  let body = value.slice(tag.length);
  const blocked = body.startsWith('!');
  if (blocked) body = body.slice(1);
  const numbers = body.split(' ').map(Number);
  return blocked ? numbers : [0, ...numbers];
}

describe.skipIf(!available)('Redis port: the script decides the verdict, the client the report', () => {
  const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
  afterAll(() => redis.quit());

  /** A client that hands the meter scripts' replies to `forge` first. */
  function forging(forge: (sha: string, reply: unknown, calls: number) => unknown): RedisScriptClient {
    const base = fromIoredis(redis);
    return {
      cluster: false,
      evalsha: async (sha, keys, args) => forge(sha, await base.evalsha(sha, keys, args), keys.length),
      // After a SCRIPT FLUSH (another test may run one), the store sends EVAL: forged all the same.
      eval: async (script, keys, args) =>
        forge(createHash('sha1').update(script).digest('hex'), await base.eval(script, keys, args), keys.length),
    };
  }

  // Under each kind's single-call script: a meter's, a fixed window's, a sliding window's (each denies its third call).
  for (const policy of [
    GCRA,
    compilePolicy(fixedWindow({ limit: 2, windowMs: 60_000, name: 'w' })),
    compilePolicy(slidingWindow({ limit: 2, windowMs: 60_000, name: 's' })),
  ]) {
    it(`a single-call reply whose verdict the model does not reach is ERR_STORE_PROTOCOL, never a decision (${policy.name})`, async () => {
      let forged = 0;
      const client = forging((sha, reply) => {
        if (sha !== singleCallScript(policy)?.sha) return reply;
        forged++;
        // Flip the verdict (the reply's first field), keep the state and the time.
        const text = reply as string;
        return (text.startsWith('1') ? '0' : '1') + text.slice(1);
      });
      const store = redisStore({ client });
      const prefix = uniquePrefix('portforge');
      for (let i = 0; i < 4; i++) {
        // Allowed twice, then denied: each flip is caught, whichever way it goes.
        expect(await rejection(store.decide(request(prefix, [policy])))).toMatchObject({ code: 'ERR_STORE_PROTOCOL' });
      }
      expect(forged).toBe(4);
      // The same calls, honestly answered, decide as the model: two of three allowed (the script did write).
      const honest = redisStore({ client: fromIoredis(redis) });
      expect((await honest.decide(request(prefix, [policy]))).allowed).toBe(false);
      await Promise.all([store.close(), honest.close()]);
    });
  }

  it('a batch reply that denies an allowed call, or allows a denied one, fails those calls with ERR_STORE_PROTOCOL', async () => {
    const mode = { drop: false };
    const client = forging((sha, reply, calls) => {
      if (sha !== METER_BATCH_SHA) return reply;
      // The calls denied follow the states and the time: none, or the second call alone.
      const copy = (reply as unknown[]).slice(0, calls + 1);
      return mode.drop ? copy : [...copy, 2];
    });
    const store = redisStore({ client, maxInFlight: 1 });
    const prefix = uniquePrefix('portbatch');
    // The first call goes alone; the other six queue behind it and go as one batch: keys a…f, fresh.
    const first = store.decide(request(prefix, [GCRA], 'x'));
    const calls = ['a', 'b', 'c', 'd', 'e', 'f'].map((key) => store.decide(request(prefix, [GCRA], key)));
    const settled = await Promise.allSettled([first, ...calls]);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', ...Array(4).fill('fulfilled')]);
    expect((settled[2] as PromiseRejectedResult).reason).toMatchObject({ code: 'ERR_STORE_PROTOCOL' });
    // Now each key is spent to 1 left; cost 2 is denied on all of them, but the forged reply says none was.
    mode.drop = true;
    const again = [
      store.decide(request(prefix, [GCRA], 'x')),
      ...['a', 'b'].map((key) => store.decide(request(prefix, [GCRA], key, 2))),
    ];
    const results = await Promise.allSettled(again);
    expect(results.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    for (const r of results.slice(1)) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'ERR_STORE_PROTOCOL' });
    }
    await store.close();
  });

  it('a batch reply with verdicts out of order or out of range fails the whole batch', async () => {
    const client = forging((sha, reply) =>
      sha === METER_BATCH_SHA ? [...(reply as unknown[]).slice(0, 3), 9] : reply,
    );
    const store = redisStore({ client, maxInFlight: 1 });
    const prefix = uniquePrefix('portrange');
    const first = store.decide(request(prefix, [GCRA], 'x'));
    const calls = ['a', 'b'].map((key) => store.decide(request(prefix, [GCRA], key)));
    const settled = await Promise.allSettled([first, ...calls]);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    expect((settled[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'ERR_STORE_PROTOCOL' });
    await store.close();
  });
});

describe.skipIf(!available)(
  "Redis port: a window's single-call script reads every stored value as the full script does",
  () => {
    const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
    afterAll(() => redis.quit());
    // Each kind's baked script (windows and intervals of a minute), then its shared one (two minutes: a
    // shape no test baked before the process's baked shapes ran out). `numbers` gives a state's common
    // value (whole numbers) at NOW_US for a unit (window or interval) of `unitUs`, `count` which of them is
    // a count, `time` which a time.
    const windowed = (counts: string[]) => (unitUs: number) => [String(NOW_US - (NOW_US % unitUs)), ...counts];
    const cases = [
      ['fixed-window', (ms: number) => fixedWindow({ limit: 3, windowMs: ms, name: 'fw' }), 'f', windowed(['2']), 1, 0],
      [
        'fixed-window',
        (ms: number) => fixedWindow({ limit: 3, windowMs: ms, align: 'first-request', name: 'fwf' }),
        'f',
        windowed(['2']),
        1,
        0,
      ],
      [
        'fixed-window',
        (ms: number) => fixedWindow({ limit: 3, windowMs: ms, countDenied: true, name: 'fwc' }),
        'f',
        windowed(['2']),
        1,
        0,
      ],
      [
        'sliding-window',
        (ms: number) => slidingWindow({ limit: 3, windowMs: ms, name: 'sw' }),
        's',
        windowed(['2', '1']),
        1,
        0,
      ],
      [
        'token-interval',
        (ms: number) =>
          tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: ms, refill: 'interval', name: 'ti' }),
        'i',
        // Two tokens used, anchored 1 ms ago.
        () => ['2', String(NOW_US - 1000)],
        0,
        1,
      ],
    ] as const;

    for (const baked of [true, false]) {
      for (const [kind, make, tag, numbersAt, count, time] of cases) {
        const source = make(baked ? 60_000 : 120_000);
        it(`${source.name}, ${baked ? 'baked' : 'shared'}: values of every form, limit and check, whole and fractional costs`, async () => {
          if (!baked) {
            // Shapes enough to fill the process's baked scripts: the next new shape runs the shared one.
            for (let i = 0; i < MAX_BAKED_METER_SCRIPTS; i++) {
              singleCallScript(compilePolicy(fixedWindow({ limit: 10_000 + i, windowMs: 1000 })));
            }
          }
          const policy = compilePolicy(source);
          const script = singleCallScript(policy);
          expect(script).toMatchObject({ kind, baked });
          // Every call of the single store is counted: each must take the policy's single-call script.
          const sent: string[] = [];
          const base = fromIoredis(redis);
          const single = redisStore({
            client: {
              cluster: false,
              evalsha: (sha, keys, args) => {
                sent.push(sha);
                return base.evalsha(sha, keys, args);
              },
              eval: (text, keys, args) => {
                // The store's one read of the server's eviction settings is no decision.
                if (text !== SERVER_POLICY_SCRIPT) sent.push(createHash('sha1').update(text).digest('hex'));
                return base.eval(text, keys, args);
              },
            },
          });
          const full = redisStore({ client: base, fastPath: false });
          const unitUs = kind === 'token-interval' ? policy.b : policy.a;
          const numbers = numbersAt(unitUs);
          const join = (xs: readonly string[]) => xs.join(' ');
          const n = join(numbers);
          // The common value with its count (every count, `all`) spelled `word`, or its time moved by `units`.
          const counted = (word: string, all = false) =>
            join(numbers.map((x, i) => (i === count || (all && i !== time) ? word : x)));
          const moved = (units: number) =>
            join(numbers.map((x, i) => (i === time ? String(Number(x) - units * unitUs) : x)));
          const [a, ...rest] = numbers;
          const values = [
            `${tag}${n}`,
            `${tag}${counted('3', true)}`,
            `${tag}${moved(1)}`,
            `${tag}${moved(2)}`,
            `${tag}${counted('1.5', true)}`,
            `${tag}${a}  ${join(rest)}`,
            `${tag} ${n}`,
            `${tag}!${NOW_US + 5_000_000} ${n}`,
            `${tag}!${NOW_US - 5_000_000} ${n}`,
            `${tag}!0 ${n}`,
            `${tag}!${NOW_US + 3 * unitUs} ${n}`,
            `${tag}${n} 7`,
            `${tag}${join(numbers.slice(1))}`,
            `${tag}${join(numbers.map((x, i) => (i === time ? 'x' : x)))}`,
            // Spellings Lua's tonumber and JavaScript's Number read differently: the reply carries the
            // numbers as the script read them.
            `${tag}!inf ${n}`,
            `${tag}${counted('nan')}`,
            `${tag}${counted('0x1p1')}`,
            `${tag}${counted('-0x2')}`,
            `${tag}${counted('0b10')}`,
            `${tag}${counted('2\0')}`,
            `${tag}${a}\u00a0${join(rest)}`,
            `${tag}${counted('0x2')}`,
            `${tag === 'f' ? 's' : 'f'}${n}`,
            `${a}`,
            '',
          ];
          for (const value of values) {
            for (const [commit, cost] of [
              [true, 1],
              [true, 0.5],
              [true, 0],
              [true, 4],
              [false, 1],
            ] as const) {
              const outcome = async (store: Store) => {
                const prefix = uniquePrefix('portwin');
                const key = storageKey(prefix, encodeKey('k'), policy.name);
                if (value !== '') await redis.set(key, value);
                const result = await store.decide({ ...request(prefix, [policy], 'k', cost), commit }).then(
                  (r) => {
                    const { next: _next, buffers: _buffers, ...evaluation } = r.evaluations[0] as Evaluation;
                    return { allowed: r.allowed, evaluation };
                  },
                  // A state no write of floodgate's makes (an infinite box counted on) fails on both paths,
                  // with each path's own error: that it failed is what is compared.
                  () => ({ error: true }),
                );
                return { result, stored: await redis.get(key), expires: Number(await redis.pexpiretime(key)) };
              };
              const viaSingle = await outcome(single);
              // The full script replies whole numbers (Redis truncates a Lua number into an integer reply, and
              // makes a non-finite one the least 64-bit integer; a retry that never comes is -1): the single
              // path's report as that reply would carry it.
              if ('evaluation' in viaSingle.result) {
                const e = viaSingle.result.evaluation;
                e.resetAfterUs = Number.isFinite(e.resetAfterUs) ? Math.trunc(e.resetAfterUs) : -(2 ** 63);
                if (!Number.isFinite(e.remaining)) e.remaining = -(2 ** 63);
                if (Number.isFinite(e.retryAfterUs)) e.retryAfterUs = Math.trunc(e.retryAfterUs);
              }
              const viaFull = await outcome(full);
              // The two paths write a few ms of Redis time apart, each its expiry from its own Redis time.
              const what = `${JSON.stringify(value)}, cost ${cost}, commit ${commit}`;
              expect(Math.abs(viaSingle.expires - viaFull.expires), `expiry of ${what}`).toBeLessThan(250);
              expect({ ...viaSingle, expires: 0 }, what).toEqual({ ...viaFull, expires: 0 });
            }
          }
          expect(sent.length).toBeGreaterThanOrEqual(values.length * 5);
          expect(new Set(sent)).toEqual(new Set([script?.sha]));
          await Promise.all([single.close(), full.close()]);
        });
      }
    }
  },
);

describe.skipIf(!available)('Redis port: a flag value its kind does not declare raises in Lua', () => {
  const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
  afterAll(() => redis.quit());

  /** Compiled policies with a forged variant (compilePolicy refuses them; a store must too). */
  const forged: [string, CompiledPolicy][] = [
    ['meter c (queue mode)', { ...GCRA, c: 2 }],
    ['fixed window b (countDenied)', { ...compilePolicy(fixedWindow({ limit: 3, windowMs: 1000 })), b: 7 }],
    ['fixed window c (alignment)', { ...compilePolicy(fixedWindow({ limit: 3, windowMs: 1000 })), c: 2 }],
    ['sliding log c (countDenied)', { ...compilePolicy(slidingLog({ limit: 3, windowMs: 1000 })), c: -1 }],
  ];

  for (const [what, policy] of forged) {
    for (const [path, make] of [
      ['the single-call script', () => redisStore({ client: fromIoredis(redis) })],
      ['the full script', () => redisStore({ client: fromIoredis(redis), fastPath: false })],
    ] as const) {
      it(`${what}, through ${path}: a Redis error naming the kind and the value, and nothing written`, async () => {
        const store: Store = make();
        const prefix = uniquePrefix('portflag');
        const error = await rejection(store.decide(request(prefix, [policy])));
        expect(isFloodgateError(error)).toBe(false);
        const param = what.includes(' b ') ? 'b' : 'c';
        const kind = (KIND_LIST[policy.kind - 1] as (typeof KIND_LIST)[number]).name;
        expect(String((error as Error).message)).toContain(
          `floodgate: policy kind ${kind} has no variant ${param} = ${String(policy[param])}`,
        );
        expect(await redis.exists(storageKey(prefix, encodeKey('k'), policy.name))).toBe(0);
        await store.close?.();
      });
    }
  }

  it('meter c through the batch script: the batch fails, nothing written', async () => {
    const store = redisStore({ client: fromIoredis(redis), maxInFlight: 1 });
    const prefix = uniquePrefix('portflagb');
    const policy = { ...GCRA, c: 3 };
    const first = store.decide(request(prefix, [GCRA], 'x'));
    const calls = ['a', 'b'].map((key) => store.decide(request(prefix, [policy], key)));
    const settled = await Promise.allSettled([first, ...calls]);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    expect(String((settled[1] as PromiseRejectedResult).reason.message)).toContain(
      'floodgate: policy kind meter has no variant c = 3',
    );
    expect(await redis.exists(storageKey(prefix, encodeKey('a'), policy.name))).toBe(0);
    await store.close();
  });
});

describe.skipIf(!available)('Redis expiry: a key lives as long as the state written to it', () => {
  const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
  afterAll(() => redis.quit());

  /** Every kind, with the variants that write on a denial (counted calls, penalty boxes) and a plain fixed window. */
  const POLICIES: Policy[] = [
    fixedWindow({ limit: 3, windowMs: 400, name: 'fw' }),
    slidingWindow({ limit: 4, windowMs: 600, name: 'swp' }),
    tokenBucket({ capacity: 3, refillAmount: 2, refillIntervalMs: 350, refill: 'interval', name: 'tip' }),
    fixedWindow({ limit: 3, windowMs: 400, align: 'first-request', countDenied: true, name: 'fwf' }),
    fixedWindow({ limit: 3, windowMs: 400, countDenied: true, blockMs: 700, name: 'fwc' }),
    slidingLog({ limit: 3, windowMs: 500, countDenied: true, name: 'log' }),
    slidingLog({ limit: 2, windowMs: 300, minGapMs: 600, blockMs: 200, name: 'gap' }),
    slidingWindow({ limit: 4, windowMs: 600, blockMs: 900, name: 'sw' }),
    slidingWindow({ limit: 4, windowMs: 600, precisionMs: 100, name: 'bw' }),
    tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 250, refill: 'interval', blockMs: 300, name: 'ti' }),
    gcra({ limit: 3, periodMs: 900, blockMs: 1500, name: 'g' }),
    leakyBucket({ capacity: 3, leakPerSecond: 2, mode: 'queue', name: 'q' }),
  ];
  const COMPILED = POLICIES.map(compilePolicy);

  it('random calls, alone and in batches, on every script: no key expires before the state it holds is untouched', async () => {
    let denials = 0;
    let checked = 0;
    const call = fc.record({
      policies: fc.uniqueArray(fc.integer({ min: 0, max: COMPILED.length - 1 }), { minLength: 1, maxLength: 3 }),
      key: fc.integer({ min: 0, max: 2 }),
      // Costs within and beyond every limit (exceeds-capacity), and fractions.
      cost: fc.constantFrom(1, 1, 1, 2, 3, 5, 0.5),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 500_000 }), fc.array(call, { minLength: 1, maxLength: 6 })), {
          minLength: 1,
          maxLength: 10,
        }),
        fc.boolean(),
        async (steps, fastPath) => {
          // No grace: a key written on the caller's clock expires exactly when its state is untouched.
          const store = redisStore({ client: fromIoredis(redis), maxInFlight: 1, expiryGraceMs: 0, fastPath });
          const prefix = uniquePrefix('portexp');
          // The caller's clock runs ahead of Redis's by offsetUs, which only grows: whenever Redis
          // expires a key, the caller's clock has passed the moment its state is untouched.
          let offsetUs = 0;
          // Per key and policy, the model's state and when it was written: Redis's clock before that
          // step's calls (the expiry counts from a moment no earlier) and the caller's.
          const written = new Map<string, { state: string; redisUs: number; nowUs: number }>();
          for (const [advanceUs, calls] of steps) {
            offsetUs += advanceUs;
            const [seconds, micros] = await redis.time();
            const redisBeforeUs = Number(seconds) * 1e6 + Number(micros);
            const nowUs = redisBeforeUs + offsetUs;
            const requests = calls.map((c) => ({
              ...request(
                prefix,
                c.policies.map((i) => COMPILED[i] as CompiledPolicy),
                `k${c.key}`,
                c.cost,
              ),
              nowUs,
            }));
            const results = await Promise.all(requests.map((r) => store.decide(r)));
            denials += results.filter((r) => !r.allowed).length;
            for (const c of new Set(requests.flatMap((r) => r.policies.map((p) => `${r.key}\n${p.name}`)))) {
              const [key, name] = c.split('\n') as [string, string];
              const policy = COMPILED.find((p) => p.name === name) as CompiledPolicy;
              const storage = storageKey(prefix, encodeKey(key), name);
              // One atomic look: the value, its expiry and Redis's clock.
              const [[, value], [, expiresMs], [, time]] = (await redis
                .multi()
                .get(storage)
                .pexpiretime(storage)
                .time()
                .exec()) as [[null, string | null], [null, number], [null, [string, string]]];
              const state = decodeState(policy, value);
              if (state === undefined) continue;
              let at = written.get(storage);
              if (at === undefined || at.state !== value) {
                at = { state: value as string, redisUs: redisBeforeUs, nowUs };
                written.set(storage, at);
              }
              // The earliest the key may expire: when the state written is untouched, on Redis's clock.
              const earliestMs = Math.ceil((at.redisUs + inspect(policy, state, at.nowUs).resetAfterUs) / 1000);
              const redisMs = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
              if (redisMs >= earliestMs) continue;
              checked++;
              expect(expiresMs, `${storage} = ${at.state} at ${at.nowUs}`).toBeGreaterThanOrEqual(earliestMs);
            }
          }
          await store.close();
        },
      ),
      { numRuns: 60 },
    );
    expect(denials).toBeGreaterThan(50);
    expect(checked).toBeGreaterThan(100);
  }, 120_000);
});
