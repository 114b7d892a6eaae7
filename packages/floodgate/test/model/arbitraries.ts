import fc from 'fast-check';
import {
  fixedWindow,
  gcra,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/model/index.js';

/** The parts random policies are made of. */
export interface PolicyParts {
  /** Limits, capacities and bursts (at least 1). */
  size: fc.Arbitrary<number>;
  /** Refill amounts of the token buckets. */
  refill: fc.Arbitrary<number>;
  /** Penalty boxes (0: none). */
  blockMs: fc.Arbitrary<number>;
}

/** Every algorithm and option, with parameters small enough for random traffic to reach the limits. */
export function policyArbitrary({ size, refill, blockMs }: PolicyParts): fc.Arbitrary<Policy> {
  return fc.oneof(
    fc.record({ limit: size, periodMs: fc.integer({ min: 1, max: 2000 }), blockMs }).map((o) => gcra(o)),
    fc
      .record({ limit: size, periodMs: fc.integer({ min: 1, max: 2000 }), burst: size, blockMs })
      .map((o) => gcra({ ...o, burst: Math.max(1, o.burst) })),
    fc
      .record({ capacity: size, refillAmount: refill, refillIntervalMs: fc.integer({ min: 1, max: 1000 }), blockMs })
      .map((o) => tokenBucket(o)),
    fc
      .record({ capacity: size, refillAmount: refill, refillIntervalMs: fc.integer({ min: 1, max: 1000 }), blockMs })
      .map((o) => tokenBucket({ ...o, refill: 'interval' })),
    fc
      .record({
        capacity: size,
        leakPerSecond: fc.double({ min: 0.5, max: 50, noNaN: true }),
        queue: fc.boolean(),
        blockMs,
      })
      .map(({ queue, ...o }) => leakyBucket({ ...o, mode: queue ? 'queue' : 'meter' })),
    fc
      .record({ limit: size, windowMs: fc.integer({ min: 1, max: 2000 }), first: fc.boolean(), blockMs })
      .map(({ first, ...o }) => fixedWindow({ ...o, align: first ? 'first-request' : 'clock' })),
    fc.record({ limit: size, windowMs: fc.integer({ min: 1, max: 2000 }), blockMs }).map((o) => slidingWindow(o)),
    fc
      .record({
        limit: size,
        precisionMs: fc.integer({ min: 1, max: 400 }),
        buckets: fc.integer({ min: 1, max: 8 }),
        blockMs,
      })
      .map(({ buckets, ...o }) => slidingWindow({ ...o, windowMs: o.precisionMs * buckets })),
    fc
      .record({
        limit: size,
        windowMs: fc.integer({ min: 1, max: 2000 }),
        minGapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 300 })),
        countDenied: fc.boolean(),
        blockMs,
      })
      .map((o) => slidingLog(o)),
  );
}
