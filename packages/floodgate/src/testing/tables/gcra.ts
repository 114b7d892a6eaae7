import { MAX_COST, MIN_COST } from '../../model/cost.js';
import { gcra } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { deny } from './steps.js';

/** The tables of GCRA, written from the semantics in DESIGN.md: every store reproduces them exactly. */
export const gcraTables: Scenario[] = [
  {
    // T = 1 s: the smallest cost is charged ceil(1e-9 · 1e6 µs) = 1 µs, never nothing.
    name: 'cost domain: the smallest cost is charged a whole µs of a meter, the largest can never fit',
    policies: [gcra({ limit: 1, periodMs: 1000 })],
    steps: [
      { at: 0, cost: MIN_COST, expect: { allowed: true, remaining: 0, resetAfterMs: 1 } },
      { at: 0, cost: 1, expect: deny(1, { remaining: 0 }) },
      { at: 0.001, cost: 1, expect: { allowed: true, remaining: 0, resetAfterMs: 1000 } },
      { at: 0.001, cost: MAX_COST, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
    ],
  },
  {
    // The GCRA article's case: 5 per minute admits a burst of 5, then the next must wait 12 s.
    name: 'GCRA: 5 per minute admits a burst of 5, then one every 12 s',
    policies: [gcra({ limit: 5, periodMs: 60_000 })],
    steps: [
      {
        at: 0,
        repeat: 5,
        expectEach: [4, 3, 2, 1, 0].map((remaining, i) => ({
          allowed: true,
          remaining,
          retryAfterMs: 0,
          resetAfterMs: 12_000 * (i + 1),
        })),
      },
      { at: 0, expect: deny(12_000, { remaining: 0, resetAfterMs: 60_000, policy: 'gcra-5-per-1m' }) },
      { at: 11_999, expect: deny(1) },
      { at: 11_999.999, expect: deny(1) },
      { at: 12_000, expect: { allowed: true, remaining: 0, resetAfterMs: 60_000 } },
      { at: 12_000, expect: deny(12_000) },
      { at: 36_000, op: 'status', expect: { allowed: true, remaining: 2, resetAfterMs: 36_000 } },
      { at: 36_000, cost: 2, op: 'check', expect: { allowed: true, remaining: 0 } },
      { at: 36_000, cost: 3, expect: deny(12_000, { remaining: 2 }) },
      { at: 36_000, cost: 6, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 36_000, cost: 0, expect: { allowed: true, remaining: 2 } },
      { at: 72_000, op: 'status', expect: { allowed: true, remaining: 5, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'GCRA: burst 1 spaces calls by the emission interval',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0, resetAfterMs: 100 } },
      { at: 0, expect: deny(100, { remaining: 0 }) },
      { at: 50, expect: deny(50) },
      { at: 100, expect: { allowed: true } },
      { at: 150, expect: deny(50) },
      { at: 1000, cost: 2, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
    ],
  },
  {
    // T = 333 333.3 µs is rounded up to 333 334 µs: never more than 3 per second.
    name: 'GCRA: rates that are not whole microseconds (3 per second)',
    policies: [gcra({ limit: 3, periodMs: 1000 })],
    steps: [
      { at: 0, repeat: 3, expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining })) },
      { at: 0, expect: deny(334) },
      { at: 333.333, expect: deny(1) },
      { at: 333.334, expect: { allowed: true, remaining: 0 } },
      { at: 1333.335, op: 'status', expect: { remaining: 2, resetAfterMs: 1 } },
      { at: 1333.336, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    ],
  },
  {
    // τ is rounded like a charge, so a cost equal to a fractional burst fits (T = 666 667 µs).
    name: 'GCRA: a fractional limit admits a cost equal to it',
    policies: [gcra({ limit: 1.5, periodMs: 1000 })],
    steps: [
      { at: 0, cost: 1.5, op: 'check', expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 1.5, expect: { allowed: true, remaining: 0, resetAfterMs: 1001 } },
      { at: 0, cost: 1.6, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 0, cost: 1, expect: deny(667) },
      { at: 1000.001, cost: 1.5, expect: { allowed: true } },
    ],
  },
];
