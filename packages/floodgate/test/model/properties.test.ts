import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLimiter, type Decision, memoryStore, type Policy } from '../../src/index.js';
import { compilePolicy, decide, emptyEvaluation, kindOf, type State } from '../../src/model/index.js';
import { manualClock } from '../../src/testing/index.js';
import { policyArbitrary } from './arbitraries.js';

const START_MS = Date.UTC(2030, 0, 1);

const blockMs = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3000 }));
const count = fc.oneof(fc.integer({ min: 1, max: 12 }), fc.double({ min: 1, max: 12, noNaN: true }));

/** Every algorithm and option, with parameters small enough for random traffic to hit the limits. */
const policyArb = policyArbitrary({ size: count, refill: count, blockMs });

interface Call {
  /** µs since the previous call. */
  gapUs: number;
  cost: number;
}
const callArb: fc.Arbitrary<Call> = fc.record({
  gapUs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5 }), fc.integer({ min: 0, max: 400_000 })),
  cost: fc.oneof(
    { arbitrary: fc.constantFrom(0, 0.25, 0.5, 1, 1, 1, 1, 2, 3, 4.75), weight: 3 },
    // Tiny and fractional costs: a sliding log of them holds more events than entries, and coalesces.
    {
      arbitrary: fc.oneof(fc.constantFrom(1e-9, 1e-7, 0.01, 0.1), fc.double({ min: 1e-9, max: 0.3, noNaN: true })),
      weight: 1,
    },
  ),
});
const trafficArb = fc.array(callArb, { minLength: 1, maxLength: 120 });

interface Admitted {
  atUs: number;
  cost: number;
}

function replay(policies: Policy[], calls: Call[]): { admitted: Admitted[]; decisions: Decision[] } {
  const clock = manualClock({ startMs: START_MS });
  const limiter = createLimiter({ policies, clock, store: memoryStore() });
  const admitted: Admitted[] = [];
  const decisions: Decision[] = [];
  for (const call of calls) {
    clock.advanceUs(call.gapUs);
    const decision = limiter.limitSync('k', { cost: call.cost });
    decisions.push(decision);
    if (decision.allowed && call.cost > 0) admitted.push({ atUs: clock.nowUs(), cost: call.cost });
  }
  return { admitted, decisions };
}

const EPSILON = 1e-9;

/** The most a policy may admit between two admitted events `first` and `last`, inclusive. */
function assertWithinPolicy(policy: Policy, admitted: Admitted[]): void {
  const sumBetween = (i: number, j: number) => admitted.slice(i, j + 1).reduce((s, a) => s + a.cost, 0);
  const pairs = (fn: (i: number, j: number, span: number) => void) => {
    for (let i = 0; i < admitted.length; i++) {
      for (let j = i; j < admitted.length; j++) {
        fn(i, j, (admitted[j] as Admitted).atUs - (admitted[i] as Admitted).atUs);
      }
    }
  };
  switch (policy.algorithm) {
    case 'gcra':
    case 'leaky-bucket':
    case 'token-bucket': {
      if (policy.algorithm === 'token-bucket' && policy.refill === 'interval') {
        const intervalUs = policy.refillIntervalMs * 1000;
        pairs((i, j, span) => {
          expect(sumBetween(i, j)).toBeLessThanOrEqual(
            policy.capacity + Math.ceil(span / intervalUs) * policy.refillAmount + EPSILON,
          );
        });
        return;
      }
      // Nominal emission interval and burst: over any span, at most burst + span / T, give or take the
      // 1 µs that τ may be rounded up by (so that a cost equal to the burst always fits; compile.ts).
      const [t, burst] =
        policy.algorithm === 'gcra'
          ? [(policy.periodMs * 1000) / policy.limit, policy.burst]
          : policy.algorithm === 'leaky-bucket'
            ? [1e6 / policy.leakPerSecond, policy.capacity]
            : [(policy.refillIntervalMs * 1000) / policy.refillAmount, policy.capacity];
      pairs((i, j, span) => {
        expect(sumBetween(i, j)).toBeLessThanOrEqual(burst + (span + 1) / t + EPSILON);
      });
      return;
    }
    case 'fixed-window': {
      const windowUs = policy.windowMs * 1000;
      const totals = new Map<number, number>();
      let start = Number.NEGATIVE_INFINITY;
      for (const a of admitted) {
        let id: number;
        if (policy.align === 'clock') id = Math.floor(a.atUs / windowUs);
        else {
          if (a.atUs >= start + windowUs) start = a.atUs;
          id = start;
        }
        totals.set(id, (totals.get(id) ?? 0) + a.cost);
      }
      for (const total of totals.values()) expect(total).toBeLessThanOrEqual(policy.limit + EPSILON);
      return;
    }
    case 'sliding-window': {
      const windowUs = policy.windowMs * 1000;
      if (policy.precisionMs !== undefined) {
        // Bucketed: the buckets of any window, aligned to the precision, never hold more than the limit.
        const precisionUs = policy.precisionMs * 1000;
        const buckets = new Map<number, number>();
        for (const a of admitted) {
          const id = Math.floor(a.atUs / precisionUs);
          buckets.set(id, (buckets.get(id) ?? 0) + a.cost);
        }
        const n = windowUs / precisionUs;
        for (const last of buckets.keys()) {
          let total = 0;
          for (let id = last - n + 1; id <= last; id++) total += buckets.get(id) ?? 0;
          expect(total).toBeLessThanOrEqual(policy.limit + EPSILON);
        }
      }
      const totals = new Map<number, number>();
      for (const a of admitted) {
        const id = Math.floor(a.atUs / windowUs);
        totals.set(id, (totals.get(id) ?? 0) + a.cost);
      }
      for (const total of totals.values()) expect(total).toBeLessThanOrEqual(policy.limit + EPSILON);
      pairs((i, j, span) => {
        if (span < windowUs) expect(sumBetween(i, j)).toBeLessThanOrEqual(2 * policy.limit + EPSILON);
      });
      return;
    }
    case 'sliding-log': {
      const windowUs = policy.windowMs * 1000;
      pairs((i, j, span) => {
        if (span < windowUs) expect(sumBetween(i, j)).toBeLessThanOrEqual(policy.limit + EPSILON);
        if (j === i + 1 && policy.minGapMs > 0) expect(span).toBeGreaterThanOrEqual(policy.minGapMs * 1000);
      });
      return;
    }
  }
}

