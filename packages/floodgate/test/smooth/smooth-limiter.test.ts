import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { isFloodgateError } from '../../src/errors.js';
import { type SmoothLimiterOptions, smoothLimiter } from '../../src/smooth/index.js';
import { type ManualClock, manualClock, seededRandom } from '../../src/testing/index.js';

/**
 * Guava's FakeStopwatch on top of a manual clock: the limiter's sleeps move time at once and are
 * logged as `R<seconds>`, the test's own pauses as `U<seconds>`, both with two decimals.
 */
function stopwatch(): Clock & { manual: ManualClock; events: string[]; user(ms: number): void; read(): string[] } {
  const manual = manualClock({ startMs: 0 });
  const events: string[] = [];
  return {
    manual,
    events,
    nowUs: () => manual.nowUs(),
    sleep(ms) {
      manual.advance(ms);
      return Promise.resolve();
    },
    user(ms) {
      manual.advance(ms);
      events.push(`U${(ms / 1000).toFixed(2)}`);
    },
    read() {
      return events.splice(0);
    },
  };
}

type Watch = ReturnType<typeof stopwatch>;

async function acquire(watch: Watch, limiter: ReturnType<typeof smoothLimiter>, permits = 1): Promise<number> {
  const seconds = await limiter.acquire(permits);
  watch.events.push(`R${seconds.toFixed(2)}`);
  return seconds;
}

function bursty(watch: Watch, permitsPerSecond: number, extra: Partial<SmoothLimiterOptions> = {}) {
  return smoothLimiter({ permitsPerSecond, clock: watch, ...extra });
}

function warmingUp(watch: Watch, permitsPerSecond: number, warmupMs: number, coldFactor: number) {
  return smoothLimiter({ permitsPerSecond, warmupMs, coldFactor, clock: watch });
}

async function repeat(times: number, fn: () => Promise<unknown>): Promise<void> {
  for (let i = 0; i < times; i++) await fn();
}

const list = (s: string) => s.split(', ');

