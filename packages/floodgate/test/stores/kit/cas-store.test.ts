import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, isFloodgateError, slidingLog, tokenBucket } from '../../../src/index.js';
import { compilePolicy } from '../../../src/model/compile.js';
import { type CasClient, casStore, recordKey } from '../../../src/stores/index.js';
import { manualClock, runConformanceSuite, SCENARIO_START_MS, seededRandom } from '../../../src/testing/index.js';

/**
 * The compare-and-swap builder over a versioned map in this process (the real-database example, over
 * PostgreSQL, is examples/cas-store.ts and its test, test/stores/cas.test.ts). The map lets the tests
 * play the other writers: with some chance, another process wrote the record just before each write.
 */

interface Entry {
  value: string;
  version: number;
  expiresAtMs: number;
}

function versionedMap(contention: number, seed: number, withDelete = true) {
  const random = seededRandom(seed);
  const data = new Map<string, Entry>();
  let versions = 0;
  const stats = { gets: 0, writes: 0, conflicts: 0 };
  const client: CasClient<number> = {
    async get(key) {
      await Promise.resolve();
      stats.gets++;
      const entry = data.get(key);
      return entry === undefined ? undefined : { value: entry.value, version: entry.version };
    },
    async compareAndSet(key, expected, value, expiresAtMs) {
      await Promise.resolve();
      stats.writes++;
      const current = data.get(key);
      if (current !== undefined && random() < contention) {
        // Another writer rewrote the same record: a new version, so this write must run again.
        current.version = ++versions;
        stats.conflicts++;
      }
      if (current?.version !== expected) return false;
      data.set(key, { value, version: ++versions, expiresAtMs });
      return true;
    },
    ...(withDelete
      ? {
          async compareAndDelete(key: string, expected: number) {
            await Promise.resolve();
            stats.writes++;
            if (data.get(key)?.version !== expected) return false;
            data.delete(key);
            return true;
          },
        }
      : {}),
  };
  return { client, data, stats };
}

describe('casStore over a versioned map another writer keeps beating', () => {
  runConformanceSuite(
    { describe, it },
    { store: () => casStore({ client: versionedMap(0.2, 3).client, name: 'cas-map' }), randomRuns: 8 },
  );
});

describe('casStore over a versioned map without delete', () => {
  runConformanceSuite(
    { describe, it },
    { store: () => casStore({ client: versionedMap(0, 5, false).client }), randomRuns: 4, seed: 500 },
  );
});

