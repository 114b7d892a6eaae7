import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type Clock,
  createLimiter,
  type Decision,
  type FailurePolicy,
  gcra,
  isFloodgateError,
  type Limiter,
  type LimiterEvents,
  leakyBucket,
  type MemoryStore,
  memoryStore,
  type Policy,
  tokenBucket,
} from '../../src/index.js';
import { localKey, MAX_KEY_LENGTH } from '../../src/keys.js';
import { compilePolicy, isReservable } from '../../src/model/index.js';
import { isPlainMeter } from '../../src/model/meter.js';
import { MeterFastPath } from '../../src/stores/memory/meter-fast-path.js';
import { type ManualClock, manualClock, modelStore, randomPolicySets, seededRandom } from '../../src/testing/index.js';

/**
 * The memory store's meter fast path (`MeterFastPath`) decides `limitSync(key)` and `checkSync(key)` under one plain
 * meter by its own port of the model, and `limit(key)` and `check(key)` after the blocked-key cache while
 * the breaker is closed. Every call below goes three ways: through the fast path (`limitSync(key)`, `limit(key)`),
 * through the general path on an identical store (`limitSync(key, {})`, `limit(key, {})`), and, while no key is evicted or
 * refused, through the reference model store; every decision, every event and every store counter must be
 * the same, down to the order of the decision's fields.
 */

/** Policies the fast path decides (and a few it must leave to the general path). */
const FAST_SETS: Policy[][] = [
  [gcra({ limit: 5, periodMs: 1000 })],
  [gcra({ limit: 1000, periodMs: 1000 })],
  [gcra({ limit: 3, periodMs: 1000, burst: 2, blockMs: 1500 })],
  [gcra({ limit: 1, periodMs: 2000, blockMs: 300 })],
  // A fractional burst: cost 1 fits, less than one whole unit may be left.
  [gcra({ limit: 1.5, periodMs: 400 })],
  // Waits of hours: µs beyond 32-bit integers.
  [gcra({ limit: 3, periodMs: 3 * 3_600_000 })],
  [tokenBucket({ capacity: 4, refillAmount: 1.5, refillIntervalMs: 300 })],
  [tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 250, blockMs: 90 })],
  [leakyBucket({ capacity: 5, leakPerSecond: 3 })],
  // Named: the calls of the `tier` step share its state under another meter of the same name.
  [gcra({ limit: 4, periodMs: 800, name: 'api' })],
  // Not for the fast path: a meter in queue mode.
  [leakyBucket({ capacity: 4, leakPerSecond: 2.5, mode: 'queue' })],
];

const LONG = 'x'.repeat(201);

/**
 * Keys: plain, escaped in other stores, hashed (over 200 characters), invalid, and keys that start with
 * the mark of rewritten keys, among them the very forms the store holds two other keys under (a client
 * that sends them must not reach those keys' state).
 */
const KEYS: unknown[] = [
  'a',
  'b',
  'key:{c}',
  'ключ',
  '%7B',
  LONG,
  'y'.repeat(200),
  '\u0001x',
  localKey('\u0001x'),
  localKey(LONG),
  '',
  'z'.repeat(MAX_KEY_LENGTH + 1),
  42,
  undefined,
];

/** The steps of a sequence, with their weights: mostly the fast path's (`limit`, `check`). */
const STEPS = [
  ['limit', 45],
  ['check', 15],
  ['cost', 10],
  ['tier', 4],
  ['async', 6],
  ['async-check', 4],
  ['reserve', 6],
  ['status', 8],
  ['reset', 6],
] as const;

/** A tier's policy: another meter under the name of the named set's (the same stored state, judged otherwise). */
const TIER = [gcra({ limit: 9, periodMs: 300, name: 'api' })];

interface Run {
  seed: number;
  policies: Policy[];
  operations: number;
  maxKeys?: number;
  whenFull?: 'evict' | 'refuse';
  failure?: FailurePolicy;
  blockedCache?: boolean;
  /** The clock reads fractions of a µs (a custom clock): every path drops them. */
  fractionalClock?: boolean;
}

type Outcome = { decision: Decision } | { error: string } | { done: true };

interface Subject {
  limiter: Limiter;
  store: MemoryStore | undefined;
  events: unknown[];
}

