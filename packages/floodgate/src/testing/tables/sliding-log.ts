import { slidingLog } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { deny } from './steps.js';

/** The tables of the sliding log, written from the semantics in DESIGN.md: every store reproduces them exactly. */
export const slidingLogTables: Scenario[] = [
  {
    name: 'sliding log: exact over any window',
    policies: [slidingLog({ limit: 3, windowMs: 1000 })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      { at: 100, expect: { allowed: true, remaining: 1 } },
      { at: 200, expect: { allowed: true, remaining: 0, resetAfterMs: 1000 } },
      { at: 300, expect: deny(700, { resetAfterMs: 900 }) },
      { at: 300, cost: 2, expect: deny(800) },
      { at: 1000, expect: { allowed: true, remaining: 0 } },
      { at: 2200, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'sliding log: minimum gap between events',
    policies: [slidingLog({ limit: 10, windowMs: 1000, minGapMs: 100 })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 9 } },
      { at: 50, expect: deny(50, { remaining: 9 }) },
      { at: 100, expect: { allowed: true, remaining: 8 } },
      { at: 100, cost: 0, expect: { allowed: true } },
    ],
  },
  {
    name: 'sliding log counting denied attempts: a client that keeps trying stays out',
    policies: [slidingLog({ limit: 2, windowMs: 1000, countDenied: true })],
    steps: [
      { at: 0, expect: { allowed: true } },
      { at: 100, expect: { allowed: true } },
      { at: 500, expect: deny(600) },
      // The logged attempt puts the log over its limit: a check says no, as the whole log of attempts
      // does (it said yes when a denial kept only the newest events that reach the limit).
      { at: 500, cost: 0, op: 'check', expect: { allowed: false } },
      { at: 1050, expect: deny(450) },
      { at: 1499, expect: deny(551) },
      { at: 2499, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    // 2.6 − 0.3 − 0.3 is 2.0000000000000004 while 2 alone is 2: the wait is summed the way the
    // evaluation sums, so it does not skip the event at 100 ms (it used to promise 390 ms).
    name: 'sliding log, fractional costs: the call fits exactly when promised',
    policies: [slidingLog({ limit: 3, windowMs: 400 })],
    steps: [
      { at: 0, cost: 0.3, expect: { allowed: true } },
      { at: 100, cost: 0.3, expect: { allowed: true } },
      { at: 200, cost: 2, expect: { allowed: true } },
      { at: 210, cost: 1, expect: deny(290) },
      { at: 499.999, cost: 1, op: 'check', expect: { allowed: false } },
      { at: 500, cost: 1, expect: { allowed: true, remaining: 0 } },
    ],
  },
];
