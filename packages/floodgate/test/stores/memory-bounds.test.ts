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

  it('when everything is live, lets a key go for each new one stored, counts it, and keeps what it owes', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 1000 });
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
    // Ten attackers at their limit; the clients have used a fifth of theirs.
    for (let i = 0; i < 10; i++) long.limitSync(`attacker-${i}`);
    for (let i = 0; i < 990; i++) short.limitSync(`client-${i}`);
    expect(store.size).toBe(1000);
    expect(short.limitSync('newcomer').allowed).toBe(true);
    expect(store.size).toBe(1000);
    expect(store.forcedEvictions).toBe(1);
    let admitted = 1;
    for (let i = 0; i < 999; i++) if (short.limitSync(`newcomer-${i}`).allowed) admitted++;
    expect(store.size).toBe(1000);
    // Each newcomer stored let one key go. A newcomer whose summary cell holds a client's live
    // first-request window (a penalty until that window ends) is denied, and stores nothing.
    expect(store.forcedEvictions).toBe(admitted);
    expect(admitted).toBeGreaterThan(900);
    expect(store.expiredRemoved).toBe(0);
    // The attackers, held or let go, are still at their limit for the hour.
    for (let i = 0; i < 10; i++) expect(long.checkSync(`attacker-${i}`).allowed).toBe(false);
    clock.advance(3_600_000);
    for (let i = 0; i < 10; i++) expect(long.checkSync(`attacker-${i}`).allowed).toBe(true);
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
