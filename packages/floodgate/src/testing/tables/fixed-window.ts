import { MIN_COST } from '../../model/cost.js';
import { fixedWindow, gcra } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { clockWindowSteps, deny } from './steps.js';

/** The tables of the fixed window, written from the semantics in DESIGN.md: every store reproduces them exactly. */
export const fixedWindowTables: Scenario[] = [
  {
    // Window counts are doubles summed in call order, the same in every store: 0.1 + 0.2 + 0.7 is exactly
    // 1, and 0.7 + 0.2 + 0.1 is 0.9999999999999999; either way nothing more fits, not even the smallest cost.
    name: 'cost domain: decimal costs add up in binary under a fixed window',
    policies: [fixedWindow({ limit: 1, windowMs: 1000 })],
    steps: [
      { at: 0, cost: 0.1, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.2, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: 0.7, expect: { allowed: true, remaining: 0 } },
      { at: 0, cost: MIN_COST, expect: deny(1000, { remaining: 0 }) },
      { at: 1000, cost: 0.7, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: 0.2, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: 0.1, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: MIN_COST, expect: deny(1000) },
      { at: 2000, cost: MIN_COST, repeat: 3, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'fixed window aligned to the clock: everyone resets together',
    policies: [fixedWindow({ limit: 3, windowMs: 1000 })],
    steps: clockWindowSteps(),
  },
  {
    name: 'fixed window aligned to the first request',
    policies: [fixedWindow({ limit: 3, windowMs: 1000, align: 'first-request' })],
    steps: [
      { at: 500, repeat: 3, expect: { allowed: true, resetAfterMs: 1000 } },
      { at: 1000, expect: deny(500) },
      { at: 1499, expect: deny(1) },
      { at: 1500, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      { at: 3000, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
    ],
  },
  {
    // Envoy's reference service adds every hit to the window before comparing: calls over the limit
    // count too, so a client that keeps calling stays denied, and a check (cost 0) of a window pushed past
    // its limit is denied until the window ends. A cost above the limit can never pass, and still counts.
    name: 'fixed window that counts denied calls (countDenied)',
    policies: [fixedWindow({ limit: 3, windowMs: 1000, countDenied: true })],
    steps: [
      {
        at: 0,
        repeat: 3,
        expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 1000 })),
      },
      { at: 100, expect: deny(900, { remaining: 0, resetAfterMs: 900 }) },
      { at: 200, op: 'check', expect: deny(800, { remaining: 0 }) },
      { at: 200, cost: 0, expect: deny(800, { remaining: 0 }) },
      { at: 999, op: 'status', expect: { remaining: 0, resetAfterMs: 1 } },
      { at: 1000, expect: { allowed: true, remaining: 2, resetAfterMs: 1000 } },
      {
        at: 1000,
        cost: 5,
        expect: {
          allowed: false,
          reason: 'exceeds-capacity',
          retryAfterMs: Infinity,
          remaining: 0,
          resetAfterMs: 1000,
        },
      },
      { at: 1500, cost: 0, expect: deny(500, { remaining: 0 }) },
      { at: 2000, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
      { at: 2000, cost: 2, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    // A cost above the limit is counted even in a penalty box (it can never fit, whatever the block), and
    // the block stays: it ends when it was set to, not when the window does.
    name: 'fixed window that counts denied calls: a cost above the limit counted in a penalty box keeps the box',
    policies: [fixedWindow({ limit: 2, windowMs: 1000, countDenied: true, blockMs: 60_000 })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, expect: deny(60_000, { remaining: 0 }) },
      { at: 100, cost: 5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 1000, expect: { allowed: false, reason: 'blocked', retryAfterMs: 59_000 } },
      { at: 60_000, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    // A call another policy denies, or whose cost another policy can never admit, counts in the window
    // all the same; nothing else changes.
    name: 'fixed window that counts denied calls, beside a policy that denies first',
    policies: [
      gcra({ limit: 1, periodMs: 1000, name: 'g' }),
      fixedWindow({ limit: 5, windowMs: 10_000, countDenied: true, name: 'fw' }),
    ],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0, policy: 'g' } },
      { at: 0, expect: deny(1000, { policy: 'g' }) },
      { at: 0, cost: 2.5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 1000, expect: deny(9000, { policy: 'fw', remaining: 0 }) },
      { at: 10_000, expect: { allowed: true, remaining: 0, policy: 'g' } },
    ],
  },
];
