import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  type FloodgateError,
  fixedWindow,
  gcra,
  isFloodgateError,
  memoryStore,
  slidingLog,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

const HOUR = 3_600_000;

/** The error a call throws, or undefined. */
function thrown(call: () => unknown): FloodgateError | undefined {
  try {
    call();
  } catch (error) {
    if (isFloodgateError(error)) return error;
    throw error;
  }
  return undefined;
}

describe('memory store: a key forced out keeps what it owes', () => {
  it('keys near their limit come back near their limit, whether they were let go or kept', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 1000 });
    const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 5, windowMs: HOUR })] });
    // Twenty keys have used 4 of 5; the other 980 one.
    for (let i = 0; i < 20; i++) for (let j = 0; j < 4; j++) limiter.limitSync(`near-${i}`);
    for (let i = 0; i < 980; i++) limiter.limitSync(`light-${i}`);
    for (let i = 0; i < 800; i++) limiter.limitSync(`new-${i}`);
    expect(store.size).toBe(1000);
    expect(store.forcedEvictions).toBeGreaterThan(700);
    // A near key let go lands in a summary cell, which it keeps at 4 or more: it gets 1 more at most.
    for (let i = 0; i < 20; i++) expect(limiter.statusSync(`near-${i}`).remaining).toBeLessThanOrEqual(1);
    let more = 0;
    for (let i = 0; i < 20; i++) for (let j = 0; j < 5; j++) if (limiter.limitSync(`near-${i}`).allowed) more++;
    expect(more).toBeLessThanOrEqual(20);
  });

  it('among keys as consumed, the nearest expiry goes first; a key at its limit stays there either way', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 1000 });
    const minute = createLimiter({
      store,
      clock,
      prefix: 'm',
      policies: [fixedWindow({ limit: 1, windowMs: 60_000 })],
    });
    const hour = createLimiter({ store, clock, prefix: 'h', policies: [fixedWindow({ limit: 1, windowMs: HOUR })] });
    // Every key is at its limit; ten of them stay so for an hour.
    for (let i = 0; i < 10; i++) hour.limitSync(`long-${i}`);
    for (let i = 0; i < 990; i++) minute.limitSync(`short-${i}`);
    let admitted = 0;
    for (let i = 0; i < 500; i++) if (minute.limitSync(`new-${i}`).allowed) admitted++;
    // A new key that shares a summary cell with a short key let go at its limit is denied, and stores nothing.
    expect(store.forcedEvictions).toBe(admitted);
    for (let i = 0; i < 10; i++) expect(hour.checkSync(`long-${i}`).allowed).toBe(false);
  });

  it('drops keys back to their untouched state without counting them as forced evictions', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 100 });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 10, periodMs: 1000 })] });
    for (let i = 0; i < 100; i++) limiter.limitSync(`old-${i}`);
    // Each old key is untouched again 100 ms after its call.
    clock.advance(100);
    for (let i = 0; i < 100; i++) limiter.limitSync(`new-${i}`);
    expect(store.size).toBe(100);
    expect(store.forcedEvictions).toBe(0);
    expect(store.expiredRemoved).toBe(100);
    for (let i = 0; i < 100; i++) expect(limiter.statusSync(`new-${i}`).remaining).toBe(9);
  });

  it('keeps the list of keys consistent through resets, expiries and evictions', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 50 });
    const a = createLimiter({ store, clock, prefix: 'a', policies: [gcra({ limit: 3, periodMs: 1000 })] });
    const b = createLimiter({
      store,
      clock,
      prefix: 'b',
      policies: [slidingLog({ limit: 2, windowMs: 5000 }), fixedWindow({ limit: 4, windowMs: 2000 })],
    });
    let seed = 7;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let step = 0; step < 20_000; step++) {
      const key = `k${Math.floor(next() * 120)}`;
      const r = next();
      if (r < 0.4) a.limitSync(key);
      else if (r < 0.8) b.limitSync(key);
      else if (r < 0.9) (next() < 0.5 ? a : b).resetSync(key);
      else clock.advance(Math.floor(next() * 500));
      expect(store.size).toBeLessThanOrEqual(50);
    }
    expect(store.forcedEvictions + store.expiredRemoved).toBeGreaterThan(0);
    // Every held key is still reachable: resetting every key empties the store.
    for (let i = 0; i < 120; i++) {
      a.resetSync(`k${i}`);
      b.resetSync(`k${i}`);
    }
    expect(store.size).toBe(0);
  });
});

