import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type CompiledPolicy,
  compilePolicy,
  decide,
  type Evaluation,
  emptyEvaluation,
  gcra,
  inspect,
  leakyBucket,
  type Policy,
  type State,
  slidingLog,
  toDecision,
  tokenBucket,
  usToMs,
} from '../../src/model/index.js';
import { policyArbitrary } from './arbitraries.js';

/** 2030-01-01T00:00:00Z in µs: a realistic epoch, so float dust shows as it does in production. */
const START_US = Date.UTC(2030, 0, 1) * 1000;

/** Decimal amounts whose binary sums carry dust (0.1 + 0.2 ≠ 0.3), and whole ones. */
const amount = fc.constantFrom(0.1, 0.2, 0.3, 0.35, 0.5, 0.6, 0.7, 0.75, 0.9, 1, 1.1, 1.25, 2, 2.2, 2.5, 3);
/** Tiny and fractional costs: a sliding log of them holds more events than entries, and coalesces. */
const tiny = fc.oneof(fc.constantFrom(1e-9, 1e-7, 0.001, 0.01), fc.double({ min: 1e-9, max: 0.05, noNaN: true }));
const size = fc.oneof(
  fc.constantFrom(1, 1.5, 2, 2.5, 3, 3.5, 4.2, 4.5, 5, 7.3, 10),
  fc.double({ min: 1, max: 10, noNaN: true }),
);

/**
 * Penalty boxes: none (most often), whole milliseconds from 1 ms to 3 s (shorter and longer than the
 * policies' own waits), or any µs.
 */
const blockMs = fc.oneof(
  { arbitrary: fc.constant(0), weight: 2 },
  { arbitrary: fc.integer({ min: 1, max: 3000 }), weight: 1 },
  { arbitrary: fc.integer({ min: 1, max: 3_000_000 }).map((us) => us / 1000), weight: 1 },
);

/** Every algorithm with fractional parameters, with and without a penalty box. */
const policyArb = policyArbitrary({ size, refill: amount, blockMs });

interface Call {
  gapUs: number;
  cost: number;
}
const callArb: fc.Arbitrary<Call> = fc.record({
  gapUs: fc.oneof(
    fc.constant(0),
    fc.integer({ min: 1, max: 5 }),
    fc.integer({ min: 0, max: 400_000 }),
    // Whole milliseconds: lands on interval and window boundaries.
    fc.integer({ min: 0, max: 400 }).map((ms) => ms * 1000),
  ),
  cost: fc.oneof(amount, fc.constantFrom(1, 1, 2), tiny),
});
const trafficArb = fc.array(callArb, { minLength: 1, maxLength: 80 });

/** One policy's verdict at `atUs` on the stored state, changing nothing. */
function checkAt(c: CompiledPolicy, s: State | undefined, atUs: number, cost: number): Evaluation {
  const out = emptyEvaluation();
  decide([c], [s], atUs, cost, { commit: false }, [out]);
  return out;
}

interface Miss {
  call: number;
  atUs: number;
  cost: number;
  retryAfterUs: number;
  problem: string;
}

/**
 * Replays the calls through one policy, committing each, and hands every call to `visit` with its
 * evaluation, the state it left and its time.
 */
function replay(
  c: CompiledPolicy,
  calls: readonly Call[],
  visit: (call: Call, i: number, out: Evaluation, s: State | undefined, now: number) => void,
): void {
  let s: State | undefined;
  let now = START_US;
  calls.forEach((call, i) => {
    now += call.gapUs;
    const out = emptyEvaluation();
    decide([c], [s], now, call.cost, { commit: true }, [out]);
    if (out.next !== undefined) s = [...out.next];
    visit(call, i, out, s, now);
  });
}

/**
 * Replays the calls through the model; after every denial on the policy's limit or by its penalty box,
 * asks the model what the same call gets when retried at `now + retryAfterUs` (must pass), 1 µs
 * earlier (must not, where the wait is exact), and at the promised whole milliseconds (must pass).
 * The retry is a check: a committed retry that was denied would start a new penalty, but one that is
 * admitted is admitted either way.
 */
function retryMisses(policy: Policy, calls: readonly Call[], exact: boolean): Miss[] {
  const c = compilePolicy(policy);
  const misses: Miss[] = [];
  replay(c, calls, (call, i, out, s, now) => {
    if (out.allowed || out.reason === 'exceeds-capacity') return;
    const retry = out.retryAfterUs;
    const miss = (problem: string) =>
      misses.push({ call: i, atUs: now - START_US, cost: call.cost, retryAfterUs: retry, problem });
    if (!(retry > 0 && Number.isFinite(retry))) {
      miss('retry not a positive finite wait');
      return;
    }
    if (out.resetAfterUs < retry) miss('resetAfterUs before retryAfterUs');
    if (!checkAt(c, s, now + retry, call.cost).allowed) miss('denied at now + retryAfterUs');
    if (!checkAt(c, s, now + Math.ceil(retry / 1000) * 1000, call.cost).allowed) miss('denied at now + retryAfterMs');
    if (exact && checkAt(c, s, now + retry - 1, call.cost).allowed) miss('admitted 1 µs before now + retryAfterUs');
  });
  return misses;
}

