import { slidingWindow } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { clockWindowSteps, deny } from './steps.js';

/**
 * The tables of the sliding window: the counter (two windows, the previous one weighted by its overlap) and
 * the bucketed window (`precisionMs`). Written from the semantics in DESIGN.md; every store reproduces them.
 */
export const slidingWindowTables: Scenario[] = [
  {
    name: 'sliding-window counter: the previous window counts by its overlap',
    policies: [slidingWindow({ limit: 10, windowMs: 1000 })],
    steps: [
      { at: 0, repeat: 10, expect: { allowed: true } },
      { at: 500, expect: deny(600, { remaining: 0, resetAfterMs: 1500 }) },
      { at: 1099, expect: deny(1) },
      { at: 1100, expect: { allowed: true, remaining: 0, resetAfterMs: 1900 } },
      { at: 1500, op: 'status', expect: { remaining: 4 } },
      { at: 1500, cost: 4, expect: { allowed: true, remaining: 0 } },
      { at: 1500, expect: deny(100) },
      { at: 3000, op: 'status', expect: { remaining: 10, resetAfterMs: 0 } },
    ],
  },
  {
    // Buckets of a second, summed over five: a bucket counts whole until it leaves the window, at once.
    name: 'bucketed window: per-second buckets summed over five seconds, each leaving whole',
    policies: [slidingWindow({ limit: 5, windowMs: 5000, precisionMs: 1000 })],
    steps: [
      { at: 0, repeat: 2, expectEach: [4, 3].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 5000 })) },
      {
        at: 1500,
        repeat: 2,
        expectEach: [2, 1].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 4500 })),
      },
      { at: 2999, expect: { allowed: true, remaining: 0, resetAfterMs: 4001 } },
      // 2 + 2 + 1: the call fits once the bucket of 0 (2 calls) leaves, at 5000.
      { at: 3000, expect: deny(2000, { remaining: 0, resetAfterMs: 4000 }) },
      { at: 4999, expect: deny(1, { resetAfterMs: 2001 }) },
      { at: 5000, expect: { allowed: true, remaining: 1, resetAfterMs: 5000 } },
      // Cost 2 beside 1 + 1 + 2: the bucket of 1000 must leave first.
      { at: 5000, cost: 2, expect: deny(1000, { remaining: 1 }) },
      { at: 6000, cost: 2, expect: { allowed: true, remaining: 1, resetAfterMs: 5000 } },
      { at: 10_999, op: 'status', expect: { remaining: 3, resetAfterMs: 1 } },
      { at: 11_000, op: 'status', expect: { remaining: 5, resetAfterMs: 0 } },
    ],
  },
  {
    // With one bucket per window, the bucketed window is the clock-aligned fixed window, step for step.
    name: 'bucketed window with one bucket per window: the fixed window aligned to the clock',
    policies: [slidingWindow({ limit: 3, windowMs: 1000, precisionMs: 1000 })],
    steps: clockWindowSteps(),
  },
  {
    name: 'bucketed window: fractional costs and a penalty box; the wait is exact',
    policies: [slidingWindow({ limit: 1, windowMs: 300, precisionMs: 100, blockMs: 150, name: 'bw' })],
    steps: [
      { at: 0, cost: 0.1, expect: { allowed: true, remaining: 0 } },
      { at: 100, cost: 0.2, expect: { allowed: true, remaining: 0 } },
      { at: 200, cost: 0.7, expect: { allowed: true, remaining: 0, resetAfterMs: 300 } },
      // The window holds 0.1 + 0.2 + 0.7: cost 0.2 waits for the 0.1 and the 0.2 to leave (at 400), and
      // the denial starts a block of 150 ms, which ends with that wait.
      { at: 250, cost: 0.2, expect: deny(150, { remaining: 0, resetAfterMs: 250 }) },
      { at: 300, cost: 0.2, expect: { allowed: false, reason: 'blocked', retryAfterMs: 100 } },
      { at: 400, cost: 0.2, expect: { allowed: true, remaining: 0, resetAfterMs: 300 } },
    ],
  },
];
