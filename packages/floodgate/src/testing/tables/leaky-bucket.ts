import { leakyBucket } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { deny } from './steps.js';

/** The tables of the leaky bucket, written from the semantics in DESIGN.md: every store reproduces them exactly. */
export const leakyBucketTables: Scenario[] = [
  {
    name: 'leaky bucket meter: fractional costs against a level that leaks',
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 1 })],
    steps: [
      { at: 0, repeat: 3, expect: { allowed: true } },
      { at: 0, expect: deny(1000, { remaining: 0, resetAfterMs: 3000 }) },
      { at: 500, expect: deny(500) },
      { at: 500, cost: 0.5, expect: { allowed: true, remaining: 0, resetAfterMs: 3000 } },
      { at: 1500, cost: 1.25, expect: deny(250) },
      { at: 1750, cost: 1.25, expect: { allowed: true, remaining: 0 } },
      { at: 4750, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'leaky bucket: a spend budget of 1000.00 per 30 days',
    policies: [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / (30 * 86_400), name: 'budget' })],
    steps: [
      { at: 0, cost: 30, expect: { allowed: true, remaining: 970 } },
      // 20 over: 20 units leak in 20 × 2592 s.
      { at: 0, cost: 990, expect: deny(51_840_000, { remaining: 970 }) },
      { at: 0, cost: 969.99, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.01, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.01, expect: deny(25_920) },
      { at: 0, cost: 1000.01, op: 'check', expect: { allowed: false, reason: 'exceeds-capacity' } },
      { at: 25_919, cost: 0.01, expect: deny(1) },
      { at: 25_920, cost: 0.01, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    // Decimal amounts that add up to the budget exactly must fit it, whatever binary rounding says.
    name: 'leaky bucket: decimal amounts that add up to the budget fit it exactly',
    policies: [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / (30 * 86_400), name: 'budget' })],
    steps: [
      ...[184.58, 207.21, 226.7, 322].map((cost) => ({ at: 0, cost, expect: { allowed: true } })),
      { at: 0, cost: 59.51, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.01, expect: deny(25_920) },
    ],
  },
  {
    name: 'leaky bucket queue: admitted calls are spaced by delayMs, constant outflow',
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 1, mode: 'queue' })],
    steps: [
      {
        at: 0,
        repeat: 3,
        expectEach: [null, 1000, 2000].map((delayMs) => ({ allowed: true, delayMs })),
      },
      { at: 0, expect: deny(1000) },
      { at: 1000, expect: { allowed: true, delayMs: 2000 } },
      { at: 4000, expect: { allowed: true, delayMs: null } },
    ],
  },
];
