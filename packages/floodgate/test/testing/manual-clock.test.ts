import { describe, expect, it } from 'vitest';
import { isFloodgateError } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

describe('manual clock', () => {
  it('moves only when told, in whole microseconds', () => {
    const clock = manualClock({ startMs: 1000 });
    expect(clock.nowUs()).toBe(1_000_000);
    clock.advance(1.5);
    clock.advanceUs(3);
    expect(clock.nowUs()).toBe(1_001_503);
    expect(clock.nowMs()).toBe(1001.503);
    expect(() => clock.set(0)).toThrow(/forward only/);
  });

  it('wakes sleepers in time order as it passes them, and aborts cleanly', async () => {
    const clock = manualClock({ startMs: 0 });
    const woke: string[] = [];
    const a = clock.sleep(30).then(() => woke.push('a'));
    const b = clock.sleep(10).then(() => woke.push('b'));
    const controller = new AbortController();
    const c = clock
      .sleep(20, controller.signal)
      .catch((error: unknown) => woke.push(isFloodgateError(error) ? error.code : 'other'));
    expect(clock.pending).toBe(3);
    clock.advance(15);
    controller.abort();
    clock.advance(15);
    await Promise.all([a, b, c]);
    expect(woke).toEqual(['b', 'ERR_ABORTED', 'a']);
    expect(clock.pending).toBe(0);
  });

  it('sleeps no time for a delay that is NaN or not above 0, as the system clock does', async () => {
    const clock = manualClock({ startMs: 0 });
    const sleeps = [clock.sleep(Number.NaN), clock.sleep(-5), clock.sleep(Number.NEGATIVE_INFINITY)];
    expect(clock.pending).toBe(0);
    await Promise.all(sleeps);
    expect(clock.nowUs()).toBe(0);
  });
});
