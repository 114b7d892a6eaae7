import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type CompiledPolicy,
  compilePolicy,
  decide,
  type Evaluation,
  emptyEvaluation,
  maxLogEntries,
  type State,
  slidingLog,
} from '../../src/model/index.js';
import { ExactLog } from './exact-log.js';

/** 2030-01-01T00:00:00Z in µs. */
const START_US = Date.UTC(2030, 0, 1) * 1000;

/** Live entries of a model state. */
function entries(s: State | undefined): number {
  return s === undefined ? 0 : (s.length - 1) / 2;
}

interface Call {
  gapUs: number;
  cost: number;
}

/**
 * Costs that are exact in binary (multiples of 2⁻⁶ and of 2⁻³⁰, whole ones): every sum of them is exact,
 * so the coalesced and the exact log compare without rounding, whatever order they add in. Tiny ones
 * (down to 2⁻³⁰ ≈ 9.3e-10) make the log long enough to coalesce.
 */
const exactCost = fc.oneof(
  fc.integer({ min: 1, max: 1000 }).map((n) => n * 2 ** -30),
  fc.integer({ min: 1, max: 64 }).map((n) => n / 64),
  fc.constantFrom(1, 2, 3),
);
const exactLimit = fc.integer({ min: 4, max: 40 }).map((n) => n / 4);
const gapUs = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 1, max: 5 }),
  fc.integer({ min: 0, max: 50_000 }),
  fc.integer({ min: 0, max: 400 }).map((ms) => ms * 1000),
);
const callsArb = (cost: fc.Arbitrary<number>) => fc.array(fc.record({ gapUs, cost }), { minLength: 1, maxLength: 150 });
const logArb = (countDenied: fc.Arbitrary<boolean>) =>
  fc
    .record({
      limit: exactLimit,
      windowMs: fc.integer({ min: 1, max: 2000 }),
      minGapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 50 })),
      countDenied,
    })
    .map((o) => compilePolicy(slidingLog(o)));

/** Runs the calls through the model, calling `step` with the state before each decision and its outcome. */
function replay(
  c: CompiledPolicy,
  calls: readonly Call[],
  step: (call: Call, nowUs: number, before: State | undefined, out: Evaluation, after: State | undefined) => void,
): void {
  let s: State | undefined;
  let now = START_US;
  const out = emptyEvaluation();
  for (const call of calls) {
    now += call.gapUs;
    const before = s;
    decide([c], [s], now, call.cost, { commit: true }, [out]);
    if (out.next !== undefined) s = [...out.next];
    step(call, now, before, out, s);
  }
}