/**
 * The same for several policies decided together: the decision's `retryAfterMs` (the longest wait of
 * any policy, toDecision) must admit the same call, and in µs the longest wait is exact.
 */
function multiRetryMisses(policies: readonly Policy[], calls: readonly Call[], exact: boolean): Miss[] {
  const compiled = policies.map((p) => compilePolicy(p));
  const states: (State | undefined)[] = compiled.map(() => undefined);
  let now = START_US;
  const misses: Miss[] = [];
  const allowedAt = (atUs: number, cost: number) =>
    decide(
      compiled,
      states,
      atUs,
      cost,
      { commit: false },
      compiled.map(() => emptyEvaluation()),
    );
  calls.forEach((call, i) => {
    now += call.gapUs;
    const outs = compiled.map(() => emptyEvaluation());
    const allowed = decide(compiled, states, now, call.cost, { commit: true }, outs);
    const decision = toDecision(compiled, outs, allowed);
    outs.forEach((out, j) => {
      if (out.next !== undefined) states[j] = [...out.next];
    });
    if (allowed || decision.reason === 'exceeds-capacity') return;
    // Every policy's wait counts, the ones that admitted the call too (a countDenied log that logged it).
    let retry = 0;
    for (const out of outs) if (out.retryAfterUs > retry) retry = out.retryAfterUs;
    const miss = (problem: string) =>
      misses.push({ call: i, atUs: now - START_US, cost: call.cost, retryAfterUs: retry, problem });
    if (decision.retryAfterMs !== usToMs(retry)) miss(`retryAfterMs ${decision.retryAfterMs} is not the longest wait`);
    if (decision.resetAfterMs < decision.retryAfterMs)
      miss(`resetAfterMs ${decision.resetAfterMs} before retryAfterMs`);
    if (!allowedAt(now + retry, call.cost)) miss('denied at now + the longest retryAfterUs');
    if (!allowedAt(now + decision.retryAfterMs * 1000, call.cost)) miss('denied at now + retryAfterMs');
    if (exact && allowedAt(now + retry - 1, call.cost)) miss('admitted 1 µs before now + the longest retryAfterUs');
  });
  return misses;
}

/** The same for resetAfter: at `now + resetAfterUs` the key is back to untouched (full). */
function resetMisses(policy: Policy, calls: readonly Call[]): Miss[] {
  const c = compilePolicy(policy);
  const misses: Miss[] = [];
  replay(c, calls, (call, i, _out, s, now) => {
    const reset = inspect(c, s, now).resetAfterUs;
    const later = inspect(c, s, now + reset);
    const fresh = inspect(c, undefined, now + reset);
    if (later.remaining !== fresh.remaining || later.resetAfterUs !== 0) {
      misses.push({
        call: i,
        atUs: now - START_US,
        cost: call.cost,
        retryAfterUs: reset,
        problem: 'not untouched at reset',
      });
    }
    if (reset > 0 && inspect(c, s, now + reset - 1).resetAfterUs === 0) {
      misses.push({
        call: i,
        atUs: now - START_US,
        cost: call.cost,
        retryAfterUs: reset,
        problem: 'untouched before reset',
      });
    }
  });
  return misses;
}

