import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  memoryStore,
  type Store,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

describe('reservations', () => {
  it('are refused, naming the policy, for algorithms that count calls where they are admitted', async () => {
    const clock = manualClock();
    for (const policy of [
      fixedWindow({ limit: 5, windowMs: 1000 }),
      slidingWindow({ limit: 5, windowMs: 1000 }),
      slidingLog({ limit: 5, windowMs: 1000 }),
      tokenBucket({ capacity: 5, refillAmount: 5, refillIntervalMs: 1000, refill: 'interval' }),
    ]) {
      const limiter = createLimiter({ clock, policies: [gcra({ limit: 5, periodMs: 1000 }), policy] });
      const error = await limiter.limit('k', { maxDelayMs: 100 }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'maxDelayMs' });
      expect(String((error as Error).message)).toContain(JSON.stringify(policy.name));
      expect(() => limiter.limitSync('k', { maxDelayMs: 100 })).toThrow(
        expect.objectContaining({ option: 'maxDelayMs' }),
      );
      // Without a delay they work as ever.
      expect((await limiter.limit('k', { maxDelayMs: 0 })).allowed).toBe(true);
    }
  });

  it('carry what cancel needs: the cost, the policies and the TATs they set', async () => {
    const clock = manualClock({ startMs: 1000 });
    const limiter = createLimiter({
      clock,
      policies: [
        gcra({ limit: 10, periodMs: 1000, burst: 1, name: 'g' }),
        leakyBucket({ capacity: 5, leakPerSecond: 5, name: 'l' }),
      ],
    });
    expect((await limiter.limit('k', { cost: 1, maxDelayMs: 500 })).reservation).toBeUndefined();
    const booked = await limiter.limit('k', { cost: 1, maxDelayMs: 500 });
    expect(booked.delayMs).toBe(100);
    expect(booked.reservation).toEqual({ cost: 1, policies: ['g', 'l'], tatUs: [1_200_000, 1_400_000] });
    // A check books nothing, so it carries nothing to cancel.
    expect((await limiter.check('k', { maxDelayMs: 500 })).reservation).toBeUndefined();
  });

  it('cancel keeps a penalty block in force', async () => {
    const clock = manualClock();
    const limiter = createLimiter({ clock, policies: gcra({ limit: 10, periodMs: 1000, burst: 1, blockMs: 5000 }) });
    await limiter.limit('k');
    const booked = await limiter.limit('k', { maxDelayMs: 200 });
    expect(booked.delayMs).toBe(100);
    expect((await limiter.limit('k', { maxDelayMs: 50 })).allowed).toBe(false);
    expect(await limiter.cancel('k', booked)).toBe(true);
    const status = await limiter.status('k');
    expect([status.allowed, status.reason, status.resetAfterMs]).toEqual([false, 'blocked', 5000]);
    clock.advance(5000);
    expect((await limiter.status('k')).remaining).toBe(1);
  });

  it('cancel accepts the reservation alone, and checks what it is given', async () => {
    const clock = manualClock();
    const policies = gcra({ limit: 10, periodMs: 1000, burst: 1, name: 'g' });
    const limiter = createLimiter({ clock, policies });
    await limiter.limit('k');
    const booked = await limiter.limit('k', { maxDelayMs: 200 });
    await expect(limiter.cancel('k', booked, { policies: gcra({ limit: 1, periodMs: 1000 }) })).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
      option: 'policies',
    });
    await expect(limiter.cancel('k', { cost: 1, policies: ['g'], tatUs: [Number.NaN] })).rejects.toMatchObject({
      option: 'reservation',
    });
    await expect(limiter.cancel('k', null as never)).rejects.toMatchObject({ option: 'reservation' });
    await expect(limiter.cancel('', booked)).rejects.toMatchObject({ code: 'ERR_INVALID_KEY' });
    expect(await limiter.cancel('k', booked.reservation as NonNullable<typeof booked.reservation>)).toBe(true);
  });

  it('cancel on a store that cannot cancel says so', async () => {
    const inner = memoryStore();
    const store: Store = {
      name: 'plain',
      hasOwnClock: false,
      decide: (request) => inner.decide(request),
      reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
    };
    const limiter = createLimiter({ store, clock: manualClock(), policies: gcra({ limit: 1, periodMs: 1000 }) });
    await limiter.limit('k');
    const booked = await limiter.limit('k', { maxDelayMs: 5000 });
    await expect(limiter.cancel('k', booked)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'store' });
  });
});
