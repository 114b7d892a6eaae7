import type { Expectation, Step } from '../scenarios.js';

/** A denial by the limit after `retryAfterMs`, with more fields to expect. */
export const deny = (retryAfterMs: number, extra: Expectation = {}): Expectation => ({
  allowed: false,
  reason: 'limit',
  retryAfterMs,
  ...extra,
});

/** A clock-aligned window of 3 per second: the fixed window's table, and the bucketed window's with one bucket. */
export function clockWindowSteps(): Step[] {
  return [
    {
      at: 0,
      repeat: 3,
      expectEach: [2, 1, 0].map((remaining) => ({ allowed: true, remaining, resetAfterMs: 1000 })),
    },
    { at: 999, expect: deny(1, { resetAfterMs: 1 }) },
    { at: 1000, repeat: 3, expect: { allowed: true } },
    { at: 1999, op: 'status', expect: { remaining: 0, resetAfterMs: 1 } },
    { at: 2000, op: 'status', expect: { remaining: 3, resetAfterMs: 0 } },
    { at: 2000, cost: 2.5, expect: { allowed: true, remaining: 0 } },
    { at: 2000, cost: 0.5, expect: { allowed: true, remaining: 0 } },
    { at: 2000, cost: 0.5, expect: deny(1000) },
  ];
}