describe('the sliding log keeps at most ceil(limit) + 1 entries, and is never less strict than the exact log', () => {
  it('every call it admits, the exact log of the same events admits too; it never holds more than M entries', () => {
    let coalesced = 0;
    fc.assert(
      fc.property(logArb(fc.boolean()), callsArb(exactCost), (c, calls) => {
        // The exact log of what the coalesced one logged: the same admitted events, the same attempts.
        const exact = new ExactLog(c);
        let longest = 0;
        replay(c, calls, (call, now, _before, out, after) => {
          if (out.allowed) expect(exact.admits(now, call.cost)).toBe(true);
          expect(entries(after)).toBeLessThanOrEqual(maxLogEntries(c.limit));
          if (call.cost > 0 && out.allowed) exact.append(now, call.cost);
          else if (call.cost > 0 && c.c === 1 && out.reason === 'limit') exact.logDenied(now, call.cost);
          longest = Math.max(longest, exact.length);
        });
        if (longest > maxLogEntries(c.limit)) coalesced++;
      }),
      { numRuns: 1500 },
    );
    // The traffic does make logs longer than the bound, so the comparison is about coalesced logs.
    expect(coalesced).toBeGreaterThan(100);
  });

  it('under countDenied, on the same calls, it admits nothing the exact log would refuse', () => {
    // Both log every attempt, admitted or not, so their histories stay comparable call by call.
    fc.assert(
      fc.property(logArb(fc.constant(true)), callsArb(exactCost), (c, calls) => {
        const exact = new ExactLog(c);
        replay(c, calls, (call, now, _before, out) => {
          const exactAllowed = exact.call(now, call.cost);
          if (out.allowed) expect(exactAllowed).toBe(true);
        });
      }),
      { numRuns: 1000 },
    );
  });

  it('decimal and tiny costs (1e-9 and up) never make a log longer than M entries', () => {
    const decimal = fc.oneof(
      fc.double({ min: 1e-9, max: 1e-3, noNaN: true }),
      fc.constantFrom(1e-9, 1e-7, 0.1, 0.2, 0.3, 0.7, 1.1, 2.5),
    );
    const limit = fc.oneof(fc.integer({ min: 1, max: 12 }), fc.double({ min: 1, max: 12, noNaN: true }));
    const policy = fc
      .record({ limit, windowMs: fc.integer({ min: 1, max: 2000 }), countDenied: fc.boolean() })
      .map((o) => compilePolicy(slidingLog(o)));
    fc.assert(
      fc.property(policy, callsArb(decimal), (c, calls) => {
        replay(c, calls, (_call, _now, _before, _out, after) => {
          expect(entries(after)).toBeLessThanOrEqual(maxLogEntries(c.limit));
        });
      }),
      { numRuns: 1000 },
    );
  });

  it('20,000 calls of cost 1e-7 under 5 per hour: all admitted, as by the exact log, in 6 entries', () => {
    for (const countDenied of [false, true]) {
      const c = compilePolicy(slidingLog({ limit: 5, windowMs: 3_600_000, countDenied }));
      let admitted = 0;
      let most = 0;
      replay(
        c,
        Array.from({ length: 20_000 }, () => ({ gapUs: 1000, cost: 1e-7 })),
        (_call, _now, _before, out, after) => {
          if (out.allowed) admitted++;
          most = Math.max(most, entries(after));
        },
      );
      expect(admitted).toBe(20_000);
      expect(most).toBe(6);
    }
  });

  it('merges the pair that moves the least cost-time forward, oldest on ties, into the later time', () => {
    // limit 2: at most 3 entries; a window of 1000 µs.
    const c = compilePolicy(slidingLog({ limit: 2, windowMs: 1 }));
    let s: State | undefined;
    const out = emptyEvaluation();
    const at = (us: number, cost: number) => {
      decide([c], [s], START_US + us, cost, { commit: true }, [out]);
      expect(out.allowed).toBe(true);
      s = out.next && [...out.next];
    };
    at(0, 0.5);
    at(10, 0.25);
    at(30, 0.25);
    expect(s).toEqual([0, START_US, 0.5, START_US + 10, 0.25, START_US + 30, 0.25]);
    // Cost-time moved: 0.5 × 10 = 5, 0.25 × 20 = 5, 0.25 × 1 = 0.25: the newest pair is merged.
    at(31, 0.5);
    expect(s).toEqual([0, START_US, 0.5, START_US + 10, 0.25, START_US + 31, 0.75]);
    // 0.5 × 10 = 5, 0.25 × 21 = 5.25, 0.75 × 9 = 6.75: the oldest pair.
    at(40, 0.25);
    expect(s).toEqual([0, START_US + 10, 0.75, START_US + 31, 0.75, START_US + 40, 0.25]);
    // The merged entry counts until its later time leaves the window: at 1000 µs the exact log (its 0.5
    // logged at 0 gone) would admit 0.5 more; the coalesced one waits until 1010, as it says.
    decide([c], [s], START_US + 1000, 0.5, { commit: false }, [out]);
    expect(out).toMatchObject({ allowed: false, retryAfterUs: 10 });
    decide([c], [s], START_US + 1009, 0.5, { commit: false }, [out]);
    expect(out.allowed).toBe(false);
    decide([c], [s], START_US + 1010, 0.5, { commit: false }, [out]);
    expect(out.allowed).toBe(true);
  });

  it('on a tie, merges the oldest pair', () => {
    const c = compilePolicy(slidingLog({ limit: 2, windowMs: 1 }));
    let s: State | undefined;
    const out = emptyEvaluation();
    for (const us of [0, 20, 40, 60]) {
      decide([c], [s], START_US + us, 0.25, { commit: true }, [out]);
      s = out.next && [...out.next];
    }
    // Every pair moves 0.25 × 20 = 5.
    expect(s).toEqual([0, START_US + 20, 0.5, START_US + 40, 0.25, START_US + 60, 0.25]);
  });
});

describe('a check (cost 0) on a countDenied log', () => {
  it('answers as the whole log of every attempt: not allowed once attempts exceed the limit', () => {
    const c = compilePolicy(slidingLog({ limit: 5, windowMs: 3_600_000, countDenied: true }));
    let s: State | undefined;
    const out = emptyEvaluation();
    const call = (nowUs: number, cost: number, commit = true) => {
      decide([c], [s], nowUs, cost, { commit }, [out]);
      if (commit && out.next !== undefined) s = [...out.next];
      return out.allowed;
    };
    const calls = [1, 1, 1, 1, 1].map((cost, i) => call(START_US + i, cost));
    expect(calls).toEqual([true, true, true, true, true]);
    // Full, without an attempt over: a check still fits (5 + 0 ≤ 5), as in every kind.
    expect(call(START_US + 10, 0, false)).toBe(true);
    // A denied attempt is logged: the whole log holds 6 > 5, and a check must say no.
    expect(call(START_US + 11, 1)).toBe(false);
    expect(call(START_US + 12, 0, false)).toBe(false);
    // The trimmed log keeps what exceeds the limit: 1 + 1 + 1 + 1 + 1 (the attempt) + 1 > 5.
    let kept = 0;
    for (let i = 2; i < (s as State).length; i += 2) kept += (s as State)[i] as number;
    expect(kept).toBeGreaterThan(5);
  });
});
