import { afterEach, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../src/clock.js';

describe('system clock', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('sleeps longer than a Node timer can hold (2^31 − 1 ms) without waking early', async () => {
    vi.useFakeTimers();
    let woke = false;
    const sleeping = systemClock.sleep(2 ** 31 + 5000).then(() => {
      woke = true;
    });
    await vi.advanceTimersByTimeAsync(2 ** 31 - 1);
    expect(woke).toBe(false);
    await vi.advanceTimersByTimeAsync(5000);
    expect(woke).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await sleeping;
    expect(woke).toBe(true);
  });

  it('a signal that is not an AbortSignal rejects the sleep and leaves no timer behind', async () => {
    vi.useFakeTimers();
    await expect(systemClock.sleep(10, {} as AbortSignal)).rejects.toBeInstanceOf(TypeError);
    expect(vi.getTimerCount()).toBe(0);
    // Had a timer been left, firing it would throw outside any promise (an uncaught exception).
    await vi.advanceTimersByTimeAsync(20);
  });

  it('an infinite sleep never wakes, and an abort still ends it', async () => {
    vi.useFakeTimers();
    const controller = new AbortController();
    let outcome = 'sleeping';
    const sleeping = systemClock.sleep(Number.POSITIVE_INFINITY, controller.signal).then(
      () => {
        outcome = 'woke';
      },
      (error: { code?: string }) => {
        outcome = error.code ?? 'other';
      },
    );
    await vi.advanceTimersByTimeAsync(3 * 2 ** 31);
    expect(outcome).toBe('sleeping');
    controller.abort();
    await sleeping;
    expect(outcome).toBe('ERR_ABORTED');
  });
});
