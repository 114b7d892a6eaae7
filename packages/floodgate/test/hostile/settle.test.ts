// Hostile settles. A client that holds a decision may replay it, alter it, send it for another key, or
// settle it at any cost it likes. Each must be refused with a typed error before any store call, and no
// settle may give back more than its own call was charged. What the limiter remembers to refuse a second
// settle is bounded and expires.
import { describe, expect, it } from 'vitest';
import { createLimiter, type Decision, gcra, isFloodgateError, memoryStore, type Store } from '../../src/index.js';
import { Settler } from '../../src/limiter/settle.js';
import { compilePolicy } from '../../src/model/index.js';
import { manualClock } from '../../src/testing/index.js';

const policy = gcra({ limit: 10, periodMs: 1000 });

/** A memory store that counts its settles and every other call. */
function counted(): { store: Store; settles: () => number; calls: () => number } {
  const inner = memoryStore();
  let settles = 0;
  let calls = 0;
  const store: Store = {
    name: 'counted',
    hasOwnClock: false,
    decide: (r) => {
      calls++;
      return inner.decide(r);
    },
    reset: (p, k, c) => {
      calls++;
      return inner.reset(p, k, c);
    },
    settle: (r) => {
      settles++;
      calls++;
      return inner.settle(r);
    },
  };
  return { store, settles: () => settles, calls: () => calls };
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!isFloodgateError(error)) throw new Error(`expected a typed refusal, got ${String(error)}`);
  return `${error.code} ${error.option}`;
}

describe('hostile settles', () => {
  it('a replayed decision is refused before the store, concurrent replays included', async () => {
    const { store, settles } = counted();
    const limiter = createLimiter({ store, clock: manualClock({ startMs: 1e6 }), policies: [policy] });
    const decision = await limiter.limit('k', { cost: 10, settle: true });
    // 20 settles of the same decision at once: one reaches the store.
    const outcomes = await Promise.allSettled(
      Array.from({ length: 20 }, () => limiter.settle('k', structuredClone(decision), { cost: 0 })),
    );
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    expect(
      outcomes.filter((o) => o.status === 'rejected' && isFloodgateError(o.reason) && o.reason.option === 'decision'),
    ).toHaveLength(19);
    expect(settles()).toBe(1);
    // The 10 units came back once: the key is untouched, not owed −90.
    expect((await limiter.check('k', { cost: 10 })).allowed).toBe(true);
    expect((await limiter.check('k', { cost: 11 })).reason).toBe('exceeds-capacity');
    await limiter.limit('k', { cost: 10 });
    expect((await limiter.check('k', { cost: 1 })).allowed).toBe(false);
  });

  it('an altered, foreign or malformed settlement is refused before the store', async () => {
    const { store, calls } = counted();
    const clock = manualClock({ startMs: 1e6 });
    const limiter = createLimiter({ store, clock, policies: [policy], prefix: 'a' });
    const other = createLimiter({ store, clock, policies: [policy], prefix: 'b' });
    const decision = await limiter.limit('k', { cost: 1, settle: true });
    const foreign = await other.limit('k', { cost: 1, settle: true });
    const s = decision.settlement as NonNullable<Decision['settlement']>;
    const before = calls();
    const forged: unknown[] = [
      { ...decision, settlement: { ...s, cost: 1e6 } },
      { ...decision, settlement: { ...s, cost: -5 } },
      { ...decision, settlement: { ...s, cost: Number.NaN } },
      { ...decision, settlement: { ...s, atUs: s.atUs + 10_000_000 } },
      { ...decision, settlement: { ...s, atUs: 1.5 } },
      { ...decision, settlement: { ...s, expiresAtMs: Number.POSITIVE_INFINITY } },
      { ...decision, settlement: { ...s, id: 'x'.repeat(10_000) } },
      { ...decision, settlement: { ...s, policies: new Array(1000).fill('p') } },
      { ...decision, settlement: { ...s, signature: '' } },
      { ...decision, settlement: { ...s, signature: 42 } },
      { ...decision, settlement: { ...s, signature: undefined } },
      { ...decision, settlement: [] },
      foreign,
      null,
      'decision',
      42,
    ];
    for (const d of forged) {
      expect(await refusal(limiter.settle('k', d as Decision, { cost: 0 }))).toMatch(
        /^ERR_INVALID_OPTION (decision|options)$/,
      );
    }
    // The right settlement on the wrong key, or with other policies.
    expect(await refusal(limiter.settle('k2', decision, { cost: 0 }))).toBe('ERR_INVALID_OPTION decision');
    expect(
      await refusal(
        limiter.settle('k', decision, { cost: 0, policies: gcra({ limit: 10, periodMs: 1000, name: 'x' }) }),
      ),
    ).toBe('ERR_INVALID_OPTION policies');
    expect(calls()).toBe(before);
  });

  it('a cost that is not a finite number ≥ 0 is refused before the store: tiny, huge, NaN', async () => {
    const { store, calls } = counted();
    const limiter = createLimiter({ store, clock: manualClock({ startMs: 1e6 }), policies: [policy] });
    const decision = await limiter.limit('k', { cost: 1, settle: true });
    const before = calls();
    for (const cost of [Number.NaN, -0.5, -1e-300, 5e-324, 1e-10, 2 ** 53, Number.POSITIVE_INFINITY, '1', null, {}]) {
      expect(await refusal(limiter.settle('k', decision, { cost } as unknown as { cost: number }))).toBe(
        'ERR_INVALID_COST cost',
      );
    }
    expect(calls()).toBe(before);
    // The largest accepted cost is a debt kept at the cap, not an overflow: the key is blocked, exactly.
    expect(await limiter.settle('k', decision, { cost: Number.MAX_SAFE_INTEGER })).toBe(true);
    const status = await limiter.status('k');
    expect(status.allowed).toBe(false);
    expect(Number.isFinite(status.retryAfterMs)).toBe(true);
  });

  it('a settle gives back at most what its own call was charged, never what others were', async () => {
    const clock = manualClock({ startMs: 1e6 });
    const limiter = createLimiter({ clock, policies: [policy] });
    const mine = await limiter.limit('k', { cost: 3, settle: true });
    await limiter.limit('k', { cost: 5 });
    // Settling at 0 takes back my 3 units; the other caller's 5 stay charged.
    await limiter.settle('k', mine, { cost: 0 });
    expect((await limiter.status('k')).remaining).toBe(5);
    // A second try, on a copy, takes nothing more.
    await expect(limiter.settle('k', { ...mine }, { cost: 0 })).rejects.toMatchObject({ option: 'decision' });
    expect((await limiter.status('k')).remaining).toBe(5);
  });

  it('what the limiter remembers is bounded: settled ids expire with their settlements', () => {
    const c = compilePolicy(policy);
    const settler = new Settler('p', 1000);
    let nowMs = 0;
    for (let i = 0; i < 10_000; i++) {
      const s = settler.issue('k', 1, [c], nowMs * 1000, nowMs);
      const checked = settler.check('k', { settlement: s }, nowMs);
      if (checked === undefined) throw new Error('issued settlement not found');
      settler.mark(checked.settlement);
      nowMs += 1;
    }
    // One settle per ms, each remembered for 1000 ms: about 1000 at a time, not 10 000.
    expect(settler.remembered).toBeLessThanOrEqual(1001);
    expect(settler.remembered).toBeGreaterThanOrEqual(999);
  });
});

