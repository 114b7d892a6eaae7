import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, leasedLimiter, memoryStore } from '../../src/index.js';
import { HASH_KEYS_LONGER_THAN, localKey } from '../../src/keys.js';
import { MAX_KEY_LENGTH } from '../../src/stores/index.js';
import { manualClock } from '../../src/testing/index.js';

// A client that chooses its key can send keys of up to MAX_KEY_LENGTH (64 Ki) characters. An in-process
// map bounded only by its count of keys would then hold `count × 64 Ki` characters: 10,000 blocked-cache
// entries would be 640 MiB. Maps hold a long key by its digest instead (`localKey`), or not at all.

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Heap bytes held after `fill` runs, measured between two full collections. */
function heapHeldBy(fill: () => Promise<void>): Promise<number> {
  gc();
  const before = process.memoryUsage().heapUsed;
  return fill().then(() => {
    gc();
    return process.memoryUsage().heapUsed - before;
  });
}

/** A distinct key of the longest accepted length; built fresh, so only what a map keeps stays alive. */
function longKey(i: number): string {
  return `${i}:`.padEnd(MAX_KEY_LENGTH, 'x');
}

describe('localKey', () => {
  it('is the key itself up to the hashing length, and a short mark-and-digest beyond', () => {
    const short = 'a'.repeat(HASH_KEYS_LONGER_THAN);
    expect(localKey(short)).toBe(short);
    const long = localKey(`${short}b`);
    expect(long.length).toBe(44);
    expect(long.charCodeAt(0)).toBe(1);
    expect(localKey(`${short}c`)).not.toBe(long);
  });

  it('never maps a short key onto a long key’s digest', () => {
    const long = `${'a'.repeat(HASH_KEYS_LONGER_THAN)}!`;
    const forged = localKey(long); // what an attacker would send as a short key to share the long key's entry
    expect(forged.length).toBeLessThanOrEqual(HASH_KEYS_LONGER_THAN);
    expect(localKey(forged)).not.toBe(localKey(long));
    expect(localKey(forged)).toBe(`\u0001${forged}`);
  });
});

describe('long keys in the memory store', () => {
  it('holds 2,000 keys of 64 Ki characters in a few MB, each deciding alone', async () => {
    const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const store = memoryStore();
    const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 2, windowMs: 60_000 })] });
    const held = await heapHeldBy(async () => {
      for (let i = 0; i < 2_000; i++) expect((await limiter.limit(longKey(i))).allowed).toBe(true);
    });
    expect(store.size).toBe(2_000);
    // Raw keys would hold 2,000 × 64 Ki = 131 MB.
    expect(held).toBeLessThan(8_000_000);
    expect((await limiter.limit(longKey(5))).allowed).toBe(true);
    expect((await limiter.limit(longKey(5))).allowed).toBe(false);
    expect((await limiter.status(longKey(6))).remaining).toBe(1);
    await limiter.reset(longKey(5));
    expect((await limiter.status(longKey(5))).remaining).toBe(2);
    // A short key equal to a long key's map key is a key of its own.
    expect((await limiter.status(localKey(longKey(6)))).remaining).toBe(2);
  });
});

describe('the memory store’s hot path (limitSync(key) under one meter)', () => {
  it('takes no key that the store holds another key under: a forged short key is a key of its own', () => {
    const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const limiter = createLimiter({ store: memoryStore(), clock, policies: [gcra({ limit: 2, periodMs: 60_000 })] });
    const long = longKey(1);
    const marked = '\u0001victim';
    for (const victim of [long, marked]) {
      expect(limiter.limitSync(victim).allowed).toBe(true);
      expect(limiter.limitSync(victim).allowed).toBe(true);
      expect(limiter.limitSync(victim).allowed).toBe(false);
      // The exact string the store holds the victim under, sent as a key, meets a fresh quota of its own,
      // and spends none of the victim's (nor gives any back).
      const forged = localKey(victim);
      expect(forged.length).toBeLessThanOrEqual(HASH_KEYS_LONGER_THAN);
      expect(limiter.statusSync(forged).remaining).toBe(2);
      expect(limiter.checkSync(forged)).toMatchObject({ allowed: true, remaining: 1 });
      expect(limiter.limitSync(forged)).toMatchObject({ allowed: true, remaining: 1 });
      expect(limiter.limitSync(forged)).toMatchObject({ allowed: true, remaining: 0 });
      expect(limiter.limitSync(victim).allowed).toBe(false);
      expect(limiter.statusSync(victim).remaining).toBe(0);
      limiter.resetSync(forged);
      expect(limiter.limitSync(victim).allowed).toBe(false);
    }
  });

  it('refuses what the general path refuses, with the same typed error', () => {
    const limiter = createLimiter({ store: memoryStore(), policies: [gcra({ limit: 2, periodMs: 60_000 })] });
    for (const key of ['', 'k'.repeat(MAX_KEY_LENGTH + 1), 42, undefined, null, {}, ['a']]) {
      for (const call of [() => limiter.limitSync(key as string), () => limiter.checkSync(key as string)]) {
        expect(call).toThrow(expect.objectContaining({ code: 'ERR_INVALID_KEY' }));
      }
    }
    expect(limiter.limitSync('k'.repeat(MAX_KEY_LENGTH)).allowed).toBe(true);
  });
});

describe('long keys in the limiter’s own maps', () => {
  it('the blocked-key cache holds 2,000 denied 64 Ki keys in a few MB, and answers each alone', async () => {
    const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const limiter = createLimiter({
      store: memoryStore(),
      clock,
      policies: [fixedWindow({ limit: 1, windowMs: 60_000 })],
      blockedCache: { maxKeys: 2_000 },
    });
    // The store's own keys are not what this measures: fill it first, then count what the cache adds.
    for (let i = 0; i < 2_000; i++) await limiter.limit(longKey(i));
    const held = await heapHeldBy(async () => {
      for (let i = 0; i < 2_000; i++) expect((await limiter.limit(longKey(i))).allowed).toBe(false);
    });
    expect(limiter.blockedCache?.size).toBe(2_000);
    // Raw keys would hold 2,000 × 64 Ki = 131 MB; digests and decisions hold a few hundred bytes each.
    expect(held).toBeLessThan(8_000_000);
    // A second denial of each comes from the cache, and a long key never shares another's entry.
    const hits = limiter.blockedCache?.hits ?? 0;
    expect((await limiter.limit(longKey(7))).allowed).toBe(false);
    expect(limiter.blockedCache?.hits).toBe(hits + 1);
    expect((await limiter.limit(longKey(2_001))).allowed).toBe(true);
  });

  it('a leased limiter decides long keys on the store without holding a lease for them', async () => {
    const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
    const limiter = createLimiter({
      store: memoryStore(),
      clock,
      policies: [fixedWindow({ limit: 3, windowMs: 60_000 })],
    });
    const lease = leasedLimiter(limiter, { size: 2, clock });
    const key = longKey(1);
    const admitted = [];
    for (let i = 0; i < 5; i++) admitted.push((await lease.limit(key)).allowed);
    expect(admitted).toEqual([true, true, true, false, false]);
    expect(lease.keys).toBe(0);
    expect(lease.stats.leases).toBe(0);
    await lease.close();
  });
});
