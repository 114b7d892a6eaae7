import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { casStore, type VersionedKv } from '../../examples/cas-store.js';
import { createLimiter, gcra, slidingLog } from '../../src/index.js';
import { manualClock, runConformanceSuite, SCENARIO_START_MS, seededRandom } from '../../src/testing/index.js';

/**
 * The compare-and-swap template of docs/architecture.md ("How to write a store"), run as a store: the
 * conformance suite on a key-value map whose writes another writer keeps beating, and an exact count
 * under concurrent calls on one key.
 */

/** A versioned map in memory; `contention` is the chance that another writer got in before a write. */
function versionedKv(contention: number, seed: number): VersionedKv & { conflicts: number } {
  const random = seededRandom(seed);
  const data = new Map<string, { value: string; version: number; expiresAtMs: number }>();
  let versions = 0;
  const kv = {
    conflicts: 0,
    async get(key: string) {
      await Promise.resolve();
      const entry = data.get(key);
      return entry === undefined ? { value: undefined, version: 0 } : { value: entry.value, version: entry.version };
    },
    async compareAndSet(key: string, version: number, value: string | undefined, expiresAtMs: number) {
      await Promise.resolve();
      const current = data.get(key);
      if (current !== undefined && random() < contention) {
        // Another writer wrote the same record again: a new version, so this write must decide again.
        current.version = ++versions;
        kv.conflicts++;
      }
      if ((current?.version ?? 0) !== version) return false;
      if (value === undefined) data.delete(key);
      else data.set(key, { value, version: ++versions, expiresAtMs });
      return true;
    },
  };
  return kv;
}

describe('the compare-and-swap store template', () => {
  it('is the code docs/architecture.md shows', () => {
    const docs = readFileSync(new URL('../../../../docs/architecture.md', import.meta.url), 'utf8');
    const code = readFileSync(new URL('../../examples/cas-store.ts', import.meta.url), 'utf8');
    expect(docs).toContain(`\`\`\`ts\n${code}\`\`\``);
  });

  it('admits exactly the limit when many calls on one key race, retrying each lost write', async () => {
    const kv = versionedKv(0.3, 7);
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store: casStore(kv), clock, policies: [gcra({ limit: 50, periodMs: 60_000 })] });
    const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.limit('hot')));
    expect(decisions.filter((d) => d.allowed).length).toBe(50);
    expect(kv.conflicts).toBeGreaterThan(0);
  });

  it('keeps several policies of one key in one record: a call is written whole or not at all', async () => {
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({
      store: casStore(versionedKv(0.5, 11)),
      clock,
      policies: [gcra({ limit: 3, periodMs: 1000, name: 'g' }), slidingLog({ limit: 2, windowMs: 1000, name: 'log' })],
    });
    const decisions = await Promise.all(Array.from({ length: 10 }, () => limiter.limit('k')));
    expect(decisions.filter((d) => d.allowed).length).toBe(2);
    expect((await limiter.status('k')).policies.map((p) => p.remaining)).toEqual([1, 0]);
  });

  runConformanceSuite({ describe, it }, { store: () => casStore(versionedKv(0.2, 3)), randomRuns: 6 });
});
