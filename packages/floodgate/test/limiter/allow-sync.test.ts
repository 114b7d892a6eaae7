import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import {
  type Clock,
  concurrency,
  createLimiter,
  type Decision,
  fixedWindow,
  gcra,
  type Limiter,
  leakyBucket,
  memoryStore,
  type Policy,
  type Store,
} from '../../src/index.js';
import { sqliteStore } from '../../src/stores/sqlite/sqlite-store.js';
import { seededRandom } from '../../src/testing/conformance.js';
import { manualClock } from '../../src/testing/index.js';

/**
 * `allowSync(key)` is `limitSync(key).allowed`: twin limiters on twin stores, one called each way on the
 * same keys at the same times, agree on every verdict and leave the same state behind (`statusSync`), on
 * the memory store's fast path (a plain meter), the ways it leaves calls to the general path (a penalty box,
 * a key it does not hold as given, a new key when the store is full), and where there is no fast path.
 */

interface Case {
  name: string;
  policies: Policy[];
  store: () => Store;
  /** The store's bound on keys, when the case sets one. */
  maxKeys?: number;
}

const cases: Case[] = [
  { name: 'GCRA, memory store (its fast path)', policies: [gcra({ limit: 3, periodMs: 1000 })], store: memoryStore },
  {
    name: 'leaky bucket meter, memory store',
    policies: [leakyBucket({ capacity: 4, leakPerSecond: 2 })],
    store: memoryStore,
  },
  {
    name: 'GCRA with a penalty box, memory store',
    policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 1500 })],
    store: memoryStore,
  },
  {
    name: 'GCRA, memory store of 3 keys (full: new keys the general way)',
    policies: [gcra({ limit: 2, periodMs: 1000 })],
    store: () => memoryStore({ maxKeys: 3 }),
    maxKeys: 3,
  },
  {
    name: 'fixed window, memory store (no fast path)',
    policies: [fixedWindow({ limit: 3, windowMs: 1000 })],
    store: memoryStore,
  },
  {
    name: 'two policies, memory store (no fast path)',
    policies: [gcra({ limit: 3, periodMs: 1000 }), fixedWindow({ limit: 5, windowMs: 4000 })],
    store: memoryStore,
  },
  {
    name: 'GCRA, SQLite',
    policies: [gcra({ limit: 3, periodMs: 1000 })],
    store: () => {
      const store = sqliteStore({ database: new Database(':memory:') });
      store.migrate();
      return store;
    },
  },
];

/** Keys of every kind the stores hold differently: plain, long (hashed), starting with the long-key mark. */
const KEYS = ['a', 'b', 'c', 'd', 'x'.repeat(300), `\u0001mark`, 'é'];

interface Twins {
  clock: ReturnType<typeof manualClock>;
  byDecision: Limiter;
  byVerdict: Limiter;
  /** Keys each twin's store holds (a memory store's `size`; undefined for others). */
  sizes: () => [number | undefined, number | undefined];
}

function twins(c: Case, options: { blockedCache?: boolean } = {}): Twins {
  const clock = manualClock({ startMs: 1_700_000_000_000 });
  const stores = [c.store(), c.store()] as const;
  const make = (store: Store) => createLimiter({ store, policies: c.policies, clock, ...options });
  const size = (store: Store) => (store as { size?: number }).size;
  return {
    clock,
    byDecision: make(stores[0]),
    byVerdict: make(stores[1]),
    sizes: () => [size(stores[0]), size(stores[1])],
  };
}

/** A memory store whose fast path counts the calls it is asked to decide, and those it gives a verdict alone. */
interface Asked {
  decide: number;
  allows: number;
}

function countingStore(): { store: Store; asked: Asked } {
  const store = memoryStore();
  const asked = { decide: 0, allows: 0 };
  const offer = store.fastPath?.bind(store);
  if (offer === undefined) throw new Error('the memory store offers no fast path');
  store.fastPath = (prefix, policies, clock) => {
    const fast = offer(prefix, policies, clock);
    if (fast?.allows === undefined) throw new Error('the memory store offers no verdict alone');
    const allows = fast.allows.bind(fast);
    return {
      get nowUs() {
        return fast.nowUs;
      },
      decide: (key, commit) => {
        asked.decide++;
        return fast.decide(key, commit);
      },
      allows: (key, commit) => {
        asked.allows++;
        return allows(key, commit);
      },
    };
  };
  return { store, asked };
}

