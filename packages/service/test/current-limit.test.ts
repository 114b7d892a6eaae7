import { fixedWindow, gcra, leakyBucket, type Policy, slidingLog, slidingWindow, tokenBucket } from 'floodgate';
import { describe, expect, it } from 'vitest';
import { currentLimit, sustainedRate } from '../src/grpc/rate-limit.js';

const SECOND = 1;
const MINUTE = 2;
const HOUR = 3;
const DAY = 4;
const MONTH = 5;
const YEAR = 6;
const WEEK = 7;

const cases: [string, Policy, number, number][] = [
  // The sustained rate, never the burst or the quota per window.
  ['fixed window 5 per 30 s', fixedWindow({ limit: 5, windowMs: 30_000 }), 10, MINUTE],
  ['gcra 100 per minute, burst 10', gcra({ limit: 100, periodMs: 60_000, burst: 10 }), 100, MINUTE],
  ['gcra 10 per second', gcra({ limit: 10, periodMs: 1000 }), 10, SECOND],
  ['gcra 1 per 2 s', gcra({ limit: 1, periodMs: 2000 }), 30, MINUTE],
  [
    'token bucket 1 per hour, capacity 2',
    tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 3_600_000 }),
    1,
    HOUR,
  ],
  ['token bucket 3 per 500 ms', tokenBucket({ capacity: 50, refillAmount: 3, refillIntervalMs: 500 }), 6, SECOND],
  ['leaky bucket 0.5 per second', leakyBucket({ capacity: 20, leakPerSecond: 0.5 }), 30, MINUTE],
  ['leaky bucket 4 per second', leakyBucket({ capacity: 20, leakPerSecond: 4 }), 4, SECOND],
  ['sliding window 3 per hour', slidingWindow({ limit: 3, windowMs: 3_600_000 }), 3, HOUR],
  ['sliding window 36 per hour', slidingWindow({ limit: 36, windowMs: 3_600_000 }), 36, HOUR],
  ['sliding window 120 per hour', slidingWindow({ limit: 120, windowMs: 3_600_000 }), 2, MINUTE],
  ['sliding log 2 per hour', slidingLog({ limit: 2, windowMs: 3_600_000 }), 2, HOUR],
  ['sliding log 10 per second, 1 s apart', slidingLog({ limit: 10, windowMs: 1000, minGapMs: 1000 }), 1, SECOND],
  ['fixed window 7 per day', fixedWindow({ limit: 7, windowMs: 86_400_000 }), 7, DAY],
  ['fixed window 1 per 30 days', fixedWindow({ limit: 1, windowMs: 2_592_000_000 }), 1, MONTH],
  ['fixed window 1 per 10 days', fixedWindow({ limit: 1, windowMs: 864_000_000 }), 3, MONTH],
  // WEEK (7 in rls.proto, after YEAR) is a week long: a weekly limit is reported per WEEK.
  ['fixed window 1 per 7 days', fixedWindow({ limit: 1, windowMs: 604_800_000 }), 1, WEEK],
  ['fixed window 14 per 7 days', fixedWindow({ limit: 14, windowMs: 604_800_000 }), 2, DAY],
  ['gcra 3 per 7 s', gcra({ limit: 3, periodMs: 7000 }), 259_200, WEEK],
  // No whole number anywhere: the smallest unit that rounds down by less than 1%.
  ['gcra 3 per 11 s', gcra({ limit: 3, periodMs: 11_000 }), 981, HOUR],
  ['fixed window 1 per 8 days', fixedWindow({ limit: 1, windowMs: 691_200_000 }), 45, YEAR],
];

describe('current_limit', () => {
  it.each(cases)('%s', (_name, policy, requestsPerUnit, unit) => {
    expect(currentLimit(policy)).toEqual({ requestsPerUnit, unit });
  });

  it('never reports 0, and never more than the policy admits over the unit', () => {
    for (const [, policy] of cases) {
      const { requestsPerUnit, unit } = currentLimit(policy);
      expect(requestsPerUnit).toBeGreaterThanOrEqual(1);
      const unitMs = [0, 1000, 60_000, 3_600_000, 86_400_000, 2_592_000_000, 31_536_000_000, 604_800_000][
        unit
      ] as number;
      expect(requestsPerUnit).toBeLessThanOrEqual(sustainedRate(policy) * unitMs + 1e-9);
    }
  });
});