function subject(run: Run, clock: Clock, reference: boolean): Subject {
  const store = reference
    ? undefined
    : // One summary cell: every key the store lets go lands in it whatever the store's secret, so the
      // two stores compared hold the same summary.
      memoryStore({ maxKeys: run.maxKeys ?? 1_000_000, whenFull: run.whenFull ?? 'evict', summaryCells: 1 });
  const limiter = createLimiter({
    store: store ?? modelStore(),
    policies: run.policies,
    clock,
    prefix: 'fast',
    failure: run.failure ?? 'throw',
    blockedCache: run.blockedCache ?? false,
  });
  const events: unknown[] = [];
  limiter.on('decision', (event: LimiterEvents['decision']) => events.push(JSON.stringify(event)));
  limiter.on('storeError', (event: LimiterEvents['storeError']) =>
    events.push({ key: event.key, code: event.error.code, message: event.error.message }),
  );
  return { limiter, store, events };
}

function outcome(call: () => Decision): Outcome {
  try {
    return { decision: call() };
  } catch (error) {
    if (!isFloodgateError(error)) throw error;
    return { error: `${error.code}: ${error.message}` };
  }
}

async function settled(call: () => Promise<Decision>): Promise<Outcome> {
  try {
    return { decision: await call() };
  } catch (error) {
    if (!isFloodgateError(error)) throw error;
    return { error: `${error.code}: ${error.message}` };
  }
}

function same(got: Outcome, want: Outcome, where: () => string): void {
  deepStrictEqual(got, want, where());
  // Field order too: JSON.stringify, spreads and logs see the same object.
  strictEqual(JSON.stringify(got), JSON.stringify(want), where());
}

afterEach(() => {
  vi.restoreAllMocks();
});

/**
 * Runs one random sequence; returns how many calls the fast path decided itself. The stores sample at random
 * when they evict: before each store's call, Math.random restarts from the same seed, so identical stores
 * sample identically.
 */
