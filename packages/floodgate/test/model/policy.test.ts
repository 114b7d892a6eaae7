import { describe, expect, it } from 'vitest';
import {
  definePolicy,
  type FloodgateError,
  fixedWindow,
  gcra,
  isFloodgateError,
  leakyBucket,
  MAX_SLIDING_LOG_LIMIT,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { compilePolicy } from '../../src/model/index.js';

function policyError(fn: () => unknown): FloodgateError {
  try {
    fn();
  } catch (error) {
    expect(isFloodgateError(error)).toBe(true);
    return error as FloodgateError;
  }
  throw new Error('expected a FloodgateError');
}

describe('policy validation', () => {
  const bad: [string, () => unknown, string, RegExp][] = [
    ['limit 0', () => gcra({ limit: 0, periodMs: 1000 }), 'gcra.limit', /got 0/],
    ['negative limit', () => gcra({ limit: -5, periodMs: 1000 }), 'gcra.limit', /got -5/],
    ['NaN limit', () => gcra({ limit: Number.NaN, periodMs: 1000 }), 'gcra.limit', /got NaN/],
    ['Infinity limit', () => gcra({ limit: Number.POSITIVE_INFINITY, periodMs: 1000 }), 'gcra.limit', /got Infinity/],
    ['string limit', () => gcra({ limit: '10' as unknown as number, periodMs: 1000 }), 'gcra.limit', /got "10"/],
    ['burst below 1', () => gcra({ limit: 10, periodMs: 1000, burst: 0.5 }), 'gcra.burst', /got 0.5/],
    ['period 0', () => gcra({ limit: 10, periodMs: 0 }), 'gcra.periodMs', /got 0/],
    ['period under 1 µs', () => fixedWindow({ limit: 10, windowMs: 0.0004 }), 'fixedWindow.windowMs', /0.0004/],
    ['period NaN', () => slidingWindow({ limit: 10, windowMs: Number.NaN }), 'slidingWindow.windowMs', /NaN/],
    ['negative blockMs', () => slidingLog({ limit: 1, windowMs: 1, blockMs: -1 }), 'slidingLog.blockMs', /-1/],
    [
      'capacity 0',
      () => tokenBucket({ capacity: 0, refillAmount: 1, refillIntervalMs: 1 }),
      'tokenBucket.capacity',
      /got 0/,
    ],
    [
      'refill 0',
      () => tokenBucket({ capacity: 1, refillAmount: 0, refillIntervalMs: 1 }),
      'tokenBucket.refillAmount',
      /got 0/,
    ],
    ['leak -1', () => leakyBucket({ capacity: 1, leakPerSecond: -1 }), 'leakyBucket.leakPerSecond', /-1/],
    [
      'bad mode',
      () => leakyBucket({ capacity: 1, leakPerSecond: 1, mode: 'drip' as 'queue' }),
      'leakyBucket.mode',
      /"drip"/,
    ],
    [
      'bad align',
      () => fixedWindow({ limit: 1, windowMs: 1, align: 'hour' as 'clock' }),
      'fixedWindow.align',
      /"hour"/,
    ],
    [
      'bad refill',
      () => tokenBucket({ capacity: 1, refillAmount: 1, refillIntervalMs: 1, refill: 'x' as 'interval' }),
      'tokenBucket.refill',
      /"x"/,
    ],
    [
      'countDenied not a boolean',
      () => slidingLog({ limit: 1, windowMs: 1, countDenied: 1 as unknown as boolean }),
      'slidingLog.countDenied',
      /got 1/,
    ],
    [
      'a sliding log above its largest limit',
      () => definePolicy({ algorithm: 'sliding-log', limit: 1000.5, windowMs: 1000 }),
      'policy.limit',
      /at most 1000 .*use slidingWindow.*got 1000\.5/,
    ],
    ['upper-case name', () => gcra({ limit: 1, periodMs: 1, name: 'API' }), 'gcra.name', /"API"/],
    ['name with a brace', () => gcra({ limit: 1, periodMs: 1, name: 'a}b' }), 'gcra.name', /"a}b"/],
    ['unknown algorithm', () => definePolicy({ algorithm: 'token' }), 'policy.algorithm', /"token"/],
    ['not an object', () => definePolicy(42), 'policy', /got 42/],
    [
      'unknown option',
      () => definePolicy({ algorithm: 'gcra', limit: 1, periodMs: 1, burts: 2 }),
      'policy.burts',
      /not an option/,
    ],
    ['faster than 1 per µs', () => gcra({ limit: 2_000_000, periodMs: 1000 }), 'gcra', /per microsecond/],
    ['burst draining for years', () => gcra({ limit: 1, periodMs: 86_400_000, burst: 10_000 }), 'gcra', /drain/],
    [
      'an interval refill from empty taking more than 2^52 µs',
      () => tokenBucket({ capacity: 2, refillAmount: 1e-9, refillIntervalMs: 2 ** 47 / 1000, refill: 'interval' }),
      'tokenBucket.refillAmount',
      /refillAmount 1e-9 per 140737488355\.328 ms takes .* to refill tokenBucket\.capacity 2/,
    ],
    ['options not an object', () => gcra(null as unknown as { limit: number; periodMs: number }), 'gcra', /got null/],
  ];
  for (const [label, fn, option, message] of bad) {
    it(`refuses ${label} with ERR_INVALID_POLICY naming ${option}`, () => {
      const error = policyError(fn);
      expect(error.code).toBe('ERR_INVALID_POLICY');
      expect(error.option).toBe(option);
      expect(error.message).toMatch(message);
      expect(error.message).toContain(option);
    });
  }

  it.each([
    [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / (30 * 86_400) }), 'leaky-bucket-1000-leak-1000-per-30d'],
    [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 3600 }), 'leaky-bucket-1000-leak-1000-per-1h'],
    [leakyBucket({ capacity: 7, leakPerSecond: 0.3 }), 'leaky-bucket-7-leak-18-per-1m'],
    [leakyBucket({ capacity: 10, leakPerSecond: 5, mode: 'queue' }), 'leaky-bucket-10-leak-10-per-2s-queue'],
    [leakyBucket({ capacity: 3, leakPerSecond: Math.PI }), 'leaky-bucket-3-leak-3.141592653589793-per-1s'],
    [fixedWindow({ limit: 10, windowMs: 60_000 }), 'fixed-window-10-per-1m'],
    [fixedWindow({ limit: 10, windowMs: 90_000, align: 'first-request' }), 'fixed-window-10-per-90s-first-request'],
    [gcra({ limit: 100, periodMs: 3_600_000, burst: 10 }), 'gcra-100-per-1h-burst-10'],
    [
      slidingLog({ limit: 5, windowMs: 1500, minGapMs: 10, blockMs: 300_000 }),
      'sliding-log-5-per-1500ms-gap-10ms-block-5m',
    ],
    [
      slidingWindow({ limit: 100, windowMs: 86_400_000, precisionMs: 600_000 }),
      'sliding-window-100-per-1d-precision-10m',
    ],
    [tokenBucket({ capacity: 10, refillAmount: 1, refillIntervalMs: 1000 }), 'token-bucket-10-refill-1-per-1s'],
    [
      tokenBucket({ capacity: 10, refillAmount: 2, refillIntervalMs: 0.5, refill: 'interval' }),
      'token-bucket-10-refill-2-per-0.5ms-interval',
    ],
  ])('derives a short name from the inputs: %#', (policy, name) => {
    expect(policy.name).toBe(name);
  });

  it('derives different names for different leak rates, however close', () => {
    const names = new Set(
      [1000 / 3600, 1000 / 3601, 0.3, 0.30000001, 1 / 3, 0.333, 5, 5.5].map(
        (leakPerSecond) => leakyBucket({ capacity: 1000, leakPerSecond }).name,
      ),
    );
    expect(names.size).toBe(8);
  });

  it('fills defaults and derives stable names', () => {
    expect(gcra({ limit: 100, periodMs: 60_000 })).toEqual({
      algorithm: 'gcra',
      name: 'gcra-100-per-1m',
      blockMs: 0,
      limit: 100,
      periodMs: 60_000,
      burst: 100,
    });
    expect(slidingLog({ limit: MAX_SLIDING_LOG_LIMIT, windowMs: 1000 }).limit).toBe(1000);
    expect(slidingLog({ limit: 5, windowMs: 1000, minGapMs: 10, countDenied: true, blockMs: 5 }).name).toBe(
      'sliding-log-5-per-1s-gap-10ms-count-denied-block-5ms',
    );
    const long = leakyBucket({ capacity: 123456.789, leakPerSecond: 1 / 3, mode: 'queue', blockMs: 123456.5 });
    expect(long.name.length).toBeLessThanOrEqual(64);
    expect(long.name).not.toBe(
      leakyBucket({ capacity: 123456.789, leakPerSecond: 1 / 3, mode: 'queue', blockMs: 1 }).name,
    );
  });

  it('accepts plain data from config files and returns frozen policies', () => {
    const p = definePolicy({
      algorithm: 'token-bucket',
      capacity: 5,
      refillAmount: 1,
      refillIntervalMs: 200,
      name: 'burst',
    });
    expect(Object.isFrozen(p)).toBe(true);
    expect(definePolicy(p)).toBe(p);
    expect(p).toMatchObject({ refill: 'continuous', name: 'burst' });
  });

  it('compiles meters to whole microseconds, rounding the interval up and the tolerance down', () => {
    expect(compilePolicy(gcra({ limit: 5, periodMs: 60_000 }))).toMatchObject({
      kind: 1,
      a: 12_000_000,
      b: 60_000_000,
    });
    expect(compilePolicy(gcra({ limit: 3, periodMs: 1000 }))).toMatchObject({ a: 333_334, b: 1_000_002 });
    expect(compilePolicy(leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 2_592_000 }))).toMatchObject({
      a: 2_592_000_000,
      b: 2_592_000_000_000,
    });
    expect(compilePolicy(tokenBucket({ capacity: 3.5, refillAmount: 3, refillIntervalMs: 1 }))).toMatchObject({
      a: 334,
      b: 1169,
      limit: 3.5,
    });
  });
});