describe('smooth limiter: Guava RateLimiterTest, event by event', () => {
  it('simple: the first request is free, then one every 200 ms', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    await repeat(3, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R0.00', 'R0.20', 'R0.20']);
  });

  it('immediate tryAcquire: one permit, then none', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 1);
    expect(await limiter.tryAcquire()).toBe(true);
    expect(await limiter.tryAcquire()).toBe(false);
  });

  it('the smallest positive rate grants exactly once, even after a very long pause', async () => {
    const w = stopwatch();
    const limiter = bursty(w, Number.MIN_VALUE);
    expect(await limiter.tryAcquire()).toBe(true);
    expect(await limiter.tryAcquire()).toBe(false);
    w.user(2 ** 31 - 1);
    expect(await limiter.tryAcquire()).toBe(false);
  });

  it('simple rate update, and bad rates are refused', () => {
    const w = stopwatch();
    const limiter = smoothLimiter({ permitsPerSecond: 5, warmupMs: 5000, clock: w });
    expect(limiter.getRate()).toBe(5);
    limiter.setRate(10);
    expect(limiter.getRate()).toBe(10);
    for (const bad of [0, -10, Number.NaN]) {
      expect(() => limiter.setRate(bad)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    }
  });

  it('acquire parameter validation', async () => {
    const limiter = smoothLimiter({ permitsPerSecond: 999, clock: stopwatch() });
    for (const bad of [0, -1]) {
      await expect(limiter.acquire(bad)).rejects.toMatchObject({ code: 'ERR_INVALID_COST', option: 'permits' });
      await expect(limiter.tryAcquire(bad)).rejects.toMatchObject({ code: 'ERR_INVALID_COST' });
      await expect(limiter.tryAcquire(bad, 1000)).rejects.toMatchObject({ code: 'ERR_INVALID_COST' });
    }
  });

  it('simple with wait: a pause pays for the next request', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    await acquire(w, limiter);
    w.user(200);
    await acquire(w, limiter);
    await acquire(w, limiter);
    expect(w.read()).toEqual(['R0.00', 'U0.20', 'R0.00', 'R0.20']);
  });

  it('simple acquire return values', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    expect(await limiter.acquire()).toBeCloseTo(0, 8);
    w.user(200);
    expect(await limiter.acquire()).toBeCloseTo(0, 8);
    expect(await limiter.acquire()).toBeCloseTo(0.2, 8);
  });

  it('earliest available in the past', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    expect(await limiter.acquire()).toBe(0);
    w.user(400);
    expect(await limiter.acquire()).toBe(0);
    expect(await limiter.acquire()).toBe(0);
    expect(await limiter.acquire()).toBeCloseTo(0.2, 8);
  });

  it('one second burst', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    w.user(1000);
    w.user(1000);
    for (const permits of [1, 1, 3, 1, 1]) await acquire(w, limiter, permits);
    expect(w.read()).toEqual(['U1.00', 'U1.00', 'R0.00', 'R0.00', 'R0.00', 'R0.00', 'R0.20']);
  });

  it('warm-up parameter validation', () => {
    const clock = stopwatch();
    expect(() => smoothLimiter({ permitsPerSecond: 1, warmupMs: 0.000001, clock })).not.toThrow();
    expect(() => smoothLimiter({ permitsPerSecond: 1, warmupMs: 0, clock })).not.toThrow();
    expect(() => smoothLimiter({ permitsPerSecond: 0, warmupMs: 1, clock })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'permitsPerSecond' }),
    );
    expect(() => smoothLimiter({ permitsPerSecond: 1, warmupMs: -1, clock })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'warmupMs' }),
    );
  });

  it('warm up', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, 2, 4000, 3);
    await repeat(8, () => acquire(w, limiter));
    w.user(500);
    w.user(4000);
    await repeat(8, () => acquire(w, limiter));
    w.user(500);
    w.user(2000);
    await repeat(8, () => acquire(w, limiter));
    expect(w.read()).toEqual([
      ...list('R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50'),
      'U0.50',
      'U4.00',
      ...list('R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50'),
      'U0.50',
      'U2.00',
      ...list('R0.00, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50'),
    ]);
  });

  it('warm up with cold factor 10', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, 5, 4000, 10);
    await repeat(8, () => acquire(w, limiter));
    w.user(200);
    w.user(4000);
    await repeat(8, () => acquire(w, limiter));
    w.user(200);
    w.user(1000);
    await repeat(8, () => acquire(w, limiter));
    expect(w.read()).toEqual([
      ...list('R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20'),
      'U0.20',
      'U4.00',
      ...list('R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20'),
      'U0.20',
      'U1.00',
      ...list('R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20'),
    ]);
  });

  it('warm up with cold factor 1 is the stable rate throughout', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, 5, 4000, 1);
    await repeat(8, () => acquire(w, limiter));
    w.user(340);
    await repeat(8, () => acquire(w, limiter));
    expect(w.read()).toEqual([
      ...list('R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20'),
      'U0.34',
      ...list('R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20'),
    ]);
  });

  it('warm up and update: the next caller repays at the old rate, the areas stay the same', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, 2, 4000, 3);
    await repeat(8, () => acquire(w, limiter));
    w.user(4500);
    await repeat(3, () => acquire(w, limiter));
    limiter.setRate(4);
    await acquire(w, limiter);
    await repeat(4, () => acquire(w, limiter));
    w.user(4250);
    await repeat(11, () => acquire(w, limiter));
    expect(w.read()).toEqual([
      ...list('R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50'),
      'U4.50',
      ...list('R0.00, R1.38, R1.13'),
      'R0.88',
      ...list('R0.34, R0.28, R0.25, R0.25'),
      'U4.25',
      ...list('R0.00, R0.72, R0.66, R0.59, R0.53, R0.47, R0.41'),
      ...list('R0.34, R0.28, R0.25, R0.25'),
    ]);
  });

  it('warm up and update with cold factor 10', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, 5, 4000, 10);
    await repeat(8, () => acquire(w, limiter));
    w.user(4200);
    await repeat(3, () => acquire(w, limiter));
    limiter.setRate(10);
    await acquire(w, limiter);
    await repeat(4, () => acquire(w, limiter));
    w.user(4100);
    await repeat(11, () => acquire(w, limiter));
    expect(w.read()).toEqual([
      ...list('R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20'),
      'U4.20',
      ...list('R0.00, R1.75, R1.26'),
      'R0.76',
      ...list('R0.20, R0.10, R0.10, R0.10'),
      'U4.10',
      ...list('R0.00, R0.94, R0.81, R0.69, R0.57, R0.44, R0.32'),
      ...list('R0.20, R0.10, R0.10, R0.10'),
    ]);
  });

  it('bursty and update: a rate change keeps what is owed', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 1);
    await acquire(w, limiter, 1);
    await acquire(w, limiter, 1);
    limiter.setRate(2);
    for (const permits of [1, 2, 4, 1]) await acquire(w, limiter, permits);
    expect(w.read()).toEqual(['R0.00', 'R1.00', 'R1.00', 'R0.50', 'R1.00', 'R2.00']);
  });

  it('tryAcquire with no wait allowed', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    expect(await limiter.tryAcquire(1, 0)).toBe(true);
    expect(await limiter.tryAcquire(1, 0)).toBe(false);
    expect(await limiter.tryAcquire(1, 0)).toBe(false);
    w.user(100);
    expect(await limiter.tryAcquire(1, 0)).toBe(false);
  });

  it('tryAcquire with some wait allowed', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    expect(await limiter.tryAcquire(1, 0)).toBe(true);
    expect(await limiter.tryAcquire(1, 200)).toBe(true);
    expect(await limiter.tryAcquire(1, 100)).toBe(false);
    w.user(100);
    expect(await limiter.tryAcquire(1, 100)).toBe(true);
  });

  it('tryAcquire with an enormous timeout does not overflow', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    expect(await limiter.tryAcquire(1, 0)).toBe(true);
    w.user(100);
    expect(await limiter.tryAcquire(1, Number.MAX_VALUE)).toBe(true);
    expect(await limiter.tryAcquire(1, Number.POSITIVE_INFINITY)).toBe(true);
  });

  it('tryAcquire with a negative timeout counts it as 0', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 5);
    expect(await limiter.tryAcquire(5, 0)).toBe(true);
    w.user(900);
    expect(await limiter.tryAcquire(1, Number.NEGATIVE_INFINITY)).toBe(false);
    w.user(100);
    expect(await limiter.tryAcquire(1, -1000)).toBe(true);
  });

  it('simple weights: the next caller pays for the previous permits', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 1);
    for (const permits of [1, 1, 2, 4, 8, 1]) await acquire(w, limiter, permits);
    expect(w.read()).toEqual(['R0.00', 'R1.00', 'R1.00', 'R2.00', 'R4.00', 'R8.00']);
  });

  it('infinity, bursty', async () => {
    const w = stopwatch();
    const limiter = bursty(w, Number.POSITIVE_INFINITY);
    for (const permits of [(2 ** 31 - 1) / 4, (2 ** 31 - 1) / 2, 2 ** 31 - 1]) await acquire(w, limiter, permits);
    expect(w.read()).toEqual(['R0.00', 'R0.00', 'R0.00']);
    limiter.setRate(2);
    await repeat(5, () => acquire(w, limiter));
    // First the saved-up one-second burst (2), then the free request, then 0.5 s per request.
    expect(w.read()).toEqual(['R0.00', 'R0.00', 'R0.00', 'R0.50', 'R0.50']);
    limiter.setRate(Number.POSITIVE_INFINITY);
    await repeat(3, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R0.50', 'R0.00', 'R0.00']);
  });

  it('infinity, bursty, time elapsed', async () => {
    const w = stopwatch();
    const limiter = bursty(w, Number.POSITIVE_INFINITY);
    w.manual.advance(1);
    limiter.setRate(2);
    await repeat(5, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R0.00', 'R0.00', 'R0.00', 'R0.50', 'R0.50']);
  });

  it('infinity, warming up', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, Number.POSITIVE_INFINITY, 10_000, 3);
    for (const permits of [(2 ** 31 - 1) / 4, (2 ** 31 - 1) / 2, 2 ** 31 - 1]) await acquire(w, limiter, permits);
    expect(w.read()).toEqual(['R0.00', 'R0.00', 'R0.00']);
    limiter.setRate(1);
    await repeat(3, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R0.00', 'R1.00', 'R1.00']);
    limiter.setRate(Number.POSITIVE_INFINITY);
    await repeat(3, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R1.00', 'R0.00', 'R0.00']);
  });

  it('infinity, warming up, time elapsed', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, Number.POSITIVE_INFINITY, 10_000, 3);
    w.manual.advance(1);
    limiter.setRate(1);
    await repeat(5, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R0.00', 'R1.00', 'R1.00', 'R1.00', 'R1.00']);
  });

  it('we never get a burst of more than one second of work, even across rate changes', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 1);
    const random = seededRandom(7);
    for (const rate of [1000, 1, 10, 1_000_000, 10, 1]) {
      w.manual.advance(rate * 1000);
      limiter.setRate(rate);
      const burst = await measureTotalTimeUs(w, limiter, rate, random);
      expect(burst).toBeLessThanOrEqual(1_000_000);
      const afterBurst = await measureTotalTimeUs(w, limiter, rate, random);
      expect(afterBurst).toBeGreaterThanOrEqual(1_000_000 - rate);
    }
  });

  it('time to warm up is honoured even with weights', async () => {
    const random = seededRandom(11);
    for (let trial = 0; trial < 20; trial++) {
      for (const coldFactor of [2, 3, 10]) {
        for (const qps of [4, 2, 1, 0.5, 0.1]) {
          const warmupPermits = 10;
          const warmupMs = Math.trunc((((1 + coldFactor) * warmupPermits) / (2 * qps)) * 1000);
          const w = stopwatch();
          const limiter = warmingUp(w, qps, warmupMs, coldFactor);
          const totalUs = await measureTotalTimeUs(w, limiter, warmupPermits, random);
          expect(Math.trunc(totalUs / 1000)).toBe(warmupMs);
        }
      }
    }
  });
});

