import { definePolicy, type PolicyInput } from 'floodgate';
import { compilePolicy, decide, emptyEvaluation, type State, toDecision } from 'floodgate/model';
import { describe, expect, it } from 'vitest';
import { probe, SIM_START_MS, simulate } from '../src/sim/simulate.js';
import { arrivals, type Traffic, type TrafficPattern } from '../src/sim/traffic.js';

const START_US = SIM_START_MS * 1000;

/** Every algorithm with every option that changes its behaviour. */
const POLICIES: readonly PolicyInput[] = [
  { algorithm: 'gcra', limit: 10, periodMs: 1000 },
  { algorithm: 'gcra', limit: 3, periodMs: 1000, burst: 6, blockMs: 1500 },
  { algorithm: 'token-bucket', capacity: 8, refillAmount: 2, refillIntervalMs: 500 },
  { algorithm: 'token-bucket', capacity: 8, refillAmount: 2, refillIntervalMs: 500, refill: 'interval' },
  { algorithm: 'leaky-bucket', capacity: 5, leakPerSecond: 4 },
  { algorithm: 'leaky-bucket', capacity: 5, leakPerSecond: 4, mode: 'queue' },
  { algorithm: 'fixed-window', limit: 7, windowMs: 2000 },
  { algorithm: 'fixed-window', limit: 7, windowMs: 2000, align: 'first-request', blockMs: 700 },
  { algorithm: 'sliding-window', limit: 9, windowMs: 1500 },
  { algorithm: 'sliding-window', limit: 9, windowMs: 1500, precisionMs: 250 },
  { algorithm: 'sliding-log', limit: 6, windowMs: 1000, minGapMs: 40 },
  { algorithm: 'sliding-log', limit: 6, windowMs: 1000, countDenied: true },
];

const PATTERNS: readonly TrafficPattern[] = [
  { kind: 'steady', ratePerSecond: 12 },
  { kind: 'bursts', size: 9, everyMs: 1300 },
  { kind: 'on-off', ratePerSecond: 30, onMs: 800, offMs: 1700 },
  { kind: 'stampede', size: 8, windowMs: 2000, spreadMs: 150 },
  { kind: 'random', ratePerSecond: 15, seed: 3 },
];

/** The model alone, as the specification: states in a map, `decide` and `toDecision`, nothing else. */
function modelRun(input: PolicyInput, times: readonly number[], cost: number) {
  const c = compilePolicy(definePolicy(input));
  let state: State | undefined;
  return times.map((t) => {
    const evaluations = [emptyEvaluation()];
    const allowed = decide([c], [state], START_US + t, cost, { commit: true }, evaluations);
    const next = (evaluations[0] as ReturnType<typeof emptyEvaluation>).next;
    const decision = toDecision([c], evaluations, allowed);
    if (next !== undefined) state = [...next];
    return { decision, state };
  });
}

describe('traffic patterns', () => {
  it('spaces steady requests evenly, in whole microseconds', () => {
    const times = arrivals({ pattern: { kind: 'steady', ratePerSecond: 3 }, durationMs: 1000 }, START_US);
    expect(times).toEqual([0, 333_333, 666_666, 999_999]);
  });

  it('sends bursts at once and attacks in on/off cycles', () => {
    expect(arrivals({ pattern: { kind: 'bursts', size: 3, everyMs: 400 }, durationMs: 1000 }, START_US)).toEqual([
      0, 0, 0, 400_000, 400_000, 400_000, 800_000, 800_000, 800_000,
    ]);
    expect(
      arrivals({ pattern: { kind: 'on-off', ratePerSecond: 10, onMs: 200, offMs: 300 }, durationMs: 1200 }, START_US),
    ).toEqual([0, 100_000, 500_000, 600_000, 1_000_000, 1_100_000]);
  });

  it('piles a stampede on each side of the clock boundaries', () => {
    // Start 300 ms past a 1 s boundary: the first boundary is 700 ms in.
    const times = arrivals(
      { pattern: { kind: 'stampede', size: 2, windowMs: 1000, spreadMs: 100 }, durationMs: 1500 },
      START_US + 300_000,
    );
    expect(times).toEqual([600_000, 650_000, 700_000, 750_000]);
  });

  it('makes the same random traffic from the same seed, at about the mean rate', () => {
    const traffic: Traffic = { pattern: { kind: 'random', ratePerSecond: 50, seed: 9 }, durationMs: 60_000 };
    const first = arrivals(traffic, START_US);
    expect(arrivals(traffic, START_US)).toEqual(first);
    expect(first.length).toBeGreaterThan(2700);
    expect(first.length).toBeLessThan(3300);
    expect(arrivals({ ...traffic, pattern: { kind: 'random', ratePerSecond: 50, seed: 10 } }, START_US)).not.toEqual(
      first,
    );
  });
});

