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
  syncedLimiter,
  tokenBucket,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

const START_MS = Date.UTC(2030, 0, 1);
const HOUR = 3_600_000;

/** Several "processes" (synced limiters with their own local counts) over one store and one clock. */
function fleet(policies: Policy[], options: { processes: number; syncMs?: number; localBudget?: number }) {
  const clock = manualClock({ startMs: START_MS });
  const store = memoryStore();
  const limiter = createLimiter({ store, clock, policies, prefix: 'p' });
  const processes = Array.from({ length: options.processes }, () =>
    syncedLimiter(createLimiter({ store, clock, policies, prefix: 'p' }), {
      clock,
      autoSync: false,
      syncMs: options.syncMs ?? 100,
      ...(options.localBudget === undefined ? {} : { localBudget: options.localBudget }),
    }),
  );
  return { clock, limiter, processes, one: processes[0] as (typeof processes)[0] };
}

describe('synced limiter', () => {
  it('decides locally within its budget, and the store counts every unit at the next sync', async () => {
    const { one, limiter } = fleet([fixedWindow({ limit: 100, windowMs: HOUR })], { processes: 1, localBudget: 10 });
    // The first call has no count to decide from: the store decides it.
    expect((await one.limit('hot')).allowed).toBe(true);
    for (let i = 0; i < 10; i++) {
      const decision = await one.limit('hot');
      expect(decision.allowed).toBe(true);
      expect(decision.remaining).toBe(98 - i);
    }
    expect(one.stats).toMatchObject({ storeDecisions: 1, localDecisions: 10 });
    // The store has not seen the local ten yet.
    expect((await limiter.status('hot')).remaining).toBe(99);
    // The budget is spent: the next call pushes the ten, then the store decides it.
    expect((await one.limit('hot')).allowed).toBe(true);
    expect((await limiter.status('hot')).remaining).toBe(88);
    for (let i = 0; i < 4; i++) expect((await one.limit('hot')).allowed).toBe(true);
    await one.sync();
    expect((await limiter.status('hot')).remaining).toBe(84);
    expect(one.stats.pushes).toBe(2);
  });

  it('one process alone never admits more than the policy', async () => {
    const { one, limiter } = fleet([gcra({ limit: 50, periodMs: HOUR })], { processes: 1, localBudget: 7 });
    let admitted = 0;
    for (let i = 0; i < 200; i++) {
      if ((await one.limit('k')).allowed) admitted++;
      if (i % 13 === 0) await one.sync();
    }
    await one.close();
    expect(admitted).toBe(50);
    expect((await limiter.status('k')).remaining).toBe(0);
  });

  it('over-admits at most processes × localBudget, and owes what the store could not take', async () => {
    const limit = 100;
    const budget = 8;
    const processes = 4;
    const {
      processes: fleetOf,
      limiter,
      clock,
    } = fleet([fixedWindow({ limit, windowMs: HOUR })], {
      processes,
      localBudget: budget,
    });
    let admitted = 0;
    // Round-robin: every process spends its budget before any of them syncs.
    for (let round = 0; round < 100; round++) {
      for (const p of fleetOf) {
        for (let i = 0; i < budget + 1; i++) if ((await p.limit('hot')).allowed) admitted++;
      }
      clock.advance(10);
      await Promise.all(fleetOf.map((p) => p.sync()));
    }
    for (const p of fleetOf) await p.close();
    expect(admitted).toBeGreaterThanOrEqual(limit);
    expect(admitted - limit).toBeLessThanOrEqual(processes * budget);
    expect((await limiter.status('hot')).remaining).toBe(0);
    // Something was over-admitted here, and was owed, not forgotten.
    expect(fleetOf.reduce((n, p) => n + p.stats.unitsOwed, 0)).toBeGreaterThan(0);
  });

  it('owed units are charged once the policy has room again', async () => {
    const {
      processes: [a, b],
      limiter,
      clock,
    } = fleet([gcra({ limit: 10, periodMs: 1000 })], {
      processes: 2,
      localBudget: 5,
    });
    if (a === undefined || b === undefined) throw new Error('two processes');
    // Both learn the count (10 left, one call each spent), then spend their budgets locally.
    expect((await a.limit('k')).allowed).toBe(true);
    expect((await b.limit('k')).allowed).toBe(true);
    for (let i = 0; i < 5; i++) {
      expect((await a.limit('k')).allowed).toBe(true);
      expect((await b.limit('k')).allowed).toBe(true);
    }
    // 12 admitted for 10: a's push fits (3 of b's 5 do), b owes 2 and admits nothing locally.
    await a.sync();
    await b.sync();
    expect((await limiter.status('k')).remaining).toBe(0);
    expect(b.stats.unitsOwed).toBe(2);
    expect((await b.limit('k')).allowed).toBe(false);
    // One emission interval later the store has room for 1 unit: b pays 1, still owes 1.
    clock.advance(100);
    await b.sync();
    expect((await b.limit('k')).allowed).toBe(false);
    clock.advance(100);
    await b.sync();
    expect((await limiter.status('k')).remaining).toBe(0);
    // Paid: the next interval's unit is b's to admit.
    clock.advance(100);
    expect((await b.limit('k')).allowed).toBe(true);
  });

  it('random fleets: admitted − limit ≤ processes × localBudget, and the store counts at most the limit', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 30 }),
        fc.integer({ min: 0, max: 12 }),
        fc.array(fc.tuple(fc.nat(4), fc.integer({ min: 1, max: 3 }), fc.boolean()), { minLength: 1, maxLength: 300 }),
        async (processes, limit, rawBudget, steps) => {
          const localBudget = Math.min(rawBudget, limit);
          const { processes: all, limiter } = fleet([fixedWindow({ limit, windowMs: HOUR })], {
            processes,
            localBudget,
          });
          let admitted = 0;
          for (const [which, cost, sync] of steps) {
            const p = all[which % processes];
            if (p === undefined) throw new Error('process');
            if ((await p.limit('k', { cost })).allowed) admitted += cost;
            if (sync) await p.sync();
          }
          for (const p of all) await p.close();
          expect(admitted - limit).toBeLessThanOrEqual(processes * localBudget);
          expect((await limiter.status('k')).remaining).toBeGreaterThanOrEqual(0);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('the default budget is what the tightest policy refills in syncMs, at most its limit', () => {
    const store = memoryStore();
    const make = (policies: Policy[], syncMs: number) =>
      syncedLimiter(createLimiter({ store, policies }), { syncMs, autoSync: false }).localBudget;
    expect(make([gcra({ limit: 1000, periodMs: 1000 })], 100)).toBe(100);
    expect(make([gcra({ limit: 1000, periodMs: 1000 }), fixedWindow({ limit: 60, windowMs: 60_000 })], 100)).toBe(0.1);
    expect(make([tokenBucket({ capacity: 20, refillAmount: 50, refillIntervalMs: 10 })], 1000)).toBe(20);
    expect(make([leakyBucket({ capacity: 100, leakPerSecond: 10 })], 500)).toBe(5);
    expect(make([slidingWindow({ limit: 100, windowMs: 1000 })], 50)).toBe(5);
  });

  it('refuses what it cannot decide locally, with typed errors', () => {
    const store = memoryStore();
    const expectCode = (run: () => unknown, code: string, text: RegExp) => {
      try {
        run();
        expect.unreachable('should throw');
      } catch (error) {
        expect(isFloodgateError(error) && error.code).toBe(code);
        expect(String(error)).toMatch(text);
      }
    };
    const with_ = (policies: Policy[]) => createLimiter({ store, policies });
    expectCode(() => syncedLimiter(createLimiter({ store })), 'ERR_INVALID_POLICY', /policies of its own/);
    expectCode(
      () => syncedLimiter(with_([slidingLog({ limit: 5, windowMs: 1000, countDenied: true })])),
      'ERR_INVALID_POLICY',
      /countDenied/,
    );
    expectCode(
      () => syncedLimiter(with_([gcra({ limit: 5, periodMs: 1000, blockMs: 10 })])),
      'ERR_INVALID_POLICY',
      /blockMs/,
    );
    const ok = with_([gcra({ limit: 5, periodMs: 1000 })]);
    expectCode(() => syncedLimiter(ok, { syncMs: 0 }), 'ERR_INVALID_OPTION', /syncMs/);
    expectCode(() => syncedLimiter(ok, { localBudget: 6 }), 'ERR_INVALID_OPTION', /localBudget.*smallest limit/);
    expectCode(() => syncedLimiter(ok, { localBudget: Number.NaN }), 'ERR_INVALID_OPTION', /localBudget/);
    expectCode(() => syncedLimiter(ok, { maxKeys: 0 }), 'ERR_INVALID_OPTION', /maxKeys/);
  });

  it('refuses a bad cost or key before any store call, and answers checks from the store', async () => {
    const { one, limiter } = fleet([gcra({ limit: 5, periodMs: HOUR })], { processes: 1, localBudget: 2 });
    await expect(one.limit('k', { cost: -1 })).rejects.toMatchObject({ code: 'ERR_INVALID_COST' });
    await expect(one.limit('k', { cost: 5e-324 })).rejects.toMatchObject({ code: 'ERR_INVALID_COST' });
    await expect(one.limit('')).rejects.toMatchObject({ code: 'ERR_INVALID_KEY' });
    expect(one.stats.storeDecisions).toBe(0);
    expect((await one.limit('k', { cost: 0 })).remaining).toBe(5);
    expect(one.keys).toBe(0);
    // A long key is decided at the store and never kept.
    expect((await one.limit('x'.repeat(500))).allowed).toBe(true);
    expect(one.keys).toBe(0);
    expect((await limiter.status('x'.repeat(500))).remaining).toBe(4);
  });

  it('holds at most maxKeys, never drops a key with units pending, and counts every unit', async () => {
    const clock = manualClock({ startMs: START_MS });
    const store = memoryStore();
    const policies = [fixedWindow({ limit: 10, windowMs: HOUR })];
    const limiter = createLimiter({ store, clock, policies });
    const synced = syncedLimiter(createLimiter({ store, clock, policies }), {
      clock,
      autoSync: false,
      localBudget: 5,
      maxKeys: 3,
    });
    for (let k = 0; k < 10; k++) {
      for (let i = 0; i < 4; i++) expect((await synced.limit(`k${k}`)).allowed).toBe(true);
      expect(synced.keys).toBeLessThanOrEqual(3);
    }
    // The first three keys hold 3 pending units each: the other seven went to the store, every call.
    expect(synced.stats).toMatchObject({ localDecisions: 9, storeDecisions: 3 + 7 * 4 });
    for (let k = 0; k < 3; k++) expect((await limiter.status(`k${k}`)).remaining).toBe(9);
    // Once pushed, a key with nothing pending makes room for a new one.
    await synced.sync();
    expect((await synced.limit('k10')).allowed).toBe(true);
    expect(synced.keys).toBe(3);
    await synced.close();
    for (let k = 0; k < 11; k++) expect((await limiter.status(`k${k}`)).remaining).toBe(k === 10 ? 9 : 6);
  });

  it('drops keys unused for a whole cycle; a dropped key is decided by the store again', async () => {
    const { one } = fleet([gcra({ limit: 100, periodMs: HOUR })], { processes: 1, localBudget: 10 });
    await one.limit('a');
    await one.limit('a');
    await one.sync();
    expect(one.keys).toBe(1);
    await one.sync();
    expect(one.keys).toBe(0);
    await one.limit('a');
    expect(one.stats.storeDecisions).toBe(2);
  });

  it('sees other processes within one sync', async () => {
    const {
      processes: [a, b],
    } = fleet([fixedWindow({ limit: 20, windowMs: HOUR })], {
      processes: 2,
      localBudget: 5,
    });
    if (a === undefined || b === undefined) throw new Error('two processes');
    await a.limit('k');
    await b.limit('k');
    for (let i = 0; i < 5; i++) await a.limit('k');
    await a.sync();
    await b.sync();
    // b read back a's six and its own one.
    expect((await b.limit('k')).remaining).toBe(12);
  });

  it('a closed synced limiter refuses calls', async () => {
    const { one } = fleet([gcra({ limit: 10, periodMs: 1000 })], { processes: 1 });
    await one.close();
    await expect(one.limit('k')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });
});