function assertSane(decision: Decision): void {
  for (const d of [decision, ...decision.policies]) {
    expect(Number.isInteger(d.remaining)).toBe(true);
    expect(d.remaining).toBeGreaterThanOrEqual(0);
    expect(d.remaining).toBeLessThanOrEqual(d.limit);
    for (const value of [d.retryAfterMs, d.resetAfterMs, d.delayMs ?? 0]) {
      expect(Number.isNaN(value)).toBe(false);
      expect(value).toBeGreaterThanOrEqual(0);
    }
    expect(Number.isInteger(d.resetAfterMs)).toBe(true);
    if (d.allowed && (d === decision || decision.allowed)) expect(d.retryAfterMs).toBe(0);
    // A policy that admitted a denied call may still wait: a countDenied log that logged the attempt.
    else if (d.allowed) expect(Number.isInteger(d.retryAfterMs)).toBe(true);
    else
      expect(
        d.retryAfterMs === Number.POSITIVE_INFINITY || (Number.isInteger(d.retryAfterMs) && d.retryAfterMs > 0),
      ).toBe(true);
  }
}

describe('model properties', () => {
  it('over any span, admitted cost never exceeds what the policy allows', () => {
    fc.assert(
      fc.property(policyArb, trafficArb, (policy, calls) => {
        assertWithinPolicy(policy, replay([policy], calls).admitted);
      }),
      { numRuns: 600 },
    );
  });

  it('remaining is an integer within 0…limit, durations are whole ms, nothing is NaN', () => {
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 1, maxLength: 3 }), trafficArb, (list, calls) => {
        const policies = list.map((p, i) => ({ ...p, name: `p${i}` }) as Policy);
        for (const decision of replay(policies, calls).decisions) assertSane(decision);
      }),
      { numRuns: 300 },
    );
  });

  it('check and status never change state', () => {
    fc.assert(
      fc.property(policyArb, trafficArb, fc.array(fc.boolean(), { maxLength: 120 }), (policy, calls, probes) => {
        const clockA = manualClock({ startMs: START_MS });
        const clockB = manualClock({ startMs: START_MS });
        const a = createLimiter({ policies: [policy], clock: clockA });
        const b = createLimiter({ policies: [policy], clock: clockB });
        calls.forEach((call, i) => {
          clockA.advanceUs(call.gapUs);
          clockB.advanceUs(call.gapUs);
          if (probes[i]) {
            const checked = b.checkSync('k', { cost: call.cost });
            const status = b.statusSync('k');
            expect(b.checkSync('k', { cost: call.cost })).toEqual(checked);
            expect(b.statusSync('k')).toEqual(status);
          }
          const probed = b.limitSync('k', { cost: call.cost });
          expect(probed).toEqual(a.limitSync('k', { cost: call.cost }));
        });
      }),
      { numRuns: 300 },
    );
  });

  it("a kind whose state is its own expiry (`untouchedAtLatest`) decides from the state's latest time on as from no state", () => {
    let reached = 0;
    fc.assert(
      fc.property(
        policyArb,
        trafficArb,
        fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000_000 })),
        fc.constantFrom(0, 0.5, 1, 3, 40),
        fc.boolean(),
        fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2_000_000 })),
        (policy, calls, afterUs, cost, commit, maxDelayUs) => {
          const c = compilePolicy(policy);
          const layout = kindOf(c).layout;
          if (!('fields' in layout) || layout.untouchedAtLatest !== true) return;
          let state: State | undefined;
          let nowUs = START_MS * 1000;
          for (const call of calls) {
            nowUs += call.gapUs;
            const out = [emptyEvaluation()];
            decide([c], [state], nowUs, call.cost, { commit: true }, out);
            if (out[0]?.next !== undefined) state = [...out[0].next];
          }
          if (state === undefined) return;
          reached++;
          const atUs = Math.max(...state) + afterUs;
          const fromState = [emptyEvaluation()];
          const fromNone = [emptyEvaluation()];
          const options = { commit, maxDelayUs };
          expect(decide([c], [state], atUs, cost, options, fromState)).toBe(
            decide([c], [undefined], atUs, cost, options, fromNone),
          );
          expect(fromState).toEqual(fromNone);
        },
      ),
      { numRuns: 600 },
    );
    expect(reached).toBeGreaterThan(100);
  });

  it('check predicts limit exactly', () => {
    fc.assert(
      fc.property(policyArb, trafficArb, (policy, calls) => {
        const clock = manualClock({ startMs: START_MS });
        const limiter = createLimiter({ policies: [policy], clock });
        for (const call of calls) {
          clock.advanceUs(call.gapUs);
          const predicted = limiter.checkSync('k', { cost: call.cost });
          const decided = limiter.limitSync('k', { cost: call.cost });
          expect(decided.allowed).toBe(predicted.allowed);
          // A limit that books a delayed call also carries what cancels it; a check books nothing.
          const { reservation: _booked, ...outcome } = decided;
          if (decided.allowed) expect(outcome).toEqual(predicted);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('splitting a cost into parts never admits more than the whole', () => {
    fc.assert(
      fc.property(
        policyArb,
        trafficArb,
        fc.double({ min: 0.01, max: 14, noNaN: true }),
        fc.double({ min: 0.01, max: 0.99, noNaN: true }),
        (policy, history, cost, share) => {
          const whole = replayThen(policy, history, [cost]);
          const parts = replayThen(policy, history, [cost * share, cost - cost * share]);
          if (!whole[0]?.allowed) expect(parts.every((d) => d.allowed)).toBe(false);
        },
      ),
      { numRuns: 400 },
    );
  });

  it('a call denied by one policy consumes nothing from the others', () => {
    const pairArb = fc
      .tuple(policyArb, policyArb)
      .filter(
        ([x, y]) =>
          x.blockMs === 0 &&
          y.blockMs === 0 &&
          !(x.algorithm === 'sliding-log' && x.countDenied) &&
          !(y.algorithm === 'sliding-log' && y.countDenied),
      );
    fc.assert(
      fc.property(pairArb, trafficArb, ([x, y], calls) => {
        const policies = [{ ...x, name: 'x' } as Policy, { ...y, name: 'y' } as Policy];
        const clock = manualClock({ startMs: START_MS });
        const limiter = createLimiter({ policies, clock });
        for (const call of calls) {
          clock.advanceUs(call.gapUs);
          const before = limiter.statusSync('k');
          const decision = limiter.limitSync('k', { cost: call.cost });
          if (!decision.allowed) expect(limiter.statusSync('k')).toEqual(before);
        }
      }),
      { numRuns: 400 },
    );
  });
});

function replayThen(policy: Policy, history: Call[], costs: number[]): Decision[] {
  const clock = manualClock({ startMs: START_MS });
  const limiter = createLimiter({ policies: [policy], clock });
  for (const call of history) {
    clock.advanceUs(call.gapUs);
    limiter.limitSync('k', { cost: call.cost });
  }
  return costs.map((cost) => limiter.limitSync('k', { cost }));
}
