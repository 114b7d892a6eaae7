import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, slidingWindow, tokenBucket } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

// status(key) answers whether a call of cost 1 would pass now, with what remains now.
describe('status', () => {
  const cases = [
    fixedWindow({ limit: 3, windowMs: 60_000 }),
    gcra({ limit: 3, periodMs: 60_000 }),
    slidingWindow({ limit: 3, windowMs: 60_000 }),
    tokenBucket({ capacity: 3, refillAmount: 1, refillIntervalMs: 20_000 }),
  ];

  it.each(cases.map((p) => [p.name, p] as const))(
    '%s: allowed until the limit, then denied with when',
    async (_n, policy) => {
      const clock = manualClock({ startMs: 1_000_000 });
      const limiter = createLimiter({ policies: policy, clock });
      expect(await limiter.status('k')).toMatchObject({ allowed: true, remaining: 3, retryAfterMs: 0 });
      for (let i = 0; i < 3; i++) {
        const status = await limiter.status('k');
        const check = await limiter.check('k');
        // What status says of a cost-1 call is what a check of one says, and limit() then does.
        expect([status.allowed, status.remaining]).toEqual([true, 3 - i]);
        expect(check.allowed).toBe(true);
        expect((await limiter.limit('k')).allowed).toBe(true);
      }
      const full = await limiter.status('k');
      const check = await limiter.check('k');
      expect(full).toMatchObject({ allowed: false, remaining: 0, reason: 'limit', policy: policy.name });
      expect(full.retryAfterMs).toBe(check.retryAfterMs);
      expect(full.retryAfterMs).toBeGreaterThan(0);
      expect(full.policies[0]).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: check.retryAfterMs });
      expect((await limiter.limit('k')).allowed).toBe(false);
      // statusSync says the same; status changed nothing.
      expect(limiter.statusSync('k')).toEqual(full);
      clock.advance(check.retryAfterMs);
      expect((await limiter.status('k')).allowed).toBe(true);
    },
  );

  it('under several policies: the one at its limit denies, the others report what remains', async () => {
    const clock = manualClock({ startMs: 1_000_000 });
    const limiter = createLimiter({
      policies: [fixedWindow({ limit: 2, windowMs: 60_000 }), gcra({ limit: 10, periodMs: 60_000 })],
      clock,
    });
    await limiter.limit('k');
    await limiter.limit('k');
    const status = await limiter.status('k');
    expect(status).toMatchObject({ allowed: false, policy: 'fixed-window-2-per-1m', remaining: 0 });
    expect(status.policies.map((p) => [p.allowed, p.remaining])).toEqual([
      [false, 0],
      [true, 8],
    ]);
  });
});
