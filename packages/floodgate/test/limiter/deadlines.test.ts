import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, type FloodgateError, gcra, isFloodgateError } from '../../src/index.js';
import { Deadlines } from '../../src/limiter/deadlines.js';
import type { Store, StoreRequest, StoreResult, TimedCall } from '../../src/stores/store.js';

/**
 * One timer for the timeouts of all of a limiter's store calls (`Deadlines`): each call still fails at the
 * moment a timer of its own would fire, and a call answered in time costs no timer.
 */
describe('store call timeouts, one timer for all calls', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /**
   * A store whose calls wait until the test answers them, in any order; `timed`, one that keeps the
   * limiter's deadline on its own call (`decideTimed`, as the Redis store does).
   */
  function heldStore(timed = false): { store: Store; answer: (i: number) => void; calls: number } {
    const waiting: ((result: StoreResult) => void)[] = [];
    const decide = (request: StoreRequest, deadline?: TimedCall) =>
      new Promise<StoreResult>((resolve, reject) => {
        held.calls++;
        waiting.push(resolve);
        if (deadline !== undefined) deadline.expire = reject;
        void request;
      });
    const held = {
      calls: 0,
      store: {
        name: 'held',
        hasOwnClock: false,
        decide: (request: StoreRequest) => decide(request),
        ...(timed ? { decideTimed: decide } : {}),
        reset: async () => undefined,
      } as unknown as Store,
      answer: (i: number) =>
        (waiting[i] as (result: StoreResult) => void)({
          allowed: true,
          evaluations: [
            {
              allowed: true,
              reason: 'ok',
              remaining: 1,
              retryAfterUs: 0,
              resetAfterUs: 0,
              delayUs: 0,
              next: undefined,
              buffers: [[], []],
            },
          ],
          nowUs: 0,
        } as unknown as StoreResult),
    };
    return held;
  }

  /** Settles as 'ok', the error's code, or stays 'pending'. */
  function watch(promise: Promise<unknown>): { state: string } {
    const seen = { state: 'pending' };
    promise.then(
      () => {
        seen.state = 'ok';
      },
      (error: unknown) => {
        seen.state = isFloodgateError(error) ? (error as FloodgateError).code : String(error);
      },
    );
    return seen;
  }

  for (const timed of [false, true]) {
    const on = timed ? ", the deadline kept on the store's own call" : '';
    it(`each call fails timeoutMs after its own start, not before, and an answered call never does${on}`, async () => {
      const held = heldStore(timed);
      const limiter = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 5, periodMs: 1000 })],
        timeoutMs: 1000,
        breaker: false,
      });
      const first = watch(limiter.limit('a'));
      await vi.advanceTimersByTimeAsync(300);
      const second = watch(limiter.limit('b'));
      const third = watch(limiter.limit('c'));
      await vi.advanceTimersByTimeAsync(100);
      // The second call is answered in time; the other two never are.
      held.answer(1);
      await vi.advanceTimersByTimeAsync(599);
      expect([first.state, second.state, third.state]).toEqual(['pending', 'ok', 'pending']);
      await vi.advanceTimersByTimeAsync(1);
      expect([first.state, third.state]).toEqual(['ERR_TIMEOUT', 'pending']);
      await vi.advanceTimersByTimeAsync(299);
      expect(third.state).toBe('pending');
      await vi.advanceTimersByTimeAsync(1);
      expect(third.state).toBe('ERR_TIMEOUT');
      // An answer after the timeout changes nothing.
      held.answer(0);
      await vi.advanceTimersByTimeAsync(0);
      expect(first.state).toBe('ERR_TIMEOUT');
      expect(vi.getTimerCount()).toBe(0);
    });

    it(`an answer after the timeout does not tell the breaker the store is well${on}`, async () => {
      const held = heldStore(timed);
      const limiter = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 5, periodMs: 1000 })],
        timeoutMs: 100,
        breaker: { failureThreshold: 2, cooldownMs: 60_000 },
      });
      const first = watch(limiter.limit('a'));
      await vi.advanceTimersByTimeAsync(100);
      expect(first.state).toBe('ERR_TIMEOUT');
      // The first call's answer arrives late: the call has failed, and the store's failures still run.
      held.answer(0);
      await vi.advanceTimersByTimeAsync(0);
      expect(limiter.breakerState).toBe('closed');
      const second = watch(limiter.limit('b'));
      await vi.advanceTimersByTimeAsync(100);
      expect(second.state).toBe('ERR_TIMEOUT');
      // Two failures in a row: the breaker opens.
      expect(limiter.breakerState).toBe('open');
    });
  }

  it('a store that fails a timed call at once, before it keeps the deadline, fails only that call', async () => {
    let fail = true;
    const held = heldStore(true);
    const timed = held.store.decideTimed as NonNullable<Store['decideTimed']>;
    const store = {
      ...held.store,
      decideTimed: (request: StoreRequest, deadline: TimedCall) =>
        fail ? Promise.reject(new Error('closed')) : timed(request, deadline),
    } as Store;
    const limiter = createLimiter({
      store,
      policies: [gcra({ limit: 5, periodMs: 1000 })],
      timeoutMs: 100,
      breaker: false,
      failure: 'throw',
    });
    const first = watch(limiter.limit('a'));
    await vi.advanceTimersByTimeAsync(0);
    expect(first.state).toBe('ERR_STORE_UNAVAILABLE');
    // Nothing waits on its deadline any more (the timer no longer holds the process), and a later call
    // keeps its own timeout.
    const deadlines = (
      limiter as unknown as { calls: { deadlines: { waiting: number; timer: { hasRef(): boolean } } } }
    ).calls.deadlines;
    expect(deadlines.waiting).toBe(0);
    expect(deadlines.timer.hasRef()).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect(first.state).toBe('ERR_STORE_UNAVAILABLE');
    fail = false;
    const second = watch(limiter.limit('b'));
    await vi.advanceTimersByTimeAsync(99);
    expect(second.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(second.state).toBe('ERR_TIMEOUT');
  });

  it('a store that keeps the deadline late, or throws, cannot make calls wait past their time', async () => {
    const held = heldStore(true);
    const timed = held.store.decideTimed as NonNullable<Store['decideTimed']>;
    let mode: 'late' | 'throw' = 'late';
    const store = {
      ...held.store,
      // Sets `expire` only after it has returned (it should before), and after the time is up: the limiter
      // bounds the call itself.
      decideTimed: (request: StoreRequest, deadline: TimedCall) => {
        if (mode === 'throw') throw new Error('broken');
        return new Promise((resolve) => setTimeout(resolve, 150)).then(() => timed(request, deadline));
      },
    } as Store;
    const limiter = createLimiter({
      store,
      policies: [gcra({ limit: 5, periodMs: 1000 })],
      timeoutMs: 100,
      breaker: { failureThreshold: 2, cooldownMs: 60_000 },
    });
    const deadlines = (
      limiter as unknown as { calls: { deadlines: { waiting: number; timer: { hasRef(): boolean } } } }
    ).calls.deadlines;
    const first = watch(limiter.limit('a'));
    await vi.advanceTimersByTimeAsync(99);
    expect(first.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(first.state).toBe('ERR_TIMEOUT');
    // Its late answer changes nothing: no success for the breaker, no call counted twice.
    await vi.advanceTimersByTimeAsync(50);
    held.answer(0);
    await vi.advanceTimersByTimeAsync(0);
    expect(first.state).toBe('ERR_TIMEOUT');
    expect(deadlines.waiting).toBe(0);
    // The next call still times out on time: one more timeout opens the breaker.
    const second = watch(limiter.limit('b'));
    await vi.advanceTimersByTimeAsync(100);
    expect(second.state).toBe('ERR_TIMEOUT');
    expect(limiter.breakerState).toBe('open');
    await vi.advanceTimersByTimeAsync(100);
    expect(deadlines.waiting).toBe(0);
    // A store that throws leaves nothing waiting.
    mode = 'throw';
    const throwing = createLimiter({ store, policies: [gcra({ limit: 5, periodMs: 1000 })], timeoutMs: 100 });
    await expect(throwing.limit('c')).rejects.toThrow();
    const after = (
      throwing as unknown as { calls: { deadlines: { waiting: number; timer: { hasRef(): boolean } | undefined } } }
    ).calls.deadlines;
    expect(after.waiting).toBe(0);
    expect(after.timer?.hasRef() ?? false).toBe(false);
  });

  it('calls one at a time set one timer per timeoutMs, not one each, and keep their timeouts', async () => {
    const held = heldStore();
    const limiter = createLimiter({
      store: held.store,
      policies: [gcra({ limit: 5, periodMs: 1000 })],
      timeoutMs: 1000,
      breaker: false,
    });
    const set = vi.spyOn(globalThis, 'setTimeout');
    // 2,000 calls, each answered 1 ms after it starts: 2 s in all.
    for (let i = 0; i < 2000; i++) {
      const call = watch(limiter.limit(`k${i}`));
      await vi.advanceTimersByTimeAsync(1);
      held.answer(i);
      await vi.advanceTimersByTimeAsync(0);
      expect(call.state).toBe('ok');
    }
    expect(set.mock.calls.length).toBeLessThanOrEqual(3);
    // Then one that is never answered still times out on time, from its own start.
    const late = watch(limiter.limit('late'));
    await vi.advanceTimersByTimeAsync(999);
    expect(late.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(late.state).toBe('ERR_TIMEOUT');
    set.mockRestore();
  });

  it('the timer holds the process only while a call waits', () => {
    const deadlines = new Deadlines(1000);
    const timer = () => (deadlines as unknown as { timer: { hasRef(): boolean } }).timer;
    const a = deadlines.start(() => undefined);
    expect(timer().hasRef()).toBe(true);
    deadlines.answered(a);
    expect(timer().hasRef()).toBe(false);
    const b = deadlines.start(() => undefined);
    expect(timer().hasRef()).toBe(true);
    deadlines.answered(b);
    expect(timer().hasRef()).toBe(false);
  });

  it('answered calls behind one that waits do not pile up', () => {
    const deadlines = new Deadlines(1000);
    const expired: number[] = [];
    deadlines.start(() => expired.push(0));
    const queued = () => (deadlines as unknown as { queue: unknown[]; head: number }).queue.length;
    let most = 0;
    for (let i = 1; i <= 10_000; i++) {
      const entry = deadlines.start(() => expired.push(i));
      deadlines.answered(entry);
      most = Math.max(most, queued());
    }
    // At most twice the calls in flight (one here, plus the one being added) and 64 more.
    expect(most).toBeLessThanOrEqual(2 * 2 + 64 + 1);
    vi.advanceTimersByTime(1000);
    expect(expired).toEqual([0]);
  });

  it("a call started by a timed-out call's failure is timed by the one timer, not by a second one", () => {
    const deadlines = new Deadlines(100);
    const expired: string[] = [];
    deadlines.start(() => {
      expired.push('first');
      // A failure's listener (or its fallback) calling the limiter again, at once.
      deadlines.start(() => expired.push('second'));
    });
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(100);
    expect(expired).toEqual(['first']);
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(99);
    expect(expired).toEqual(['first']);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(['first', 'second']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('calls that keep timing out while new ones start, some answered out of order, do not pile up', () => {
    // One call a millisecond, each waiting 100 ms: about 100 in flight; in the first half every third is
    // answered 60 ms later, in the second half none is (only the timer's rounds then drop passed entries).
    const deadlines = new Deadlines(100);
    const queued = () => (deadlines as unknown as { queue: unknown[] }).queue.length;
    const expired = new Set<number>();
    const answered = new Set<number>();
    let most = 0;
    const answerLater: [number, ReturnType<Deadlines['start']>][] = [];
    for (let i = 0; i < 10_000; i++) {
      const entry = deadlines.start(() => expired.add(i));
      if (i % 3 === 0 && i < 5_000) answerLater.push([i, entry]);
      if (answerLater.length > 20) {
        const [started, earlier] = answerLater.shift() as [number, typeof entry];
        expect(deadlines.answered(earlier)).toBe(true);
        answered.add(started);
      }
      vi.advanceTimersByTime(1);
      most = Math.max(most, queued());
    }
    // Started at i ms, out at i + 100 ms: by 10,000 ms every call up to 9,900 not answered has timed out.
    for (let i = 0; i <= 9_900; i++) expect(expired.has(i), `call ${i}`).toBe(!answered.has(i));
    expect(expired.size).toBe(9_901 - [...answered].filter((i) => i <= 9_900).length);
    expect(most).toBeLessThanOrEqual(4 * 101 + 320);
  });

  it('calls that keep overlapping, answered oldest first, do not pile up either', () => {
    // 1000 in flight and never fewer: the count waiting never gets back to 0, where the queue is emptied.
    const deadlines = new Deadlines(1000);
    const queued = () => (deadlines as unknown as { queue: unknown[] }).queue.length;
    const expired: number[] = [];
    const inFlight: ReturnType<Deadlines['start']>[] = [];
    for (let i = 0; i < 1000; i++) inFlight.push(deadlines.start(() => expired.push(i)));
    let most = 0;
    for (let i = 0; i < 100_000; i++) {
      expect(deadlines.answered(inFlight.shift() as ReturnType<Deadlines['start']>)).toBe(true);
      inFlight.push(deadlines.start(() => expired.push(i)));
      most = Math.max(most, queued());
    }
    // The calls in flight and at most as many passed ones, with 256 more.
    expect(most).toBeLessThanOrEqual(2 * 1000 + 256 + 1);
    expect(expired).toEqual([]);
    // The ones still in flight time out, and answering one then tells that it came too late.
    vi.advanceTimersByTime(1000);
    expect(expired.length).toBe(1000);
    expect(deadlines.answered(inFlight[0] as ReturnType<Deadlines['start']>)).toBe(false);
    expect(queued()).toBe(0);
  });
});