describe("memory store: whenFull 'refuse'", () => {
  it('refuses a new key once full of live keys, with ERR_STORE_FULL, and counts it', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 10, whenFull: 'refuse' });
    expect(store).toMatchObject({ maxKeys: 10, whenFull: 'refuse' });
    const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 3, windowMs: 1000 })] });
    for (let i = 0; i < 10; i++) limiter.limitSync(`k${i}`);
    const error = thrown(() => limiter.limitSync('newcomer'));
    expect(error?.code).toBe('ERR_STORE_FULL');
    expect(error?.message).toMatch(/maxKeys is 10 and whenFull is 'refuse'/);
    expect(store).toMatchObject({ size: 10, refusedKeys: 1, forcedEvictions: 0 });
    // Held keys are decided exactly; a check on a new key needs no room.
    expect(limiter.limitSync('k0').remaining).toBe(1);
    expect(limiter.checkSync('newcomer')).toMatchObject({ allowed: true, remaining: 2 });
    expect(store.refusedKeys).toBe(1);
    // Once the window is over, the expired keys make room.
    clock.advance(1000);
    expect(limiter.limitSync('newcomer')).toMatchObject({ allowed: true, remaining: 2 });
    expect(store).toMatchObject({ refusedKeys: 1, forcedEvictions: 0 });
    expect(store.expiredRemoved).toBe(10);
    expect(store.size).toBe(1);
  });

  it("answers refused calls per the limiter's failure policy, as degraded, with a storeError event", () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 5, whenFull: 'refuse' });
    const policies = [fixedWindow({ limit: 3, windowMs: 1000 })];
    const open = createLimiter({ store, clock, failure: 'open', policies });
    const closed = createLimiter({ store, clock, failure: 'closed', policies });
    const errors: string[] = [];
    open.on('storeError', ({ error }) => errors.push(error.code));
    for (let i = 0; i < 5; i++) open.limitSync(`k${i}`);
    expect(open.limitSync('fresh-1')).toMatchObject({ allowed: true, reason: 'degraded' });
    expect(closed.limitSync('fresh-2')).toMatchObject({ allowed: false, reason: 'degraded' });
    expect(errors).toEqual(['ERR_STORE_FULL']);
    expect(store.refusedKeys).toBe(2);
    expect(open.limitSync('k1')).toMatchObject({ allowed: true, remaining: 1 });
    expect(open.limitSync('k1').allowed).toBe(true);
    expect(open.limitSync('k1')).toMatchObject({ allowed: false, reason: 'limit' });
  });

  it('stores a call of several policies whole or not at all', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 3, whenFull: 'refuse' });
    const two = createLimiter({
      store,
      clock,
      policies: [fixedWindow({ limit: 2, windowMs: 1000 }), gcra({ limit: 2, periodMs: 1000 })],
    });
    two.limitSync('a');
    expect(store.size).toBe(2);
    // One entry is free, the call needs two: neither policy stores anything.
    expect(thrown(() => two.limitSync('b'))?.code).toBe('ERR_STORE_FULL');
    expect(store.size).toBe(2);
    expect(two.statusSync('b').policies.map((p) => p.remaining)).toEqual([2, 2]);
    // A held key needs no room.
    expect(two.limitSync('a').policies.map((p) => p.remaining)).toEqual([0, 0]);
    expect(store.refusedKeys).toBe(1);
  });

  it('stays within maxKeys under a flood, refusing instead of forgetting', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 1000, whenFull: 'refuse' });
    const limiter = createLimiter({ store, clock, failure: 'open', policies: [gcra({ limit: 5, periodMs: HOUR })] });
    for (let i = 0; i < 50_000; i++) {
      limiter.limitSync(`flood-${i}`);
      if ((i & 255) === 0) clock.advance(1);
    }
    expect(store).toMatchObject({ size: 1000, refusedKeys: 49_000, forcedEvictions: 0, expiredRemoved: 0 });
    expect(limiter.statusSync('flood-0').remaining).toBe(4);
  });

  it('refuses a bad whenFull, naming the option and the value', () => {
    expect(() => memoryStore({ whenFull: 'drop' as never })).toThrow(
      /whenFull must be 'evict' or 'refuse', got "drop"/,
    );
    expect(memoryStore().whenFull).toBe('evict');
  });

  it('never drops a key before its expiry, however far from the first expiry it lies (32-bit expiries round up)', () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 2, whenFull: 'refuse' });
    const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 3, windowMs: 1000 })] });
    const windowUs = 1000 * 1000;
    // The first key's expiry (its window's end) is the table's epoch; the second key's window ends
    // 34,359,000,000 µs after it, where a 32-bit float steps by 2048 µs: the nearest float is 960 µs
    // early, the next one up 1088 µs late.
    limiter.limitSync('first');
    const secondEndUs = clock.nowUs() + windowUs + 34_359_000_000;
    clock.advanceUs(secondEndUs - windowUs / 2 - clock.nowUs());
    limiter.limitSync('second');
    clock.advanceUs(secondEndUs - 1 - clock.nowUs());
    // Before the second key's expiry: a new key needs room, the sweep drops the first key only.
    limiter.limitSync('third');
    expect(store.expiredRemoved).toBe(1);
    expect(store.size).toBe(2);
    // Past the second key's expiry by one step of the float, it goes (and the third key, whose window
    // ended with it).
    clock.advanceUs(2049);
    limiter.limitSync('fourth');
    expect(store.expiredRemoved).toBe(3);
  });

  it("keeps no expiry beside a meter's state: a key goes at its TAT or its penalty's end, whichever is later, not before", () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 2, whenFull: 'refuse' });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 5000 })] });
    const startUs = clock.nowUs();
    // 'boxed' is denied on its third call and boxed for 5 s: its TAT is 1 s away, its penalty 5 s.
    for (let i = 0; i < 3; i++) limiter.limitSync('boxed');
    // 'far' lies 2^35 + 1000 µs on, far from the other key's times; its TAT is 500,000 µs after its call.
    clock.advanceUs(2 ** 35 + 1000);
    limiter.limitSync('far');
    const farTatUs = clock.nowUs() + 500_000;
    expect(store.expiredRemoved).toBe(0);
    // Long past the box: the sweep for a new key drops 'boxed', and not 'far' 1 µs before its TAT.
    clock.advanceUs(farTatUs - 1 - clock.nowUs());
    limiter.limitSync('third');
    expect(store.expiredRemoved).toBe(1);
    expect(limiter.checkSync('far').remaining).toBe(0);
    // At its TAT exactly, 'far' holds nothing and goes.
    clock.advanceUs(1);
    limiter.limitSync('fourth');
    expect(store.expiredRemoved).toBe(2);
    expect(clock.nowUs() - startUs).toBeGreaterThan(2 ** 35);
  });

  it("drops a boxed meter key at its penalty's end, not at its TAT", () => {
    const clock = manualClock();
    const store = memoryStore({ maxKeys: 1, whenFull: 'refuse' });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 5000 })] });
    for (let i = 0; i < 3; i++) limiter.limitSync('boxed');
    // Its TAT has passed (1 s) but not its penalty (5 s): a new key is refused, the key stays boxed.
    clock.advanceUs(5_000_000 - 1);
    expect(() => limiter.limitSync('other')).toThrow(/the memory store is full/);
    expect(store.refusedKeys).toBe(1);
    expect(limiter.checkSync('boxed').allowed).toBe(false);
    clock.advanceUs(1);
    expect(limiter.limitSync('other').allowed).toBe(true);
    expect(store.expiredRemoved).toBe(1);
  });
});
