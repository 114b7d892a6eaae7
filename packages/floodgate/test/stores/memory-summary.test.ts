// Bounded memory that never over-admits: keys the memory store lets go leave their state in a fixed-size
// summary, and a key the store does not hold starts from its cell. Checked against the reference model
// with a store far too small for its keys and a summary of a handful of cells (collisions on purpose).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  isFloodgateError,
  leakyBucket,
  memoryStore,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { halfSipHash13 } from '../../src/stores/memory/summary.js';
import { manualClock, modelStore } from '../../src/testing/index.js';

/** Every algorithm and variant, each with a limit small enough that a few calls reach it. */
const POLICIES: Policy[] = [
  gcra({ limit: 3, periodMs: 1000 }),
  gcra({ limit: 2, periodMs: 1000, burst: 3 }),
  leakyBucket({ capacity: 3, leakPerSecond: 2 }),
  tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 400 }),
  tokenBucket({ capacity: 3, refillAmount: 2, refillIntervalMs: 700, refill: 'interval' }),
  fixedWindow({ limit: 3, windowMs: 1000 }),
  fixedWindow({ limit: 3, windowMs: 1000, align: 'first-request' }),
  fixedWindow({ limit: 3, windowMs: 1000, countDenied: true }),
  slidingWindow({ limit: 3, windowMs: 1000 }),
  slidingWindow({ limit: 3, windowMs: 1000, precisionMs: 250 }),
  slidingLog({ limit: 3, windowMs: 1000 }),
  slidingLog({ limit: 3, windowMs: 1000, minGapMs: 300 }),
  slidingLog({ limit: 3, windowMs: 1000, countDenied: true }),
  gcra({ limit: 2, periodMs: 1000, blockMs: 700 }),
  fixedWindow({ limit: 2, windowMs: 1000, blockMs: 1500 }),
  slidingLog({ limit: 2, windowMs: 1000, blockMs: 400, name: 'log-with-penalty' }),
];

interface Step {
  key: number;
  advanceMs: number;
  op: 'limit' | 'check' | 'reset';
}

const step: fc.Arbitrary<Step> = fc.record({
  key: fc.integer({ min: 0, max: 9 }),
  advanceMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 1500 })),
  op: fc.constantFrom('limit', 'limit', 'limit', 'limit', 'check', 'reset'),
});

/**
 * Runs the steps on a tiny memory store and on the model store (which holds every key); after each step,
 * each key's admissions so far on the memory store must be at most the model's.
 */
async function neverOverAdmits(policies: Policy[], maxKeys: number, summaryCells: number, steps: Step[]) {
  const clock = manualClock({ startMs: Date.UTC(2031, 0, 1) });
  const store = memoryStore({ maxKeys, summaryCells });
  const bounded = createLimiter({ store, clock, policies });
  const exact = createLimiter({ store: modelStore(), clock, policies });
  const got = new Array<number>(10).fill(0);
  const want = new Array<number>(10).fill(0);
  for (const { key, advanceMs, op } of steps) {
    clock.advance(advanceMs);
    const name = `client-${key}`;
    if (op === 'reset') {
      bounded.resetSync(name);
      await exact.reset(name);
    } else if (op === 'check') {
      bounded.checkSync(name);
    } else {
      if (bounded.limitSync(name).allowed) got[key] = (got[key] as number) + 1;
      if ((await exact.limit(name)).allowed) want[key] = (want[key] as number) + 1;
    }
    expect(got[key]).toBeLessThanOrEqual(want[key] as number);
    expect(store.size).toBeLessThanOrEqual(Math.max(maxKeys, policies.length));
  }
  return { store, got, want };
}