describe('smooth limiter: beyond Guava', () => {
  it('a zero warm-up still limits: the stable rate from the first permit, nothing stored', async () => {
    const w = stopwatch();
    const limiter = warmingUp(w, 2, 0, 3);
    await repeat(4, () => acquire(w, limiter));
    w.user(10_000);
    await repeat(3, () => acquire(w, limiter));
    expect(w.read()).toEqual(['R0.00', 'R0.50', 'R0.50', 'R0.50', 'U10.00', 'R0.00', 'R0.50', 'R0.50']);
  });

  it('a zero burst stores nothing', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 4, { maxBurstSeconds: 0 });
    w.user(5000);
    await repeat(3, () => acquire(w, limiter));
    expect(w.read()).toEqual(['U5.00', 'R0.00', 'R0.25', 'R0.25']);
  });

  it('maxBurstSeconds stores that many seconds of the rate', async () => {
    const w = stopwatch();
    const limiter = bursty(w, 2, { maxBurstSeconds: 3 });
    w.user(60_000);
    await repeat(8, () => acquire(w, limiter));
    expect(w.read()).toEqual(['U60.00', ...Array(7).fill('R0.00'), 'R0.50']);
  });

  it('acquire really waits on the clock, in call order, and a signal stops the wait', async () => {
    const clock = manualClock({ startMs: 0 });
    const limiter = smoothLimiter({ permitsPerSecond: 10, clock });
    const done: string[] = [];
    const a = limiter.acquire(3).then((s) => done.push(`a${s}`));
    const b = limiter.acquire(1).then((s) => done.push(`b${s}`));
    const controller = new AbortController();
    const c = limiter.acquire(1, { signal: controller.signal }).catch((error: unknown) => {
      done.push(isFloodgateError(error) ? error.code : 'other');
    });
    await Promise.resolve();
    await Promise.resolve();
    expect(done).toEqual(['a0']);
    clock.advance(299);
    await Promise.resolve();
    expect(done).toEqual(['a0']);
    clock.advance(1);
    await b;
    expect(done).toEqual(['a0', 'b0.3']);
    controller.abort();
    await c;
    await a;
    expect(done).toEqual(['a0', 'b0.3', 'ERR_ABORTED']);
    // The aborted call's permit stays booked: the next call waits for it.
    expect(await limiter.tryAcquire(1, 199)).toBe(false);
    const d = limiter.tryAcquire(1, 200);
    clock.advance(200);
    expect(await d).toBe(true);
  });

  it('an already aborted signal books nothing', async () => {
    const clock = manualClock({ startMs: 0 });
    const limiter = smoothLimiter({ permitsPerSecond: 1, clock });
    await expect(limiter.acquire(1, { signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(await limiter.tryAcquire()).toBe(true);
  });

  it('acquire refuses options that are not an object and a signal that is not an AbortSignal, booking nothing', async () => {
    const clock = manualClock({ startMs: 0 });
    const limiter = smoothLimiter({ permitsPerSecond: 1, clock });
    const bad: [unknown, string][] = [
      [null, 'options'],
      ['fast', 'options'],
      [{ signal: {} }, 'signal'],
      [{ signal: 'stop' }, 'signal'],
    ];
    for (const [options, option] of bad) {
      await expect(limiter.acquire(1, options as never)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option });
    }
    expect(clock.pending).toBe(0);
    // Had a refused call booked its permit, the next one would have to wait a second.
    expect(await limiter.tryAcquire()).toBe(true);
  });

  it('options are validated', () => {
    const clock = manualClock();
    const bad: [SmoothLimiterOptions, string][] = [
      [{ permitsPerSecond: Number.NaN }, 'permitsPerSecond'],
      [{ permitsPerSecond: 1, maxBurstSeconds: -1 }, 'maxBurstSeconds'],
      [{ permitsPerSecond: 1, maxBurstSeconds: Number.POSITIVE_INFINITY }, 'maxBurstSeconds'],
      [{ permitsPerSecond: 1, warmupMs: 10, coldFactor: 0.5 }, 'coldFactor'],
      [{ permitsPerSecond: 1, coldFactor: 2 }, 'coldFactor'],
      [{ permitsPerSecond: 1, warmupMs: 10, maxBurstSeconds: 1 }, 'maxBurstSeconds'],
    ];
    for (const [options, option] of bad) {
      expect(() => smoothLimiter({ ...options, clock })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option }),
      );
    }
  });
});