describe('retryAfter is a promise', () => {
  it('at now + retryAfter the same call is admitted, and (where exact) not 1 µs earlier', () => {
    fc.assert(
      fc.property(policyArb, trafficArb, (policy, calls) => {
        // The sliding-window counter's closed form may round its wait up by a µs: only "never early".
        const exact = policy.algorithm !== 'sliding-window';
        expect(retryMisses(policy, calls, exact)).toEqual([]);
      }),
      { numRuns: 1500 },
    );
  });

  it('several policies: at now + retryAfterMs the same call is admitted, not 1 µs before the longest wait', () => {
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 2, maxLength: 3 }), trafficArb, (policies, calls) => {
        const exact = policies.every((p) => p.algorithm !== 'sliding-window');
        expect(multiRetryMisses(policies, calls, exact)).toEqual([]);
      }),
      { numRuns: 800 },
    );
  });

  it('interval token bucket: at now + resetAfter the key is full again', () => {
    const intervalArb = fc
      .record({ capacity: size, refillAmount: amount, refillIntervalMs: fc.integer({ min: 1, max: 1000 }) })
      .map((o) => tokenBucket({ ...o, refill: 'interval' }));
    fc.assert(
      fc.property(intervalArb, trafficArb, (policy, calls) => {
        expect(resetMisses(policy, calls)).toEqual([]);
      }),
      { numRuns: 800 },
    );
  });

  // States found by fuzzing: `used` carries dust (9.5 and 9.2 in decimal).
  const tenByTenths = compilePolicy(
    tokenBucket({ capacity: 10, refillAmount: 0.1, refillIntervalMs: 100, refill: 'interval' }),
  );
  const dusty: [string, State, number][] = [
    ['9.500000000000002', [0, 9.500000000000002, 1893456046377969], 1893456046699592],
    ['9.200000000000001', [0, 9.200000000000001, 1893456014927075], 1893456015080809],
    ['9.65', [0, 9.65, 1893456001327075], 1893456001568288],
  ];
  for (const [name, s, now] of dusty) {
    it(`interval token bucket holding ${name}: full exactly at resetAfter, and the retry of 1.25 is exact`, () => {
      const reset = inspect(tenByTenths, s, now).resetAfterUs;
      expect(inspect(tenByTenths, s, now + reset)).toMatchObject({ remaining: 10, resetAfterUs: 0 });
      expect(inspect(tenByTenths, s, now + reset - 1).resetAfterUs).toBeGreaterThan(0);
      const denied = checkAt(tenByTenths, s, now, 1.25);
      expect(denied.allowed).toBe(false);
      expect(checkAt(tenByTenths, s, now + denied.retryAfterUs, 1.25).allowed).toBe(true);
      expect(checkAt(tenByTenths, s, now + denied.retryAfterUs - 1, 1.25).allowed).toBe(false);
    });
  }

  // Cases found by review and fuzzing, with explicit times (µs after START_US) and costs.
  const table: { name: string; policy: Policy; calls: [number, number][] }[] = [
    {
      name: 'interval token bucket, fractional refill: the promised retry was denied',
      policy: tokenBucket({ capacity: 3.5, refillAmount: 0.75, refillIntervalMs: 333, refill: 'interval' }),
      calls: [
        [333_000, 2],
        [666_000, 0.1],
        [766_000, 0.3],
        [866_000, 1.25],
        [1_199_000, 0.1],
        [1_299_000, 2],
      ],
    },
    {
      name: 'interval token bucket, refill 0.1: the promised retry was one interval late',
      policy: tokenBucket({ capacity: 10, refillAmount: 0.1, refillIntervalMs: 100, refill: 'interval' }),
      calls: [
        [0, 0.7],
        [0, 0.35],
        [0, 2.2],
        [0, 6.4],
        [0, 1.25],
      ],
    },
    {
      name: 'sliding log: subtracting the oldest costs one by one left dust',
      policy: slidingLog({ limit: 3, windowMs: 400 }),
      calls: [
        [0, 0.3],
        [100_000, 0.3],
        [200_000, 2],
        [210_000, 1],
      ],
    },
  ];
  for (const { name, policy, calls } of table) {
    it(name, () => {
      let previous = 0;
      const steps = calls.map(([at, cost]) => {
        const step = { gapUs: at - previous, cost };
        previous = at;
        return step;
      });
      expect(retryMisses(policy, steps, true)).toEqual([]);
    });
  }

  it('sliding log: the 0.3s leave at 400 and 500 ms, so cost 1 at 210 ms waits 290 ms', () => {
    const c = compilePolicy(slidingLog({ limit: 3, windowMs: 400 }));
    let s: State | undefined;
    for (const [at, cost] of [
      [0, 0.3],
      [100_000, 0.3],
      [200_000, 2],
    ] as const) {
      const out = emptyEvaluation();
      decide([c], [s], START_US + at, cost, { commit: true }, [out]);
      s = out.next === undefined ? s : [...out.next];
    }
    const denied = checkAt(c, s, START_US + 210_000, 1);
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterUs).toBe(290_000);
  });
});

describe('fractional burst', () => {
  const cases: [string, Policy, number][] = [
    ['gcra 1.5 per second', gcra({ limit: 1.5, periodMs: 1000 }), 1.5],
    ['gcra 3 per second, burst 2.5', gcra({ limit: 3, periodMs: 1000, burst: 2.5 }), 2.5],
    ['gcra 7 per 700 ms, burst 3.3', gcra({ limit: 7, periodMs: 700, burst: 3.3 }), 3.3],
    ['token bucket 4.2, 1.5 per 300 ms', tokenBucket({ capacity: 4.2, refillAmount: 1.5, refillIntervalMs: 300 }), 4.2],
    ['leaky bucket 2.5 at 3/s', leakyBucket({ capacity: 2.5, leakPerSecond: 3 }), 2.5],
    ['leaky bucket queue 1.5 at 7/s', leakyBucket({ capacity: 1.5, leakPerSecond: 7, mode: 'queue' }), 1.5],
  ];
  for (const [name, policy, burst] of cases) {
    it(`${name}: a cost equal to the burst fits a fresh key`, () => {
      const c = compilePolicy(policy);
      expect(c.limit).toBe(burst);
      const out = checkAt(c, undefined, START_US, burst);
      expect(out.allowed).toBe(true);
      expect(out.remaining).toBe(0);
    });
  }

  it('any burst: a cost equal to the burst fits a fresh key, and never more than 1 µs of extra tolerance', () => {
    fc.assert(
      fc.property(size, fc.integer({ min: 1, max: 100_000 }), (limit, periodMs) => {
        const c = compilePolicy(gcra({ limit, periodMs }));
        expect(checkAt(c, undefined, START_US, limit).allowed).toBe(true);
        expect(c.b).toBeLessThanOrEqual(Math.ceil(limit * c.a));
      }),
      { numRuns: 500 },
    );
  });
});
