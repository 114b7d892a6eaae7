import { tokenBucket } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { deny } from './steps.js';

/** The tables of the token bucket, written from the semantics in DESIGN.md: every store reproduces them exactly. */
export const tokenBucketTables: Scenario[] = [
  {
    name: 'token bucket, continuous refill: 10 at once, then 2 per second',
    policies: [tokenBucket({ capacity: 10, refillAmount: 2, refillIntervalMs: 1000 })],
    steps: [
      { at: 0, repeat: 10, expect: { allowed: true } },
      { at: 0, expect: deny(500, { remaining: 0, resetAfterMs: 5000 }) },
      { at: 500, expect: { allowed: true, remaining: 0 } },
      { at: 2000, op: 'status', expect: { remaining: 3, resetAfterMs: 3500 } },
      { at: 2000, cost: 3.5, expect: deny(250, { remaining: 3 }) },
      { at: 2250, cost: 3.5, expect: { allowed: true, remaining: 0 } },
      { at: 8000, op: 'status', expect: { remaining: 10, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'token bucket, interval refill: tokens come back at each interval boundary',
    policies: [tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 1000, refill: 'interval' })],
    steps: [
      { at: 0, repeat: 3, expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining })) },
      { at: 0, expect: deny(1000, { resetAfterMs: 3000 }) },
      { at: 999, expect: deny(1) },
      { at: 1000, expect: { allowed: true, remaining: 0, resetAfterMs: 3000 } },
      { at: 1500, expect: deny(500) },
      { at: 2000, cost: 2, expect: deny(1000, { remaining: 1 }) },
      { at: 3999, expect: { allowed: true, remaining: 1 } },
      { at: 10_000, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
      { at: 10_500, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      { at: 11_499, op: 'status', expect: { remaining: 2, resetAfterMs: 1 } },
      { at: 11_500, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    // Float dust: the bucket holds 2.25 as 2.2500000000000004, so one refill of 0.75 leaves a hair over
    // 1.5 and cost 2 needs two. The wait is found with the bucket's own test, not by dividing (which
    // promised 33 ms, and the call was denied then): admitted exactly when promised, not 1 ms earlier.
    name: 'token bucket, interval refill, fractional amounts: the promised retry is admitted',
    policies: [tokenBucket({ capacity: 3.5, refillAmount: 0.75, refillIntervalMs: 333, refill: 'interval' })],
    steps: [
      { at: 333, cost: 2, expect: { allowed: true } },
      { at: 666, cost: 0.1, expect: { allowed: true } },
      { at: 766, cost: 0.3, expect: { allowed: true } },
      { at: 866, cost: 1.25, expect: { allowed: true } },
      { at: 1199, cost: 0.1, expect: { allowed: true } },
      { at: 1299, cost: 2, expect: deny(366) },
      { at: 1664, cost: 2, op: 'check', expect: { allowed: false } },
      { at: 1665, cost: 2, expect: { allowed: true } },
    ],
  },
];