describe('casStore', () => {
  it('admits exactly the limit when many calls on one key race, other writers beating some writes', async () => {
    const kv = versionedMap(0.3, 7);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({
      store: casStore({ client: kv.client }),
      clock,
      policies: [gcra({ limit: 50, periodMs: 60_000 })],
    });
    const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.limit('hot')));
    expect(decisions.filter((d) => d.allowed).length).toBe(50);
    expect(kv.stats.conflicts).toBeGreaterThan(0);
  });

  it('calls on one key in one process share a read and a write: no write of theirs is lost to another', async () => {
    const kv = versionedMap(0, 1);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({
      store: casStore({ client: kv.client, maxInFlight: 1 }),
      clock,
      policies: [gcra({ limit: 1000, periodMs: 60_000 })],
    });
    await Promise.all(Array.from({ length: 100 }, () => limiter.limit('hot')));
    // The first call went alone; the 99 that arrived meanwhile went together: two reads, two writes.
    expect(kv.stats).toEqual({ gets: 2, writes: 2, conflicts: 0 });
    expect((await limiter.status('hot')).remaining).toBe(900);
  });

  it('keeps every policy of a user key in one record: a call is written whole or not at all', async () => {
    const kv = versionedMap(0.5, 11);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const policies = [
      gcra({ limit: 3, periodMs: 1000, name: 'g' }),
      slidingLog({ limit: 2, windowMs: 1000, name: 'log' }),
    ];
    const limiter = createLimiter({ store: casStore({ client: kv.client }), clock, prefix: 'p', policies });
    const decisions = await Promise.all(Array.from({ length: 10 }, () => limiter.limit('k')));
    expect(decisions.filter((d) => d.allowed).length).toBe(2);
    expect((await limiter.status('k')).policies.map((p) => p.remaining)).toEqual([1, 0]);
    expect([...kv.data.keys()]).toEqual([recordKey('p', 'k')]);
    const record = JSON.parse(kv.data.get(recordKey('p', 'k'))?.value ?? '') as { s: object };
    expect(Object.keys(record.s).sort()).toEqual(policies.map((p) => `${p.name}:${compilePolicy(p).kind}`).sort());
  });

  it('drops states that are untouched again from the record, and deletes the record once it holds none', async () => {
    const kv = versionedMap(0, 2);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const short = fixedWindow({ limit: 5, windowMs: 1000, name: 'short' });
    const long = tokenBucket({ capacity: 5, refillAmount: 1, refillIntervalMs: 60_000, name: 'long' });
    const limiter = createLimiter({
      store: casStore({ client: kv.client }),
      clock,
      prefix: 'p',
      policies: [short, long],
    });
    await limiter.limit('k');
    const ids = () => Object.keys((JSON.parse(kv.data.get(recordKey('p', 'k'))?.value ?? '') as { s: object }).s);
    expect(ids()).toHaveLength(2);
    clock.advance(2000);
    const decision = await limiter.limit('k', { policies: [long] });
    expect(ids()).toEqual([`long:${compilePolicy(long).kind}`]);
    // The record expires when its last state is untouched again, plus the default grace of a minute.
    const entry = kv.data.get(recordKey('p', 'k'));
    expect(decision.resetAfterMs).toBeGreaterThan(60_000);
    expect(entry?.expiresAtMs).toBe(SCENARIO_START_MS + 2000 + decision.resetAfterMs + 60_000);
    await limiter.reset('k');
    expect(kv.data.size).toBe(0);
  });

  it('gives up after maxAttempts lost writes with ERR_STORE_REJECTED, which never trips the breaker', async () => {
    const kv = versionedMap(1, 4);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const store = casStore({ client: kv.client, maxAttempts: 3 });
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 5, periodMs: 1000 })] });
    await limiter.limit('k'); // creates the record: nobody to compete with yet
    kv.stats.writes = 0;
    await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_STORE_REJECTED' });
    expect(kv.stats.writes).toBe(3);
  });

  it('refuses the calls on a key holding a value that is not its record, and only those', async () => {
    const kv = versionedMap(0, 6);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({
      store: casStore({ client: kv.client }),
      clock,
      prefix: 'p',
      policies: [gcra({ limit: 5, periodMs: 1000 })],
    });
    for (const value of [
      'not json',
      '[]',
      '{"at":1,"s":{"x":[1]}}',
      '{"at":"1","s":{}}',
      '{"at":1,"s":{"x":[1,null]}}',
    ]) {
      kv.data.set(recordKey('p', 'foreign'), { value, version: 1, expiresAtMs: 0 });
      await expect(limiter.limit('foreign')).rejects.toMatchObject({ code: 'ERR_STORE_REJECTED' });
    }
    expect((await limiter.limit('other')).allowed).toBe(true);
  });

  it('refuses a request without the caller’s clock or with a broken one, before any read', async () => {
    const kv = versionedMap(0, 8);
    const store = casStore({ client: kv.client });
    const request = {
      prefix: 'p',
      key: 'k',
      policies: [compilePolicy(gcra({ limit: 1, periodMs: 1000 }))],
      cost: 1,
      commit: true,
      maxDelayUs: 0,
    };
    await expect(store.decide({ ...request, nowUs: undefined })).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
      option: 'nowUs',
    });
    for (const nowUs of [Number.NaN, -1, 1.5, 2 ** 53, Number.POSITIVE_INFINITY]) {
      await expect(store.decide({ ...request, nowUs })).rejects.toMatchObject({
        code: 'ERR_INVALID_OPTION',
        option: 'clock.nowUs()',
      });
    }
    expect(kv.stats.gets).toBe(0);
  });

  it('refuses bad options with a typed error naming the option', () => {
    const { client } = versionedMap(0, 9);
    const cases: [unknown, string][] = [
      [{ client: {} }, 'client'],
      [{ client, maxAttempts: 0 }, 'maxAttempts'],
      [{ client, expiryGraceMs: -1 }, 'expiryGraceMs'],
      [{ client, name: '' }, 'name'],
      [{ client, maxInFlight: 0 }, 'maxInFlight'],
    ];
    for (const [options, option] of cases) {
      let caught: unknown;
      try {
        casStore(options as Parameters<typeof casStore>[0]);
      } catch (error) {
        caught = error;
      }
      expect(isFloodgateError(caught) && [caught.code, caught.option]).toEqual(['ERR_INVALID_OPTION', option]);
    }
  });
});
