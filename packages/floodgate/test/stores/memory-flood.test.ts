import { describe, expect, it } from 'vitest';
import { createLimiter, gcra, memoryStore, slidingLog } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

const LONG = 3_600_000;

describe('memory store under a flood of distinct keys', () => {
  it('a million live keys against a cap of 100 000: never above the cap, every eviction counted, none over-admitted', {
    timeout: 120_000,
  }, () => {
    const clock = manualClock();
    const cap = 100_000;
    const store = memoryStore({ maxKeys: cap });
    // Nothing expires during the flood: every key stays live, so only forced evictions make room.
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 5, periodMs: LONG })] });
    const keys = 1_000_000;
    let largest = 0;
    let admitted = 0;
    let last = '';
    let lastRemaining = -1;
    for (let i = 0; i < keys; i++) {
      const decision = limiter.limitSync(`flood-${i}`);
      if (decision.allowed) {
        admitted++;
        last = `flood-${i}`;
        lastRemaining = decision.remaining;
      }
      if (store.size > largest) largest = store.size;
      if ((i & 1023) === 0) clock.advance(1);
    }
    expect(largest).toBeLessThanOrEqual(cap);
    // Every admitted key was stored; each one not held any more was evicted, and counted. A key the store
    // does not hold starts from its summary cell, which holds what the keys that left through it owe: once
    // five of them have (a cell is shared by about 14 of the 900,000 keys let go), a key there is denied.
    expect(admitted).toBeGreaterThan(cap);
    expect(admitted).toBeLessThan(keys);
    expect(store.forcedEvictions).toBe(admitted - store.size);
    expect(store.expiredRemoved).toBe(0);
    // A sweep frees a tenth of the cap, so sweeps stay rare (amortized O(1) per new key).
    expect(store.sweeps).toBeLessThanOrEqual(Math.ceil(keys / (cap / 10)) + 1);
    // The newest key admitted is still held, as it was left.
    expect(limiter.statusSync(last).remaining).toBe(lastRemaining);
  });

  it('among keys as consumed, evicts the nearest expiry first: a blocked attacker outlives the flood that tries to free it', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 10_000 });
    const penalty = createLimiter({
      store,
      clock,
      prefix: 'login',
      policies: [gcra({ limit: 1, periodMs: 1000, blockMs: LONG })],
    });
    penalty.limitSync('attacker');
    // Denied on its limit: the penalty box starts.
    expect(penalty.limitSync('attacker')).toMatchObject({ allowed: false, retryAfterMs: LONG });
    // The flood's keys untouch themselves after one second; the attacker's block lasts an hour.
    const flood = createLimiter({ store, clock, prefix: 'flood', policies: [gcra({ limit: 1, periodMs: 1000 })] });
    for (let i = 0; i < 500_000; i++) flood.limitSync(`k${i}`);
    expect(store.size).toBeLessThanOrEqual(10_000);
    expect(store.forcedEvictions).toBeGreaterThan(0);
    expect(penalty.limitSync('attacker')).toMatchObject({ allowed: false, reason: 'blocked' });
  });

  it('sliding logs (one object per key) obey the same cap', { timeout: 120_000 }, () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 20_000 });
    const limiter = createLimiter({ store, clock, policies: [slidingLog({ limit: 3, windowMs: LONG })] });
    let largest = 0;
    let admitted = 0;
    for (let i = 0; i < 300_000; i++) {
      if (limiter.limitSync(`log-${i}`).allowed) admitted++;
      if (store.size > largest) largest = store.size;
    }
    expect(largest).toBeLessThanOrEqual(20_000);
    expect(store.forcedEvictions).toBe(admitted - store.size);
  });
});
