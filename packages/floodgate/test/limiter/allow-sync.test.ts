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

function twins(c: Case): { clock: ReturnType<typeof manualClock>; byDecision: Limiter; byVerdict: Limiter } {
  const clock = manualClock({ startMs: 1_700_000_000_000 });
  const make = () => createLimiter({ store: c.store(), policies: c.policies, clock });
  return { clock, byDecision: make(), byVerdict: make() };
}

describe('limiter.allowSync', () => {
  for (const c of cases) {
    it(`agrees with limitSync(key).allowed: ${c.name}`, () => {
      for (const seed of [1, 2, 3]) {
        const next = seededRandom(seed);
        const { clock, byDecision, byVerdict } = twins(c);
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
