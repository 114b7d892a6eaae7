import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  fixedWindow,
  gcra,
  leakyBucket,
  MAX_DEBT_US,
  meterCharge,
  settlePolicy,
  settleRefusal,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/model/index.js';

const NOW = 1_000_000_000;

describe('settlePolicy (the meter)', () => {
  // 10 per second: T = 100 000 µs, burst 10.
  const c = compilePolicy(gcra({ limit: 10, periodMs: 1000 }));

  it('charges a debt past the limit: the TAT moves by the difference of the two charges', () => {
    // Admitted with an estimate of 2 at NOW on a fresh key: TAT = NOW + 2T.
    const admitted = [0, NOW + 2 * c.a];
    // Actually 30: 28 more, far past the burst of 10.
    const next = settlePolicy(c, admitted, NOW + 50_000, NOW, 2, 30);
    expect(next).toEqual([0, NOW + 30 * c.a]);
  });

  it('counts a debt from now on a key that owes nothing any more (drained or expired)', () => {
    expect(settlePolicy(c, undefined, NOW, NOW - 10_000_000, 1, 4)).toEqual([0, NOW + 3 * c.a]);
    expect(settlePolicy(c, [0, NOW - 5], NOW, NOW - 10_000_000, 1, 4)).toEqual([0, NOW + 3 * c.a]);
  });

  it('keeps a penalty slot as it is', () => {
    expect(settlePolicy(c, [NOW + 7, NOW + c.a], NOW, NOW, 1, 2)?.[0]).toBe(NOW + 7);
  });

  it('gives back what a smaller actual cost leaves, only the part still ahead of now', () => {
    const admitted = [0, NOW + 5 * c.a];
    // At once: all of the difference (5 − 2 = 3 units).
    expect(settlePolicy(c, admitted, NOW, NOW, 5, 2)).toEqual([0, NOW + 2 * c.a]);
    // 4.5 units later only half a unit of the estimate still lies ahead: that much comes back.
    expect(settlePolicy(c, admitted, NOW + 450_000, NOW, 5, 2)).toEqual([0, NOW + 5 * c.a - 50_000]);
    // Once the estimate has drained, nothing comes back: those units were usable by others already.
    expect(settlePolicy(c, admitted, NOW + 500_000, NOW, 5, 0)).toBeUndefined();
  });

  it('never gives back more than the call was charged, whatever the state', () => {
    // Later calls pushed the TAT: still at most the estimate's charge comes off.
    const busy = [0, NOW + 100 * c.a];
    expect(settlePolicy(c, busy, NOW, NOW, 3, 0)).toEqual([0, NOW + 97 * c.a]);
  });

  it('changes nothing when the actual cost is the estimate', () => {
    expect(settlePolicy(c, [0, NOW + c.a], NOW, NOW, 1, 1)).toBeUndefined();
  });

  it('keeps every debt up to MAX_DEBT_US owed, and no more (every TAT stays exact)', () => {
    const huge = settlePolicy(c, undefined, NOW, NOW, 1, Number.MAX_SAFE_INTEGER) as number[];
    expect(huge[1]).toBe(NOW + MAX_DEBT_US);
    expect(Number.isSafeInteger(huge[1])).toBe(true);
    // A debt on a key at the cap keeps it there, never beyond.
    expect(settlePolicy(c, huge, NOW, NOW, 1, 2)?.[1]).toBe(NOW + MAX_DEBT_US);
  });

  it('charges fractional costs in whole µs as the decision does', () => {
    const t = compilePolicy(tokenBucket({ capacity: 3, refillAmount: 3, refillIntervalMs: 2000 }));
    const next = settlePolicy(t, undefined, NOW, NOW, 0.5, 1.25) as number[];
    expect((next[1] as number) - NOW).toBe(meterCharge(1.25, t.a) - meterCharge(0.5, t.a));
  });
});

describe('settleRefusal', () => {
  it('admits the meters, and says why for the rest', () => {
    expect(settleRefusal(compilePolicy(gcra({ limit: 5, periodMs: 1000 })))).toBeUndefined();
    expect(
      settleRefusal(compilePolicy(tokenBucket({ capacity: 5, refillAmount: 1, refillIntervalMs: 1000 }))),
    ).toBeUndefined();
    expect(settleRefusal(compilePolicy(leakyBucket({ capacity: 5, leakPerSecond: 1 })))).toBeUndefined();
    for (const policy of [
      fixedWindow({ limit: 5, windowMs: 1000 }),
      slidingWindow({ limit: 5, windowMs: 1000 }),
      slidingLog({ limit: 5, windowMs: 1000 }),
      tokenBucket({ capacity: 5, refillAmount: 5, refillIntervalMs: 1000, refill: 'interval' }),
      leakyBucket({ capacity: 5, leakPerSecond: 1, mode: 'queue' }),
      gcra({ limit: 5, periodMs: 1000, blockMs: 1000 }),
    ]) {
      expect(settleRefusal(compilePolicy(policy))).toEqual(expect.any(String));
    }
  });
});
