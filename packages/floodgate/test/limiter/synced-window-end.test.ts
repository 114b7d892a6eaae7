// `syncedLimiter` charges units at the time they are pushed, not when they were admitted: units a process
// admitted locally in the last sync interval of a window and pushed after it ended are charged to the next
// window, which then admits that much less. docs/failure-modes.md ("Under-admission at window ends")
// states it with this figure: 90 of a window of 100, with no over-admission anywhere.
import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, memoryStore, syncedLimiter } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

/** A window boundary (clock-aligned windows of 1 s). */
const START_MS = Date.UTC(2030, 0, 1);

describe('synced limiter, units pushed after their window ended', () => {
  it('are charged to the next window: 90 of 100 admitted there, never more than 100 in a window', async () => {
    const clock = manualClock({ startMs: START_MS });
    const store = memoryStore();
    const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 100, windowMs: 1000 })] });
    const synced = syncedLimiter(limiter, { clock, autoSync: false, syncMs: 100, localBudget: 10 });
    const admitted = async (calls: number) => {
      let n = 0;
      for (let i = 0; i < calls; i++) if ((await synced.limit('k')).allowed) n++;
      return n;
    };
    // Window 1: the first call asks the store, then 10 more are admitted locally in its last interval.
    const first = await admitted(1);
    clock.advance(950);
    const late = await admitted(10);
    expect(synced.stats.localDecisions).toBeGreaterThanOrEqual(10);
    // Window 2 starts before the sync that pushes them: the store charges them to window 2.
    clock.advance(100);
    await synced.sync();
    let second = 0;
    for (let step = 0; step < 8; step++) {
      second += await admitted(20);
      clock.advance(100);
      await synced.sync();
    }
    // Window 1 admitted 11 of 100 and window 2 at most 100 (no over-admission): 90 of 100 in window 2,
    // the 10 late units of window 1 taking the rest.
    expect(first + late).toBe(11);
    expect(second).toBe(90);
    expect((await limiter.status('k')).remaining).toBe(0);
    await synced.close();
  });
});