describe('smooth limiter: properties', () => {
  it('a burst never exceeds maxBurstSeconds of work', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.double({ min: 0.5, max: 20, noNaN: true }), fc.double({ min: 0.01, max: 10_000, noNaN: true })),
        fc.double({ min: 0, max: 5, noNaN: true }),
        fc.array(
          fc.tuple(
            fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 5000 })),
            fc.integer({ min: 1, max: 20 }),
          ),
          { maxLength: 60 },
        ),
        async (rate, maxBurstSeconds, steps) => {
          const clock = stopwatch();
          const limiter = bursty(clock, rate, { maxBurstSeconds });
          const grants: { atUs: number; permits: number }[] = [];
          for (const [pauseMs, permits] of steps) {
            clock.manual.advance(pauseMs);
            await limiter.acquire(permits);
            grants.push({ atUs: clock.nowUs(), permits });
          }
          // Over any run of grants, all but the last were paid for at the stable rate, except for what
          // was stored: at most maxBurstSeconds of the rate (plus 1 µs of truncation per grant).
          for (let i = 0; i < grants.length; i++) {
            let permits = 0;
            for (let j = i; j < grants.length; j++) {
              const last = grants[j] as { atUs: number; permits: number };
              const spanUs = last.atUs - (grants[i] as { atUs: number }).atUs + (j - i + 1);
              expect(permits).toBeLessThanOrEqual(rate * (spanUs / 1e6 + maxBurstSeconds) * (1 + 1e-12) + 1e-9);
              permits += last.permits;
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('a cold warming-up limiter takes the same time for N permits however they are split', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.double({ min: 0.1, max: 1000, noNaN: true }),
        fc.double({ min: 1, max: 10, noNaN: true }),
        fc.integer({ min: 1, max: 60_000 }),
        fc.array(fc.integer({ min: 1, max: 8 }), { minLength: 1, maxLength: 30 }),
        async (rate, coldFactor, warmupMs, split) => {
          const total = split.reduce((a, b) => a + b, 0);
          const timeFor = async (parts: number[]) => {
            const w = stopwatch();
            const limiter = warmingUp(w, rate, warmupMs, coldFactor);
            const start = w.nowUs();
            for (const permits of parts) await limiter.acquire(permits);
            await limiter.acquire(1); // repays the last call
            return { us: w.nowUs() - start, calls: parts.length + 1 };
          };
          const one = await timeFor([total]);
          const many = await timeFor(split);
          // Equal up to Guava's truncation to whole µs: at most 2 µs per call.
          expect(Math.abs(one.us - many.us)).toBeLessThanOrEqual(2 * (one.calls + many.calls));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('no rate, however infinite or tiny, produces NaN or a negative wait', async () => {
    const rates = fc.oneof(
      fc.constantFrom(Number.MIN_VALUE, 1e-300, 1e-12, 1e12, 1e300, Number.MAX_VALUE, Number.POSITIVE_INFINITY),
      fc.double({ min: 1e-6, max: 1e9, noNaN: true }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        rates,
        fc.double({ min: 0, max: 100, noNaN: true }),
        fc.array(
          fc.oneof(
            fc.record({ pauseMs: fc.integer({ min: 0, max: 10_000 }) }),
            fc.record({ permits: fc.double({ min: 1e-3, max: 1e6, noNaN: true }) }),
            fc.record({ rate: rates }),
            fc.record({ tryPermits: fc.double({ min: 1e-3, max: 1e6, noNaN: true }), timeoutMs: fc.integer() }),
          ),
          { maxLength: 30 },
        ),
        async (warm, rate, shape, steps) => {
          const manual = manualClock({ startMs: 0 });
          // Sleeps longer than a day are not taken: they would only move time past the test.
          const clock: Clock = {
            nowUs: () => manual.nowUs(),
            sleep: (ms) => {
              expect(ms).not.toBeNaN();
              expect(ms).toBeGreaterThanOrEqual(0);
              if (Number.isFinite(ms) && ms < 86_400_000) manual.advance(ms);
              return Promise.resolve();
            },
          };
          const limiter = warm
            ? smoothLimiter({ permitsPerSecond: rate, warmupMs: shape * 1000, coldFactor: 1 + shape, clock })
            : smoothLimiter({ permitsPerSecond: rate, maxBurstSeconds: shape, clock });
          for (const step of steps) {
            if ('pauseMs' in step) manual.advance(step.pauseMs);
            else if ('rate' in step) limiter.setRate(step.rate);
            else if ('permits' in step) {
              const seconds = await limiter.acquire(step.permits);
              expect(seconds).not.toBeNaN();
              expect(seconds).toBeGreaterThanOrEqual(0);
            } else {
              expect(typeof (await limiter.tryAcquire(step.tryPermits, step.timeoutMs))).toBe('boolean');
            }
            for (const value of Object.values(limiter)) {
              if (typeof value === 'number') expect(value).not.toBeNaN();
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

/** Guava's measureTotalTimeMillis, in µs: random splits of `permits`, then one more to repay the debt. */
async function measureTotalTimeUs(
  w: Watch,
  limiter: ReturnType<typeof smoothLimiter>,
  permits: number,
  random: () => number,
): Promise<number> {
  const start = w.nowUs();
  let left = permits;
  while (left > 0) {
    const next = Math.max(1, Math.floor(random() * left));
    left -= next;
    await limiter.acquire(next);
  }
  await limiter.acquire(1);
  return w.nowUs() - start;
}
