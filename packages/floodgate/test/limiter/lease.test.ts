import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  leasedLimiter,
  memoryStore,
  type Policy,
  type Store,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

const START_MS = Date.UTC(2030, 0, 1);

function setup(policies: Policy[], options: { size: number; ttlMs?: number; processes?: number }) {
  const clock = manualClock({ startMs: START_MS });
  const store = memoryStore();
  const limiter = createLimiter({ store, clock, policies, prefix: 'p' });
  const processes = Array.from({ length: options.processes ?? 1 }, () =>
    leasedLimiter(createLimiter({ store, clock, policies, prefix: 'p' }), {
      size: options.size,
      clock,
      ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
    }),
  );
  return { clock, store, limiter, processes, lease: processes[0] as (typeof processes)[0] };
}

describe('leased limiter', () => {
  it('admits from one store call per lease, and gives the unused units back exactly', async () => {
    const { lease, limiter } = setup([gcra({ limit: 100, periodMs: 3_600_000 })], { size: 10 });
    for (let i = 0; i < 25; i++) expect((await lease.limit('hot')).allowed).toBe(true);
    expect(lease.stats).toMatchObject({ leases: 3, localDecisions: 22 });
    // Three leases of 10 are out; 5 of the last are unused.
    expect((await limiter.status('hot')).remaining).toBe(70);
    await lease.close();
    expect(lease.stats).toMatchObject({ refunds: 1, unitsReturned: 5 });
    expect((await limiter.status('hot')).remaining).toBe(75);
  });

  it('several processes on one key admit exactly the limit, never more', async () => {
    const { processes, limiter } = setup([fixedWindow({ limit: 53, windowMs: 3_600_000 })], {
      size: 7,
      processes: 4,
    });
    let admitted = 0;
    for (let round = 0; round < 30; round++) {
      for (const p of processes) if ((await p.limit('hot')).allowed) admitted++;
    }
    expect(admitted).toBe(53);
    for (const p of processes) await p.close();
    expect((await limiter.status('hot')).remaining).toBe(0);
  });

  it('at the boundary a smaller lease takes what is left, then the call alone is denied', async () => {
    const { lease, limiter, store } = setup([gcra({ limit: 10, periodMs: 3_600_000 })], { size: 4 });
    let admitted = 0;
    for (let i = 0; i < 14; i++) if ((await lease.limit('k')).allowed) admitted++;
    expect(admitted).toBe(10);
    expect((await limiter.status('k')).remaining).toBe(0);
    // A denial is remembered until it may pass: no store call meanwhile.
    const calls = lease.stats.storeCalls;
    const denied = await lease.limit('k');
    expect(denied).toMatchObject({ allowed: false, reason: 'limit' });
    expect(lease.stats.storeCalls).toBe(calls);
    expect(lease.stats.cachedDenials).toBeGreaterThan(0);
    expect(store.size).toBe(1);
  });

  it('a lease is spent for ttlMs at most, then what is left goes back', async () => {
    const { lease, limiter, clock } = setup([gcra({ limit: 100, periodMs: 3_600_000 })], { size: 10, ttlMs: 50 });
    await lease.limit('k');
    expect((await limiter.status('k')).remaining).toBe(90);
    clock.advance(60);
    await lease.limit('k');
    // The expired lease gave its 9 back; a second lease of 10 is out.
    expect(lease.stats).toMatchObject({ leases: 2, refunds: 1, unitsReturned: 9 });
    expect((await limiter.status('k')).remaining).toBe(89);
    await lease.flush();
    expect(lease.stats).toMatchObject({ refunds: 2, unitsReturned: 18 });
    expect((await limiter.status('k')).remaining).toBe(98);
  });

  it('a lease counted in a fixed window is not spent in the next one', async () => {
    const { lease, clock } = setup([fixedWindow({ limit: 10, windowMs: 1000 })], { size: 6, ttlMs: 10_000 });
    clock.advance(900);
    await lease.limit('k');
    clock.advance(150);
    await lease.limit('k');
    expect(lease.stats.leases).toBe(2);
  });

  it('without the store, the failure policy decides each call and no lease is taken', async () => {
    const inner = memoryStore();
    let up = true;
    const store: Store = {
      name: 'switchable',
      hasOwnClock: false,
      decide: (request) => (up ? inner.decide(request) : Promise.reject(new Error('ECONNREFUSED'))),
      reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
      refund: (request) => (up ? inner.refund(request) : Promise.reject(new Error('ECONNREFUSED'))),
    };
    const clock = manualClock({ startMs: START_MS });
    const limiter = createLimiter({
      store,
      clock,
      policies: [gcra({ limit: 100, periodMs: 1000 })],
      failure: 'closed',
      breaker: false,
    });
    const lease = leasedLimiter(limiter, { size: 10, clock });
    up = false;
    expect(await lease.limit('k')).toMatchObject({ allowed: false, reason: 'degraded' });
    expect(lease.stats.leases).toBe(0);
    up = true;
    expect((await lease.limit('k')).allowed).toBe(true);
    up = false;
    // Refunds that fail are reported, never thrown: the units come back when the lease expires.
    const errors: string[] = [];
    limiter.on('storeError', (e) => errors.push(e.error.code));
    await lease.close();
    expect(errors).toEqual(['ERR_STORE_UNAVAILABLE']);
  });

  it('refuses policies whose limit needs every call at the store, with a typed error', () => {
    const cases: Policy[] = [
      leakyBucket({ capacity: 5, leakPerSecond: 1, mode: 'queue' }),
      slidingLog({ limit: 5, windowMs: 1000, minGapMs: 10 }),
      slidingLog({ limit: 5, windowMs: 1000, countDenied: true }),
      gcra({ limit: 5, periodMs: 1000, blockMs: 1000 }),
    ];
    for (const policy of cases) {
      expect(() => leasedLimiter(createLimiter({ policies: [policy] }), { size: 1 })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_POLICY', option: 'policies[0]' }),
      );
    }
    const ok = createLimiter({ policies: [gcra({ limit: 5, periodMs: 1000 })] });
    expect(() => leasedLimiter(ok, { size: 6 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(() => leasedLimiter(ok, { size: 0 })).toThrow(/size/);
    expect(() => leasedLimiter(ok, { size: 1, ttlMs: -1 })).toThrow(/ttlMs/);
    expect(() => leasedLimiter({} as never, { size: 1 })).toThrow(/limiter/);
    const noRefund: Store = { name: 'x', hasOwnClock: false, decide: memoryStore().decide, reset: async () => {} };
    expect(() =>
      leasedLimiter(createLimiter({ store: noRefund, policies: [gcra({ limit: 5, periodMs: 1000 })] }), { size: 1 }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'store' }));
  });
});

/**
 * The bound, checked against the model's own guarantee: every leased unit was counted by the store at
 * its lease's time g and admitted within [g, g + ttl]; so over any span, admissions never exceed what the
 * policy allows over that span widened by ttl, and within a fixed window never exceed the limit.
 */
describe('leases never admit more than the policy allows (property)', () => {
  const TTL_MS = 40;
  const policies: { policy: Policy; check: (admitted: { atUs: number; cost: number }[]) => void }[] = [
    {
      policy: gcra({ limit: 10, periodMs: 1000 }),
      check: (admitted) => withinSpans(admitted, (spanUs) => 10 + (spanUs + TTL_MS * 1000) / 100_000),
    },
    {
      policy: tokenBucket({ capacity: 8, refillAmount: 2, refillIntervalMs: 300, refill: 'interval' }),
      check: (admitted) => withinSpans(admitted, (spanUs) => 8 + Math.ceil((spanUs + TTL_MS * 1000) / 300_000) * 2),
    },
    {
      policy: fixedWindow({ limit: 9, windowMs: 500 }),
      check: (admitted) => {
        const totals = new Map<number, number>();
        for (const a of admitted)
          totals.set(Math.floor(a.atUs / 500_000), (totals.get(Math.floor(a.atUs / 500_000)) ?? 0) + a.cost);
        for (const total of totals.values()) expect(total).toBeLessThanOrEqual(9 + 1e-9);
      },
    },
    {
      policy: slidingWindow({ limit: 9, windowMs: 500 }),
      check: (admitted) => withinSpans(admitted, (spanUs) => (spanUs < 500_000 - TTL_MS * 1000 ? 18 : Infinity)),
    },
    {
      policy: slidingLog({ limit: 7, windowMs: 400 }),
      check: (admitted) => withinSpans(admitted, (spanUs) => (spanUs < 400_000 - TTL_MS * 1000 ? 7 : Infinity)),
    },
  ];
  for (const { policy, check } of policies) {
    it(policy.name, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.record({
              gapUs: fc.oneof(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 0, max: 120_000 })),
              who: fc.integer({ min: 0, max: 3 }),
              cost: fc.constantFrom(1, 1, 1, 0.5, 2),
            }),
            { maxLength: 150 },
          ),
          async (calls) => {
            const clock = manualClock({ startMs: START_MS });
            const store = memoryStore();
            const direct = createLimiter({ store, clock, policies: [policy] });
            const leased = [0, 1, 2].map(() =>
              leasedLimiter(createLimiter({ store, clock, policies: [policy] }), { size: 3, ttlMs: TTL_MS, clock }),
            );
            const admitted: { atUs: number; cost: number }[] = [];
            for (const call of calls) {
              clock.advanceUs(call.gapUs);
              const decision =
                call.who === 3
                  ? await direct.limit('k', { cost: call.cost })
                  : await (leased[call.who] as (typeof leased)[0]).limit('k', { cost: call.cost });
              if (decision.allowed) admitted.push({ atUs: clock.nowUs(), cost: call.cost });
            }
            for (const l of leased) await l.close();
            check(admitted);
          },
        ),
        { numRuns: 150 },
      );
    });
  }
});

function withinSpans(admitted: { atUs: number; cost: number }[], allowance: (spanUs: number) => number): void {
  for (let i = 0; i < admitted.length; i++) {
    let sum = 0;
    for (let j = i; j < admitted.length; j++) {
      sum += (admitted[j] as { cost: number }).cost;
      const span = (admitted[j] as { atUs: number }).atUs - (admitted[i] as { atUs: number }).atUs;
      expect(sum).toBeLessThanOrEqual(allowance(span) + 1e-9);
    }
  }
}
