import { afterEach, describe, expect, it, vi } from 'vitest';
import { nsToUs, systemClock } from '../src/clock.js';
import { seededRandom } from '../src/testing/index.js';

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

describe('the system clock’s reading', () => {
  it('is whole µs since the epoch, never going back', () => {
    let previous = systemClock.nowUs();
    expect(Math.abs(previous - Date.now() * 1000)).toBeLessThan(60_000_000);
    let wrong = 0;
    for (let i = 0; i < 200_000; i++) {
      const now = systemClock.nowUs();
      if (!Number.isInteger(now) || now < previous) wrong++;
      previous = now;
    }
    expect(wrong).toBe(0);
  });

  it('turns ns into whole µs exactly, from the words of the 64-bit count', () => {
    const random = seededRandom(19);
    const counts = [0n, 999n, 1000n, 1001n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 32n + 703n, 2n ** 53n, 2n ** 53n + 999n];
    // Up to 2 · 10^9 · 2^32 ns (272 years of uptime): the µs stay below 2^53, where doubles are exact.
    for (let i = 0; i < 20_000; i++) {
      const high = BigInt(Math.floor(random() * 2_000_000_000));
      const low = BigInt(Math.floor(random() * 2 ** 32));
      counts.push((high << 32n) + low, (high << 32n) + 999n, (high << 32n) | 0xffffffffn);
    }
    for (const ns of counts) expect(nsToUs(ns), String(ns)).toBe(Number(ns / 1000n));
  });
});