async function compare(run: Run): Promise<number> {
  const random = seededRandom(run.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const sampling = (seed: number) => {
    vi.spyOn(Math, 'random').mockImplementation(seededRandom(seed));
  };
  const fastDecide = vi.spyOn(MeterFastPath.prototype, 'decide');
  const manual: ManualClock = manualClock({ startMs: Date.UTC(2031, 0, 1) + Math.floor(random() * 10_000) });
  const clock: Clock = run.fractionalClock
    ? { nowUs: () => manual.nowUs() + 0.75, sleep: (ms, signal) => manual.sleep(ms, signal) }
    : manual;
  const fast = subject(run, clock, false);
  const general = subject(run, clock, false);
  const model = subject(run, clock, true);
  const reservable = run.policies.map(compilePolicy).every(isReservable);
  const log: string[] = [];
  for (let i = 0; i < run.operations; i++) {
    const step = random();
    if (step < 0.3) manual.advanceUs(Math.floor(random() * 4));
    else if (step < 0.65) manual.advance(Math.floor(random() * 120));
    else if (step < 0.75) manual.advance(Math.floor(random() * 2500));
    else if (step < 0.77) manual.advance(Math.floor(random() * 4 * 3_600_000));
    const key = pick(KEYS) as string;
    let weight = random() * 100;
    let op: (typeof STEPS)[number][0] = 'limit';
    for (const [name, w] of STEPS) {
      op = name;
      weight -= w;
      if (weight < 0) break;
    }
    const cost = pick([0, 1, 1, 2, 0.5, 3, 100]);
    const maxDelayMs = Math.floor(random() * 3000);
    log.push(`${manual.nowUs()} ${op} ${JSON.stringify(key)?.slice(0, 24)} cost ${cost} delay ${maxDelayMs}`);
    const where = () =>
      `seed ${run.seed}, policies ${run.policies.map((p) => p.name).join(' + ')}, maxKeys ${run.maxKeys}, operation ${i}:\n${log.slice(-12).join('\n')}`;
    // The model store holds every key; its limiter's promise methods answer from the blocked-key cache
    // where the sync methods ask the store: compared with the model only without either.
    const bounded = run.maxKeys !== undefined || run.blockedCache === true;
    const stepSeed = run.seed * 7919 + i;
    let got: Outcome;
    let want: Outcome;
    let reference: Outcome | undefined;
    if (op === 'limit' || op === 'check') {
      // The fast path's calls: no options.
      sampling(stepSeed);
      got = outcome(() => (op === 'limit' ? fast.limiter.limitSync(key) : fast.limiter.checkSync(key)));
      sampling(stepSeed);
      want = outcome(() => (op === 'limit' ? general.limiter.limitSync(key, {}) : general.limiter.checkSync(key, {})));
      if (!bounded) {
        reference = await settled(() =>
          op === 'limit' ? model.limiter.limit(key, { cost: 1 }) : model.limiter.check(key, { cost: 1 }),
        );
      }
    } else if (op === 'cost' || op === 'reserve' || op === 'tier') {
      const options =
        op === 'tier' ? { cost, policies: TIER } : op === 'reserve' && reservable ? { cost: 1, maxDelayMs } : { cost };
      sampling(stepSeed);
      got = outcome(() => fast.limiter.limitSync(key, options));
      sampling(stepSeed);
      want = outcome(() => general.limiter.limitSync(key, options));
      if (!bounded) reference = await settled(() => model.limiter.limit(key, options));
    } else if (op === 'async' || op === 'async-check') {
      // The promise methods without options: the fast path too, after the blocked-key cache, while the
      // breaker is closed.
      const commit = op === 'async';
      sampling(stepSeed);
      got = await settled(() => (commit ? fast.limiter.limit(key) : fast.limiter.check(key)));
      sampling(stepSeed);
      want = await settled(() => (commit ? general.limiter.limit(key, {}) : general.limiter.check(key, {})));
      if (!bounded) {
        reference = await settled(() =>
          commit ? model.limiter.limit(key, { cost: 1 }) : model.limiter.check(key, { cost: 1 }),
        );
      }
    } else if (op === 'status') {
      got = outcome(() => fast.limiter.statusSync(key));
      want = outcome(() => general.limiter.statusSync(key));
      if (!bounded) reference = await settled(() => model.limiter.status(key));
    } else {
      const reset = (limiter: Limiter): Outcome => {
        try {
          limiter.resetSync(key);
          return { done: true };
        } catch (error) {
          if (!isFloodgateError(error)) throw error;
          return { error: `${error.code}: ${error.message}` };
        }
      };
      got = reset(fast.limiter);
      want = reset(general.limiter);
      if (!bounded) {
        reference = await model.limiter.reset(key).then(
          (): Outcome => ({ done: true }),
          (error: unknown): Outcome => {
            if (!isFloodgateError(error)) throw error;
            return { error: `${error.code}: ${error.message}` };
          },
        );
      }
    }
    same(got, want, () => `the general path, ${where()}`);
    if (reference !== undefined) same(got, reference, () => `the model, ${where()}`);
    deepStrictEqual(fast.events, general.events, where());
    const counters = (store: MemoryStore | undefined) =>
      store && [store.size, store.forcedEvictions, store.refusedKeys, store.expiredRemoved, store.sweeps];
    deepStrictEqual(counters(fast.store), counters(general.store), where());
    fast.events.length = 0;
    general.events.length = 0;
  }
  const decided = fastDecide.mock.results.filter((r) => r.type === 'return' && r.value !== undefined).length;
  vi.restoreAllMocks();
  return decided;
}

describe('the meter fast path decides exactly as the general path and the model', () => {
  const sets = [...FAST_SETS, ...randomPolicySets()];
  for (const [i, policies] of sets.entries()) {
    const plain = policies.length === 1 && isPlainMeter(compilePolicy(policies[0] as Policy));
    it(`${policies.map((p) => p.name).join(' + ')}${plain ? ' (the fast path)' : ' (not for the fast path)'}`, async () => {
      let decided = 0;
      for (let seed = 0; seed < 3; seed++)
        decided += await compare({ seed: i * 100 + seed, policies, operations: 300 });
      // The fast path decides most of the calls without options under a plain meter, and none under others.
      if (plain) expect(decided).toBeGreaterThan(150);
      else expect(decided).toBe(0);
    });
  }

  it('with a custom clock that reads fractions of a µs', async () => {
    for (const [i, policies] of FAST_SETS.entries()) {
      await compare({ seed: 5000 + i, policies, operations: 300, fractionalClock: true });
    }
  });

  it('with the blocked-key cache and its listeners', async () => {
    for (const [i, policies] of FAST_SETS.entries()) {
      await compare({ seed: 6000 + i, policies, operations: 300, blockedCache: true });
    }
  });

  it('in a store of 4 keys that evicts, over every failure policy', async () => {
    for (const [i, policies] of FAST_SETS.entries()) {
      for (const failure of ['throw', 'open', 'closed'] as const) {
        await compare({ seed: 7000 + i, policies, operations: 400, maxKeys: 4, failure });
      }
    }
  });

  it("in a store of 4 keys that refuses new ones ('refuse'), over every failure policy", async () => {
    for (const [i, policies] of FAST_SETS.entries()) {
      for (const failure of ['throw', 'open', 'closed'] as const) {
        await compare({ seed: 8000 + i, policies, operations: 400, maxKeys: 4, whenFull: 'refuse', failure });
      }
    }
  });
});

describe('the promise methods without options go through the meter fast path as the general path goes', () => {
  /** Two limiters on identical memory stores: `limit(key)` (the fast path) and `limit(key, {})` (the general path). */
  function pair(policies: Policy[], clock: Clock, failure: FailurePolicy = 'throw') {
    const make = () => {
      const store = memoryStore();
      // Each limiter counts its own clock's reads: both paths read it as often, a cache answer included.
      const counted = {
        reads: 0,
        nowUs: () => {
          counted.reads++;
          return clock.nowUs();
        },
        sleep: (ms: number, signal?: AbortSignal) => clock.sleep(ms, signal),
      };
      const limiter = createLimiter({ store, policies, clock: counted, failure, blockedCache: true });
      const events: LimiterEvents['decision'][] = [];
      limiter.on('decision', (event) => events.push(event));
      return { store, limiter, events, clock: counted };
    };
    return { fast: make(), general: make() };
  }

  /** The same calls on both limiters, the clock advanced by `steps` (ms) before each: the sources of the fast path's. */
  async function sequence(policies: Policy[], steps: number[]): Promise<{ sources: string[]; fastDecided: number }> {
    const clock = manualClock({ startMs: Date.UTC(2031, 0, 1) });
    const { fast, general } = pair(policies, clock);
    const fastDecide = vi.spyOn(MeterFastPath.prototype, 'decide');
    const sources: string[] = [];
    for (const step of steps) {
      clock.advance(step);
      const got = await fast.limiter.limit('k');
      const want = await general.limiter.limit('k', {});
      same({ decision: got }, { decision: want }, () => `at ${clock.nowUs()} µs`);
      strictEqual(fast.clock.reads, general.clock.reads, `clock reads at ${clock.nowUs()} µs`);
      sources.push((fast.events.at(-1) as LimiterEvents['decision']).source);
    }
    deepStrictEqual(
      fast.events.map((e) => [e.source, JSON.stringify(e.decision)]),
      general.events.map((e) => [e.source, JSON.stringify(e.decision)]),
    );
    const fastDecided = fastDecide.mock.results.filter((r) => r.value !== undefined).length;
    vi.restoreAllMocks();
    return { sources, fastDecided };
  }

  it('a denial: the blocked-key cache answers first, as for the general path', async () => {
    // Admitted and denied by the fast path; the denial answered by the cache until its retry time; the fast path again.
    const { sources, fastDecided } = await sequence([gcra({ limit: 1, periodMs: 1000 })], [0, 0, 100, 899, 1]);
    deepStrictEqual(sources, ['store', 'store', 'cache', 'cache', 'store']);
    strictEqual(fastDecided, 3);
  });

  it('a penalty box: the blocked-key cache answers first, as for the general path', async () => {
    // Admitted by the fast path; denied and boxed by the general path (it leaves a penalty box to it);
    // then answered by the cache until the box ends; then the fast path again.
    const { sources, fastDecided } = await sequence(
      [gcra({ limit: 1, periodMs: 1000, blockMs: 5000 })],
      [0, 0, 100, 2000, 2899, 1],
    );
    deepStrictEqual(sources, ['store', 'store', 'cache', 'cache', 'cache', 'store']);
    strictEqual(fastDecided, 2);
  });

  it("a closed breaker hears of the fast path's successes; an open one is never passed", async () => {
    const clock = manualClock({ startMs: Date.UTC(2031, 0, 1) });
    const { fast, general } = pair([gcra({ limit: 100, periodMs: 1000 })], clock, 'open');
    // The store fails (a fault the breaker counts) for one key, one the fast path leaves to the general path (it
    // is not plain: over 200 characters, held hashed), so both limiters see the same failures.
    const bad = 'b'.repeat(201);
    for (const { store } of [fast, general]) {
      const original = store.decideSync.bind(store);
      vi.spyOn(store, 'decideSync').mockImplementation((request) => {
        if (request.key === bad) throw new Error('disk on fire');
        return original(request);
      });
    }
    const run = async (key: string) => {
      const got = await fast.limiter.limit(key);
      const want = await general.limiter.limit(key, {});
      same({ decision: got }, { decision: want }, () => key.slice(0, 8));
      strictEqual(fast.limiter.breakerState, general.limiter.breakerState, key.slice(0, 8));
    };
    await run('a');
    for (let i = 0; i < 4; i++) await run(bad);
    // A success between failures starts their count again: four more keep the breaker closed.
    await run('a');
    for (let i = 0; i < 4; i++) await run(bad);
    strictEqual(fast.limiter.breakerState, 'closed');
    // The fifth in a row opens it: calls on a good key skip the store (answered per `failure`), fast path or not.
    await run(bad);
    strictEqual(fast.limiter.breakerState, 'open');
    const before = fast.store.size;
    await run('c');
    strictEqual(fast.store.size, before);
    strictEqual((fast.events.at(-1) as LimiterEvents['decision']).decision.reason, 'degraded');
  });
});