describe('the simulator gives the model’s decisions', () => {
  for (const policy of POLICIES) {
    for (const pattern of PATTERNS) {
      it(`${JSON.stringify(policy)} under ${pattern.kind} traffic`, () => {
        const traffic: Traffic = { pattern, durationMs: 8000, cost: 1 };
        const sim = simulate({ policy }, traffic);
        const times = arrivals(traffic, START_US);
        const expected = modelRun(policy, times, 1);
        expect(sim.calls.map((c) => c.atUs)).toEqual(times);
        sim.calls.forEach((call, i) => {
          const { decision } = expected[i] as (typeof expected)[number];
          expect({
            allowed: call.allowed,
            remaining: call.remaining,
            retryAfterMs: call.retryAfterMs,
            resetAfterMs: call.resetAfterMs,
            delayMs: call.delayMs,
            reason: call.reason,
          }).toEqual({
            allowed: decision.allowed,
            remaining: decision.remaining,
            retryAfterMs: decision.retryAfterMs,
            resetAfterMs: decision.resetAfterMs,
            delayMs: decision.delayMs ?? 0,
            reason: decision.reason,
          });
        });
        expect(sim.admitted).toBe(expected.filter((e) => e.decision.allowed).length);
        expect(sim.admitted + sim.denied).toBe(times.length);
      });
    }
  }

  it('plots the TAT the model stores, and a token bucket’s tokens', () => {
    const traffic: Traffic = { pattern: { kind: 'bursts', size: 4, everyMs: 1000 }, durationMs: 3000 };
    const gcra: PolicyInput = { algorithm: 'gcra', limit: 2, periodMs: 1000, burst: 4 };
    const sim = simulate({ policy: gcra }, traffic);
    const model = modelRun(gcra, arrivals(traffic, START_US), 1);
    sim.calls.forEach((call, i) => {
      const state = (model[i] as (typeof model)[number]).state as State;
      // The level of GCRA is TAT − now in ms, read right after the call.
      expect(call.level).toBeCloseTo(((state[1] as number) - (START_US + call.atUs)) / 1000, 9);
    });
    expect(sim.scale.ceiling).toBe(2000);

    const bucket: PolicyInput = { algorithm: 'token-bucket', capacity: 4, refillAmount: 2, refillIntervalMs: 1000 };
    const tokens = simulate({ policy: bucket }, traffic);
    // Four at once empty the bucket; a second later two tokens are back, so two of the next four pass.
    expect(tokens.calls.map((c) => c.allowed)).toEqual([
      true,
      true,
      true,
      true,
      true,
      true,
      false,
      false,
      true,
      true,
      false,
      false,
    ]);
    expect(tokens.calls[3]?.level).toBe(0);
    expect(tokens.scale.countsDown).toBe(true);
  });

  it('plots a bucketed window’s count, as the model reads its buckets', () => {
    const policy: PolicyInput = { algorithm: 'sliding-window', limit: 4, windowMs: 1000, precisionMs: 250 };
    const sim = simulate({ policy }, { pattern: { kind: 'steady', ratePerSecond: 8 }, durationMs: 2000 });
    expect(sim.scale.label).toBe("count in the window's buckets of 250 ms");
    // Eight a second against four per second in buckets of 250 ms: the first four pass, then one per
    // bucket as the oldest leaves, so the count never passes the limit.
    expect(sim.calls.slice(0, 6).map((c) => c.allowed)).toEqual([true, true, true, true, false, false]);
    expect(Math.max(...sim.calls.map((c) => c.level))).toBe(4);
    expect(sim.admitted).toBe(8);
  });

  it('shows the penalty box over time', () => {
    const policy: PolicyInput = { algorithm: 'fixed-window', limit: 2, windowMs: 1000, blockMs: 2500 };
    const sim = simulate({ policy }, { pattern: { kind: 'steady', ratePerSecond: 4 }, durationMs: 4000 });
    const blockedAt = (s: number) => {
      const i = sim.curve.atUs.findIndex((t) => t >= s * 1e6);
      return sim.curve.blocked[i];
    };
    // Third request at 0.5 s is denied: blocked until 3 s.
    expect(sim.calls.map((c) => c.allowed).slice(0, 3)).toEqual([true, true, false]);
    expect(blockedAt(1)).toBe(1);
    expect(blockedAt(2.9)).toBe(1);
    expect(blockedAt(3.1)).toBe(0);
  });

  it('refuses an invalid policy with the library’s error, naming the option', () => {
    expect(() =>
      simulate(
        { policy: { algorithm: 'gcra', limit: 0, periodMs: 1000 } },
        { pattern: { kind: 'steady', ratePerSecond: 1 }, durationMs: 1000 },
      ),
    ).toThrow(/policy\.limit/);
  });
});

