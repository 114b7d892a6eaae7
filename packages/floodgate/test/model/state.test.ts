import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  decide,
  emptyEvaluation,
  fixedWindow,
  gcra,
  inspect,
  type Policy,
  readState,
  type State,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/model/index.js';
import { policyArbitrary } from './arbitraries.js';

const T0 = Date.UTC(2030, 0, 1) * 1000;

/** The states a policy stores over a run of calls, each with the time it was read at. */
function run(policy: Policy, calls: { gapUs: number; cost: number }[]): { s: State | undefined; nowUs: number }[] {
  const c = compilePolicy(policy);
  const out = [emptyEvaluation()];
  let s: State | undefined;
  let nowUs = T0;
  const seen: { s: State | undefined; nowUs: number }[] = [];
  for (const call of calls) {
    nowUs += call.gapUs;
    seen.push({ s, nowUs });
    decide([c], [s], nowUs, call.cost, { commit: true }, out);
    const next = (out[0] as (typeof out)[0]).next;
    if (next !== undefined) s = [...next];
  }
  return seen;
}

describe('readState: a state as the evaluation reads it', () => {
  it('an interval token bucket left with float dust after a refill reads as full, as the evaluation does', () => {
    // 0.1 + 0.2 is 0.30000000000000004; a refill of 0.3 leaves 5.6e-17, which is dust: a full bucket.
    const c = compilePolicy(tokenBucket({ capacity: 1, refillAmount: 0.3, refillIntervalMs: 100, refill: 'interval' }));
    const s: State = [0, 0.1 + 0.2, T0];
    const at = T0 + 100_000;
    expect(0.1 + 0.2 - 0.3).toBeGreaterThan(0);
    const reading = readState(c, s, at);
    expect(reading.used).toBe(0);
    expect(reading.fields).toEqual([{ label: 'tokens used', value: 0, unit: 'number' }]);
    expect(inspect(c, s, at)).toMatchObject({ remaining: 1, resetAfterUs: 0 });
    // A µs earlier, nothing has come back yet, and the refill is due at 100 ms.
    expect(readState(c, s, at - 1)).toEqual({
      used: 0.1 + 0.2,
      blockedUntilUs: 0,
      fields: [
        { label: 'tokens used', value: 0.1 + 0.2, unit: 'number' },
        { label: 'next refill', value: at, unit: 'time' },
      ],
    });
  });

  it('the meter: the TAT ahead of now, in units of cost; penalty blocks are reported', () => {
    const c = compilePolicy(gcra({ limit: 5, periodMs: 60_000 }));
    expect(readState(c, undefined, T0)).toEqual({
      used: 0,
      blockedUntilUs: 0,
      fields: [
        { label: 'TAT − now', value: 0, unit: 'duration' },
        { label: 'emission interval T', value: 12_000_000, unit: 'duration' },
        { label: 'tolerance τ', value: 60_000_000, unit: 'duration' },
      ],
    });
    const reading = readState(c, [T0 + 5000, T0 + 36_000_000], T0 + 6_000_000);
    expect([reading.used, reading.blockedUntilUs, reading.fields[0]]).toEqual([
      2.5,
      T0 + 5000,
      { label: 'TAT (theoretical arrival time)', value: T0 + 36_000_000, unit: 'time' },
    ]);
  });

  it('windows roll over: a fixed window, the counter weighted by overlap, the log', () => {
    const fw = compilePolicy(fixedWindow({ limit: 5, windowMs: 1000 }));
    expect(readState(fw, [0, T0, 3], T0 + 999_999).used).toBe(3);
    expect(readState(fw, [0, T0, 3], T0 + 1_000_000).used).toBe(0);
    const sw = compilePolicy(slidingWindow({ limit: 10, windowMs: 1000 }));
    expect(readState(sw, [0, T0, 4, 0], T0 + 1_250_000).used).toBe(3);
    const log = compilePolicy(slidingLog({ limit: 10, windowMs: 1000 }));
    const reading = readState(log, [0, T0, 1, T0 + 500_000, 2], T0 + 1_000_000);
    expect(reading.used).toBe(2);
    expect(reading.fields).toEqual([
      { label: 'events in the window', value: 1, unit: 'number' },
      { label: 'newest event', value: T0 + 500_000, unit: 'time' },
    ]);
  });

  it('for every kind but the meter, what is used is what remaining is taken from', () => {
    const size = fc.oneof(fc.integer({ min: 1, max: 12 }), fc.double({ min: 1, max: 12, noNaN: true }));
    const policies = policyArbitrary({ size, refill: size, blockMs: fc.constant(0) });
    const calls = fc.array(
      fc.record({
        gapUs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400_000 })),
        cost: fc.constantFrom(0, 0.1, 0.2, 0.25, 1, 1, 2, 3),
      }),
      { minLength: 1, maxLength: 60 },
    );
    fc.assert(
      fc.property(policies, calls, (policy, list) => {
        const c = compilePolicy(policy);
        if (c.kind === 1) return;
        for (const { s, nowUs } of run(policy, list)) {
          const used = readState(c, s, nowUs).used;
          const floored = Math.floor(c.limit - used);
          expect(floored < 0 ? 0 : floored > c.limit ? Math.floor(c.limit) : floored).toBe(
            inspect(c, s, nowUs).remaining,
          );
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('what a denied call that counts writes', () => {
  it('a fixed window counting denied calls keeps a live block and none that has ended, as an admitted call keeps none', () => {
    // Denied calls count and denials start a 1 s block: the block, once ended, must not stay in the state,
    // or a store that pruned the ended state and one that kept it would hold different rows.
    const c = compilePolicy(fixedWindow({ limit: 2, windowMs: 600, countDenied: true, blockMs: 1000 }));
    const out = [emptyEvaluation()];
    const ended: State = [T0 - 5_000_000, T0 - 9_000_000, 2];
    for (const cost of [7, 3, 2.5]) {
      decide([c], [ended], T0, cost, { commit: true }, out);
      const e = out[0] as (typeof out)[0];
      expect(e.allowed).toBe(false);
      // Limit 2, cost above it: counted, no new block (exceeds-capacity); 3 and 2.5 likewise beyond 2.
      expect(e.next?.slice(1)).toEqual([T0, cost]);
      expect(e.next?.[0]).toBe(0);
    }
    decide([c], [undefined], T0, 7, { commit: true }, out);
    expect((out[0] as (typeof out)[0]).next).toEqual([0, T0, 7]);
    // A block still live is kept: a cost above the limit is counted even in a penalty box.
    const live: State = [T0 + 30_000_000, T0, 3];
    decide([c], [live], T0 + 100_000, 5, { commit: true }, out);
    expect((out[0] as (typeof out)[0]).reason).toBe('exceeds-capacity');
    expect((out[0] as (typeof out)[0]).next).toEqual([T0 + 30_000_000, T0, 8]);
  });
});
