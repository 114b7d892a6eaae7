// A key over its limit under `syncedLimiter`: every call used to go to the store (a cached denial lasted
// only the store's retryAfterMs, and a process owing units pushed them again at every call), about
// 12,000 Redis calls a second from 4 processes. Now, once the store says a key is over, its calls are
// denied locally for a sync interval: at most one store call per key per process per interval.
import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, memoryStore, type Policy, syncedLimiter } from '../../src/index.js';
import { countingStore, manualClock } from '../../src/testing/index.js';

const START_MS = Date.UTC(2030, 0, 1);
const SYNC_MS = 100;
const PROCESSES = 4;
const INTERVALS = 20;
/** Calls per process per ms: 10,000 a second each. */
const CALLS_PER_MS = 10;

async function hammer(policies: Policy[]) {
  const clock = manualClock({ startMs: START_MS });
  const store = memoryStore();
  const counted = Array.from({ length: PROCESSES }, () => countingStore(store));
  const processes = counted.map((c) =>
    syncedLimiter(createLimiter({ store: c.store, clock, policies, prefix: 'p' }), {
      clock,
      autoSync: false,
      syncMs: SYNC_MS,
      localBudget: 5,
    }),
  );
  // Spend the key first, then hammer it for INTERVALS sync intervals.
  for (let i = 0; i < 200; i++) await (processes[i % PROCESSES] as (typeof processes)[0]).limit('hot');
  for (const p of processes) await p.sync();
  const before = counted.map((c) => c.calls());
  let admitted = 0;
  for (let ms = 0; ms < INTERVALS * SYNC_MS; ms++) {
    for (const p of processes) {
      for (let i = 0; i < CALLS_PER_MS; i++) if ((await p.limit('hot')).allowed) admitted++;
    }
    clock.advanceUs(1000);
    if ((ms + 1) % SYNC_MS === 0) for (const p of processes) await p.sync();
  }
  const calls = counted.map((c, i) => c.calls() - (before[i] as number));
  for (const p of processes) await p.close();
  return { calls, admitted, perSecond: calls.reduce((a, b) => a + b, 0) / ((INTERVALS * SYNC_MS) / 1000) };
}

describe('synced limiter, a key over its limit', () => {
  for (const [label, policies] of [
    ['a fixed window spent for the hour', [fixedWindow({ limit: 100, windowMs: 3_600_000 })]],
    // GCRA's denials pass again within 10 ms: a cached denial alone would ask the store 10 times an interval.
    ['GCRA at 100 a second, hammered at 40,000 a second', [gcra({ limit: 100, periodMs: 1000, burst: 10 })]],
  ] as const) {
    it(`${label}: at most one store call per process per sync interval (sync included)`, async () => {
      const result = await hammer([...policies]);
      console.log(
        `${label}: ${result.calls.join(', ')} store calls per process in ${INTERVALS} intervals of ${SYNC_MS} ms (${result.perSecond} a second from ${PROCESSES} processes at ${CALLS_PER_MS * 1000} calls a second each); ${result.admitted} admitted`,
      );
      // Each interval: the sync (one call) and at most one decision at its end; never one per call.
      for (const calls of result.calls) expect(calls).toBeLessThanOrEqual(2 * INTERVALS + 2);
      expect(result.perSecond).toBeLessThanOrEqual(PROCESSES * 2 * (1000 / SYNC_MS) + 8);
    });
  }
});