describe('settles that fail at the store', () => {
  /** A memory store whose settles fail after being applied, as a timeout after the write would. */
  function flaky(): Store {
    const inner = memoryStore();
    return {
      name: 'flaky',
      hasOwnClock: false,
      decide: (r) => inner.decide(r),
      reset: (p, k, c) => inner.reset(p, k, c),
      settle: async (r) => {
        await inner.settle(r);
        throw new Error('ETIMEDOUT after the write');
      },
    };
  }

  it('a refund that failed is not tried again: the same units never come back twice', async () => {
    const limiter = createLimiter({ store: flaky(), clock: manualClock({ startMs: 1e6 }), policies: [policy] });
    const decision = await limiter.limit('k', { cost: 10, settle: true });
    await expect(limiter.settle('k', decision, { cost: 0 })).rejects.toMatchObject({ name: 'FloodgateError' });
    expect(await refusal(limiter.settle('k', decision, { cost: 0 }))).toBe('ERR_INVALID_OPTION decision');
  });

  it('a debt that failed may be settled again: at worst it is charged twice, never forgotten', async () => {
    const limiter = createLimiter({ store: flaky(), clock: manualClock({ startMs: 1e6 }), policies: [policy] });
    const decision = await limiter.limit('k', { cost: 1, settle: true });
    await expect(limiter.settle('k', decision, { cost: 3 })).rejects.toMatchObject({ name: 'FloodgateError' });
    await expect(limiter.settle('k', decision, { cost: 3 })).rejects.toMatchObject({ name: 'FloodgateError' });
    // Both were applied by this store: 1 + 2 + 2 owed.
    expect((await limiter.status('k')).remaining).toBe(5);
  });
});