describe('memory store summary: bounded memory never over-admits', () => {
  it('any calls by any keys, one policy of each algorithm: admissions per key never above the model', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...POLICIES),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 4 }),
        fc.array(step, { minLength: 1, maxLength: 120 }),
        async (policy, maxKeys, cells, steps) => {
          await neverOverAdmits([policy], maxKeys, cells, steps);
        },
      ),
      { numRuns: 600 },
    );
  });

  it('two policies per call (a tier on top of another), keys let go per policy', async () => {
    const pair = fc
      .tuple(fc.constantFrom(...POLICIES), fc.constantFrom(...POLICIES))
      .filter(([a, b]) => a.name !== b.name);
    await fc.assert(
      fc.asyncProperty(
        pair,
        fc.integer({ min: 2, max: 5 }),
        fc.integer({ min: 1, max: 4 }),
        fc.array(step, { minLength: 1, maxLength: 120 }),
        async ([a, b], maxKeys, cells, steps) => {
          await neverOverAdmits([a, b], maxKeys, cells, steps);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a summary big enough that keys rarely share a cell gives back exactly what each key had', async () => {
    const clock = manualClock({ startMs: Date.UTC(2031, 0, 1) });
    const store = memoryStore({ maxKeys: 10, summaryCells: 1 << 20 });
    const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 5, windowMs: 60_000 })] });
    // 100 keys at 1, 2, 3 or 4 of 5 each through a store of 10: 90 are let go.
    for (let k = 0; k < 100; k++) for (let i = 0; i <= k % 4; i++) limiter.limitSync(`k${k}`);
    expect(store.forcedEvictions).toBe(90);
    let remaining = 0;
    let exact = 0;
    for (let k = 0; k < 100; k++) {
      remaining += limiter.statusSync(`k${k}`).remaining;
      exact += 5 - (1 + (k % 4));
    }
    // Sharing a cell (probability about 100 / 2^20 per key) can only lower what is left.
    expect(remaining).toBeLessThanOrEqual(exact);
    expect(remaining).toBeGreaterThanOrEqual(exact - 3);
    expect(store.summaryBytes).toBe((1 << 20) * 4 * 8);
  });
});

describe('memory store summary: fixed size, validated option', () => {
  it('the summary is allocated once per policy, at the first key let go, and never grows', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 100, summaryCells: 1024 });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 5, periodMs: 3_600_000 })] });
    for (let i = 0; i < 100; i++) limiter.limitSync(`k${i}`);
    expect(store.summaryBytes).toBe(0);
    limiter.limitSync('one-more');
    // A meter's cell: expiry, penalty end, TAT.
    expect(store.summaryBytes).toBe(1024 * 3 * 8);
    for (let i = 0; i < 50_000; i++) limiter.limitSync(`flood-${i}`);
    expect(store.size).toBeLessThanOrEqual(100);
    expect(store.summaryBytes).toBe(1024 * 3 * 8);
    store.clear();
    expect(store.summaryBytes).toBe(0);
  });

  it('refuses a bad summaryCells, naming the option and the value', () => {
    for (const bad of [0, -1, 1.5, 2 ** 24 + 1, Number.NaN, '64' as unknown as number]) {
      let error: unknown;
      try {
        memoryStore({ summaryCells: bad });
      } catch (caught) {
        error = caught;
      }
      expect(isFloodgateError(error) && error.code).toBe('ERR_INVALID_OPTION');
      expect(String((error as Error).message)).toContain('summaryCells');
    }
    expect(memoryStore({ summaryCells: 2 ** 24 }).summaryCells).toBe(2 ** 24);
    expect(memoryStore().summaryCells).toBe(65_536);
  });

  it("a key's cell depends on a secret: the same keys land in other cells under another one", () => {
    const keys = Array.from({ length: 64 }, (_, i) => `client-${i}`);
    const cells = (k0: number, k1: number) => keys.map((key) => halfSipHash13(key, k0, k1) % 65_536);
    const a = cells(1, 2);
    const b = cells(3, 4);
    expect(a).toEqual(cells(1, 2));
    expect(a.filter((cell, i) => cell === b[i]).length).toBeLessThan(4);
    // Spread: 64 keys over 65,536 cells hardly ever share one.
    expect(new Set(a).size).toBeGreaterThan(60);
  });
});
