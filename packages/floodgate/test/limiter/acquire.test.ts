import { describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { createLimiter, fixedWindow, gcra, memoryStore, type Store } from '../../src/index.js';
import type { StoreRequest } from '../../src/stores/index.js';
import { manualClock } from '../../src/testing/index.js';

/** The memory store, counting the decisions asked of it. */
function countingStore(): Store & { calls: StoreRequest[] } {
  const inner = memoryStore();
  const calls: StoreRequest[] = [];
  return {
    name: 'counting',
    hasOwnClock: false,
    calls,
    decide(request) {
      calls.push(request);
      return inner.decide(request);
    },
    reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
  };
}

async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

describe('limiter.acquire', () => {
  it('asks the store once per retryAfterMs, never in between', async () => {
    const store = countingStore();
    const clock = manualClock();
    const limiter = createLimiter({ store, clock, policies: gcra({ limit: 1, periodMs: 10_000 }) });
    await limiter.acquire('k');
    expect(store.calls).toHaveLength(1);
    let admitted = false;
    const waiting = limiter.acquire('k').then(() => {
      admitted = true;
    });
    await flush();
    expect(store.calls).toHaveLength(2);
    for (let i = 0; i < 9_999; i++) clock.advance(1);
    await flush();
    expect([store.calls.length, admitted]).toEqual([2, false]);
    clock.advance(1);
    await waiting;
    expect(store.calls).toHaveLength(3);
  });

  it('a timeout or an abort consumes nothing', async () => {
    const clock = manualClock();
    const limiter = createLimiter({ clock, policies: gcra({ limit: 2, periodMs: 1000 }) });
    await limiter.limit('k');
    await limiter.limit('k');
    const before = await limiter.status('k');
    await expect(limiter.acquire('k', { timeoutMs: 100 })).rejects.toMatchObject({
      code: 'ERR_TIMEOUT',
      option: 'timeoutMs',
    });
    const controller = new AbortController();
    const aborted = limiter.acquire('k', { signal: controller.signal });
    await flush();
    clock.advance(200);
    controller.abort(new Error('shutting down'));
    await expect(aborted).rejects.toMatchObject({ code: 'ERR_ABORTED', cause: new Error('shutting down') });
    clock.advance(300);
    const after = await limiter.status('k');
    expect(after.remaining).toBe(before.remaining + 1);
    expect(after.resetAfterMs).toBe(before.resetAfterMs - 500);
  });

  it('an aborted signal rejects before the store is asked', async () => {
    const store = countingStore();
    const limiter = createLimiter({ store, clock: manualClock(), policies: gcra({ limit: 1, periodMs: 1000 }) });
    await expect(limiter.acquire('k', { signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    expect(store.calls).toHaveLength(0);
  });

  it('validates its options, naming them', async () => {
    const limiter = createLimiter({ clock: manualClock(), policies: gcra({ limit: 1, periodMs: 1000 }) });
    const cases: [unknown, string, string][] = [
      [{ timeoutMs: -1 }, 'ERR_INVALID_OPTION', 'timeoutMs'],
      [{ timeoutMs: Number.NaN }, 'ERR_INVALID_OPTION', 'timeoutMs'],
      [{ signal: {} }, 'ERR_INVALID_OPTION', 'signal'],
      [{ cost: -1 }, 'ERR_INVALID_COST', 'cost'],
      [{ cost: 2 }, 'ERR_INVALID_COST', 'cost'],
    ];
    for (const [options, code, option] of cases) {
      await expect(limiter.acquire('k', options as never)).rejects.toMatchObject({ code, option });
    }
    await expect(limiter.acquire('')).rejects.toMatchObject({ code: 'ERR_INVALID_KEY' });
  });

  it('per-call policies are waited on too', async () => {
    const clock = manualClock();
    const limiter = createLimiter({ clock, policies: gcra({ limit: 100, periodMs: 1000 }) });
    const tier = gcra({ limit: 1, periodMs: 1000, name: 'free' });
    await limiter.acquire('k', { policies: tier });
    const second = limiter.acquire('k', { policies: tier });
    await flush();
    clock.advance(1000);
    expect((await second).policy).toBe('free');
  });
});

describe('limiter.acquire with reserve', () => {
  it('makes one store call per admitted call, however long it waits', async () => {
    const store = countingStore();
    const clock = manualClock();
    const limiter = createLimiter({ store, clock, policies: gcra({ limit: 1, periodMs: 1000, burst: 1 }) });
    const done: number[] = [];
    const calls = [0, 1, 2, 3].map(() => limiter.acquire('k', { reserve: true }).then(() => done.push(clock.nowMs())));
    await flush();
    expect(store.calls.map((c) => c.maxDelayUs > 0)).toEqual([true, true, true, true]);
    for (let i = 0; i < 3; i++) {
      clock.advance(1000);
      await flush();
    }
    await Promise.all(calls);
    const start = done[0] as number;
    expect(done.map((t) => t - start)).toEqual([0, 1000, 2000, 3000]);
    expect(store.calls).toHaveLength(4);
  });

  it('a timer that fires past the deadline ends in ERR_TIMEOUT, or an admission at once, never a bad maxDelayMs', async () => {
    for (const [overshootMs, outcome] of [
      [3, 'ERR_TIMEOUT'],
      [12, 'admitted'],
    ] as const) {
      const manual = manualClock({ startMs: 0 });
      // Sleeps as asked, then some: the deadline (991 ms) is behind when the call wakes.
      const late: Clock = {
        nowUs: () => manual.nowUs(),
        sleep: (ms) => {
          manual.advance(ms + overshootMs);
          return Promise.resolve();
        },
      };
      const limiter = createLimiter({ clock: late, policies: gcra({ limit: 1, periodMs: 1000, blockMs: 990 }) });
      await limiter.limit('k');
      expect((await limiter.limit('k')).retryAfterMs).toBe(1000); // blocked until 990 ms, free again at 1000 ms
      const result = await limiter.acquire('k', { reserve: true, timeoutMs: 991 }).then(
        (decision) => (decision.allowed ? 'admitted' : 'denied'),
        (error: { code?: string; option?: string }) => `${error.code}`,
      );
      expect([overshootMs, result]).toEqual([overshootMs, outcome]);
    }
  });

  it('is refused for policies that cannot book ahead', async () => {
    const limiter = createLimiter({ clock: manualClock(), policies: fixedWindow({ limit: 1, windowMs: 1000 }) });
    await expect(limiter.acquire('k', { reserve: true })).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
      option: 'maxDelayMs',
    });
    await expect(limiter.acquire('k', { reserve: 'yes' as never })).rejects.toMatchObject({ option: 'reserve' });
    expect((await limiter.acquire('k')).allowed).toBe(true);
  });
});