describe('the response at an instant', () => {
  const traffic: Traffic = { pattern: { kind: 'steady', ratePerSecond: 10 }, durationMs: 5000 };
  const policy: PolicyInput = { algorithm: 'fixed-window', limit: 5, windowMs: 1000, name: 'per-second' };

  it('is what the HTTP middleware answers after the traffic up to then', async () => {
    // At 1.45 s: requests at 1.0 … 1.4 s took the whole window; a sixth is refused until 2 s.
    const denied = await probe({ policy }, traffic, 1_450_000, 'ietf');
    expect(denied.outcome.status).toBe(429);
    const headers = Object.fromEntries(
      denied.outcome.headers.flatMap((v, i, all) => (i % 2 === 0 ? [[v, all[i + 1]]] : [])),
    );
    expect(headers).toMatchObject({
      'RateLimit-Policy': '"per-second";q=5;w=1',
      RateLimit: '"per-second";r=0;t=1',
      'Retry-After': '1',
    });
    expect(denied.outcome.decision.retryAfterMs).toBe(550);
    expect(denied.lastCall?.atUs).toBe(1_400_000);
    expect(denied.before.level).toBe(5);

    // At 1.0 s exactly, the request of the traffic at that instant is counted first.
    const allowed = await probe({ policy }, traffic, 1_000_000, 'draft-6');
    expect(allowed.outcome.status).toBe(200);
    expect(allowed.outcome.headers).toEqual([
      'RateLimit-Policy',
      '5;w=1',
      'RateLimit-Limit',
      '5',
      'RateLimit-Remaining',
      '3',
      'RateLimit-Reset',
      '1',
    ]);
  });

  it('reports a queue delay instead of waiting for it', async () => {
    const queue: PolicyInput = { algorithm: 'leaky-bucket', capacity: 4, leakPerSecond: 2, mode: 'queue' };
    const result = await probe(
      { policy: queue },
      { pattern: { kind: 'bursts', size: 2, everyMs: 10_000 }, durationMs: 1000 },
      0,
      'ietf',
    );
    expect(result.outcome.status).toBe(200);
    expect(result.outcome.decision.delayMs).toBe(1000);
  });
});
