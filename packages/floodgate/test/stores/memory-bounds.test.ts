import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, memoryStore, slidingLog } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

describe('memory store bounds', () => {
  it('stays within maxKeys under a flood of distinct keys, sweeping expired keys first', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 1000 });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 10, periodMs: 1000 })] });
    for (let i = 0; i < 20_000; i++) {
      limiter.limitSync(`flood-${i}`);
      if (i % 100 === 99) clock.advance(150); // each key is untouched again 100 ms after its call
      expect(store.size).toBeLessThanOrEqual(1000);
    }
    expect(store.forcedEvictions).toBe(0);
    expect(store.expiredRemoved).toBeGreaterThan(18_000);
    expect(store.sweeps).toBeGreaterThan(0);
  });

  it('when everything is live, evicts the keys closest to expiry and counts them', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 100 });
    const short = createLimiter({
      store,
      clock,
      prefix: 'short',
      policies: [fixedWindow({ limit: 5, windowMs: 1000, align: 'first-request' })],
    });
    const long = createLimiter({
      store,
      clock,
      prefix: 'long',
      policies: [fixedWindow({ limit: 1, windowMs: 3_600_000, align: 'first-request' })],
    });
    for (let i = 0; i < 50; i++) long.limitSync(`attacker-${i}`);
    for (let i = 0; i < 50; i++) short.limitSync(`client-${i}`);
    expect(store.size).toBe(100);
    short.limitSync('newcomer');
    expect(store.size).toBe(91);
    expect(store.forcedEvictions).toBe(10);
    // The long-lived denials survive: every attacker is still denied.
    for (let i = 0; i < 50; i++) expect(long.limitSync(`attacker-${i}`).allowed).toBe(false);
  });

  it('bounds sliding logs too, and counts them in the same cap', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 50 });
    const limiter = createLimiter({
      store,
      clock,
      policies: [slidingLog({ limit: 3, windowMs: 1000 }), gcra({ limit: 3, periodMs: 1000 })],
    });
    for (let i = 0; i < 500; i++) {
      limiter.limitSync(`k${i}`);
      expect(store.size).toBeLessThanOrEqual(50);
    }
    expect(store.forcedEvictions).toBeGreaterThan(0);
  });

  it('clear() and close() forget everything', async () => {
    const store = memoryStore();
    const limiter = createLimiter({ store, clock: manualClock(), policies: [gcra({ limit: 1, periodMs: 1000 })] });
    limiter.limitSync('a');
    expect(limiter.limitSync('a').allowed).toBe(false);
    store.clear();
    expect(store.size).toBe(0);
    expect(limiter.limitSync('a').allowed).toBe(true);
    await store.close();
    expect(store.size).toBe(0);
  });

  it('refuses a bad cap', () => {
    expect(() => memoryStore({ maxKeys: 0 })).toThrow(/maxKeys must be a positive integer, got 0/);
    expect(() => memoryStore({ maxKeys: 1.5 })).toThrow(/maxKeys/);
  });
});