describe('limiter.allowSync', () => {
  for (const c of cases) {
    it(`agrees with limitSync(key).allowed: ${c.name}`, () => {
      for (const seed of [1, 2, 3]) {
        const next = seededRandom(seed);
        const { clock, byDecision, byVerdict, sizes } = twins(c);
        let admitted = 0;
        let denied = 0;
        for (let i = 0; i < 600; i++) {
          // Skewed towards the first keys, so that some keys are called faster than their limit.
          const key = KEYS[Math.floor(next() ** 2 * KEYS.length)] as string;
          const verdict = byVerdict.allowSync(key);
          expect(verdict, `seed ${seed}, call ${i} on ${key.slice(0, 8)}`).toBe(byDecision.limitSync(key).allowed);
          if (verdict) admitted++;
          else denied++;
          if (i % 7 === 0) expect(byVerdict.statusSync(key)).toEqual(byDecision.statusSync(key));
          // A full store makes room for a new key, or refuses it, on both ways (it evicts at random, so
          // the twins may hold different counts of expired keys, but never more than the bound).
          for (const size of sizes()) {
            expect(size ?? 0, `seed ${seed}, call ${i}: keys held`).toBeLessThanOrEqual(c.maxKeys ?? 1e9);
          }
          // Mostly a few ms, now and then seconds: keys fill up, then drain.
          clock.advance(Math.floor(next() * (next() < 0.97 ? 10 : 3000)));
        }
        // Both verdicts were reached: the comparison saw admissions and denials.
        expect(admitted).toBeGreaterThan(50);
        expect(denied).toBeGreaterThan(50);
      }
    });
  }

  it('reads the clock as often as limitSync does, on every way through', () => {
    for (const c of cases.slice(0, 4)) {
      const clock = manualClock({ startMs: 1_700_000_000_000 });
      const reads = { decision: 0, verdict: 0 };
      const counted = (name: keyof typeof reads): Clock => ({
        nowUs: () => {
          reads[name]++;
          return clock.nowUs();
        },
        sleep: (ms, signal) => clock.sleep(ms, signal),
      });
      const byDecision = createLimiter({ store: c.store(), policies: c.policies, clock: counted('decision') });
      const byVerdict = createLimiter({ store: c.store(), policies: c.policies, clock: counted('verdict') });
      for (let i = 0; i < 40; i++) {
        const key = KEYS[i % KEYS.length] as string;
        byDecision.limitSync(key);
        byVerdict.allowSync(key);
        expect(reads.verdict, `${c.name}, call ${i}`).toBe(reads.decision);
        clock.advance(i % 9 === 0 ? 700 : 3);
      }
    }
  });

  it('feeds the blocked-key cache as limitSync does: a sync denial answers the promise methods next', async () => {
    for (const c of cases.slice(0, 3)) {
      const clock = manualClock({ startMs: 1_700_000_000_000 });
      const [byDecision, byVerdict] = [countingStore(), countingStore()].map(({ store, asked }) => ({
        limiter: createLimiter({ store, policies: c.policies, clock, blockedCache: true }),
        asked,
      })) as [{ limiter: Limiter; asked: Asked }, { limiter: Limiter; asked: Asked }];
      let fromCache = 0;
      for (let i = 0; i < 30; i++) {
        // Sync calls first, so that a denial the promise call meets was remembered by a sync call.
        for (let j = 0; j < 3; j++) {
          expect(byVerdict.limiter.allowSync('k')).toBe(byDecision.limiter.limitSync('k').allowed);
        }
        const before = byDecision.asked.decide;
        expect(await byVerdict.limiter.limit('k')).toEqual(await byDecision.limiter.limit('k'));
        if (byDecision.asked.decide === before) fromCache++;
        clock.advance(i % 10 === 0 ? 900 : 20);
      }
      // The store was asked as often on both ways: the same promise calls were answered from the cache.
      expect(byVerdict.asked.decide + byVerdict.asked.allows, c.name).toBe(byDecision.asked.decide);
      expect(fromCache, c.name).toBeGreaterThan(5);
    }
  });

  it('makes no decision on the fast path, also once the last decision listener is gone', () => {
    const { store, asked } = countingStore();
    const limiter = createLimiter({ store, policies: [gcra({ limit: 3, periodMs: 1000 })] });
    limiter.allowSync('k');
    expect(asked).toEqual({ decide: 0, allows: 1 });
    const off = limiter.on('decision', () => undefined);
    limiter.allowSync('k');
    expect(asked).toEqual({ decide: 1, allows: 1 });
    off();
    limiter.allowSync('k');
    expect(asked).toEqual({ decide: 1, allows: 2 });
  });

  it('refuses what limitSync refuses, with the same typed error', () => {
    const { byDecision, byVerdict } = twins(cases[0] as Case);
    for (const key of ['', 42 as unknown as string, undefined as unknown as string, 'x'.repeat(70_000)]) {
      let expected: unknown;
      try {
        byDecision.limitSync(key);
      } catch (error) {
        expected = error;
      }
      expect(expected).toBeInstanceOf(Error);
      expect(() => byVerdict.allowSync(key)).toThrow(expected as Error);
      expect(() => byVerdict.allowSync(key)).toThrowError(
        expect.objectContaining({ code: (expected as { code: string }).code }),
      );
    }
  });

  it('tells the decision listeners of the decision it made', () => {
    const { byVerdict } = twins(cases[0] as Case);
    const heard: Decision[] = [];
    byVerdict.on('decision', (event) => heard.push(event.decision));
    const verdicts = [1, 2, 3, 4].map(() => byVerdict.allowSync('k'));
    expect(verdicts).toEqual([true, true, true, false]);
    expect(heard.map((d) => d.allowed)).toEqual(verdicts);
    expect(heard[3]?.reason).toBe('limit');
  });

  it('is refused under a concurrency policy, as limitSync is', () => {
    const limiter = createLimiter({ store: memoryStore(), policies: [concurrency({ limit: 2, leaseMs: 10_000 })] });
    expect(() => limiter.allowSync('k')).toThrowError(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
  });
});
