import { describe, expect, it } from 'vitest';
import { createLimiter, gcra, isFloodgateError, leakyBucket, throttle } from '../../src/index.js';
import { memoryStore } from '../../src/stores/memory/memory-store.js';
import type { Store } from '../../src/stores/store.js';
import { manualClock } from '../../src/testing/index.js';

async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

describe('throttle', () => {
  it('spaces calls by the limiter, in call order, and returns what the function returns', async () => {
    const clock = manualClock({ startMs: 0 });
    const started: [string, number][] = [];
    const work = throttle(
      async (name: string) => {
        started.push([name, clock.nowMs()]);
        return name.toUpperCase();
      },
      { policies: gcra({ limit: 10, periodMs: 1000, burst: 1 }), clock },
    );
    const results = Promise.all([work('a'), work('b'), work('c')]);
    await flush();
    expect(work.queued).toBe(2);
    for (let i = 0; i < 20; i++) {
      clock.advance(10);
      await flush();
    }
    expect(await results).toEqual(['A', 'B', 'C']);
    expect(started).toEqual([
      ['a', 0],
      ['b', 100],
      ['c', 200],
    ]);
    expect(work.queued).toBe(0);
  });

  it('computes the cost and the key from the arguments', async () => {
    const clock = manualClock({ startMs: 0 });
    const limiter = createLimiter({ clock, policies: leakyBucket({ capacity: 10, leakPerSecond: 10 }) });
    const sent: number[] = [];
    const send = throttle(async (_tenant: string, bytes: number) => sent.push(bytes), {
      limiter,
      key: (tenant) => `tenant:${tenant}`,
      cost: (_tenant, bytes) => bytes,
    });
    await send('a', 10);
    await send('b', 10);
    const third = send('a', 5);
    await flush();
    expect(sent).toEqual([10, 10]);
    clock.advance(500);
    await third;
    expect(sent).toEqual([10, 10, 5]);
    expect((await limiter.status('tenant:a')).remaining).toBe(0);
    await expect(send('a', 11)).rejects.toMatchObject({ code: 'ERR_INVALID_COST', option: 'cost' });
    await expect(send('a', -1)).rejects.toMatchObject({ code: 'ERR_INVALID_COST', option: 'cost' });
  });

  it('rejects at once with ERR_QUEUE_FULL when maxQueue calls are waiting', async () => {
    const clock = manualClock({ startMs: 0 });
    const work = throttle(async () => clock.nowMs(), {
      policies: gcra({ limit: 1, periodMs: 1000 }),
      clock,
      maxQueue: 1,
    });
    expect(await work()).toBe(0);
    const second = work();
    await flush();
    const error = await work().catch((e: unknown) => e);
    expect(isFloodgateError(error) && [error.code, error.option]).toEqual(['ERR_QUEUE_FULL', 'maxQueue']);
    expect(String((error as Error).message)).toContain('maxQueue 1');
    clock.advance(1000);
    expect(await second).toBe(1000);
  });

  it('a call counts from the moment it queues behind another on its key; maxQueue 0 runs a call only if it is free now', async () => {
    const clock = manualClock({ startMs: 0 });
    const runs: number[] = [];
    const now = throttle(async (id: number) => runs.push(id), {
      policies: gcra({ limit: 3, periodMs: 3000 }),
      clock,
      maxQueue: 0,
    });
    const outcome = (p: Promise<unknown>) =>
      p.then(
        () => 'ran',
        (error: { code?: string }) => error.code,
      );
    // One at a time on an idle key: three calls fit the burst and run, the fourth would wait and is refused.
    for (const id of [1, 2, 3]) expect(await outcome(now(id))).toBe('ran');
    expect(await outcome(now(4))).toBe('ERR_QUEUE_FULL');
    expect(runs).toEqual([1, 2, 3]);
    expect(now.queued).toBe(0);
    // All at once: only the first is free; the others would wait behind it and are refused.
    clock.advance(3000);
    expect(await Promise.all([5, 6, 7].map((id) => outcome(now(id))))).toEqual([
      'ran',
      'ERR_QUEUE_FULL',
      'ERR_QUEUE_FULL',
    ]);
    expect(runs).toEqual([1, 2, 3, 5]);

    const one = throttle(async (id: number) => id, {
      policies: gcra({ limit: 1, periodMs: 1000 }),
      clock,
      maxQueue: 2,
    });
    const batch = [1, 2, 3, 4].map((id) => one(id).then(String, (error: { code?: string }) => error.code));
    await flush();
    expect(one.queued).toBe(2);
    clock.advance(1000);
    await flush();
    expect(one.queued).toBe(1);
    clock.advance(1000);
    expect(await Promise.all(batch)).toEqual(['1', '2', '3', 'ERR_QUEUE_FULL']);
    expect(one.queued).toBe(0);
  });

  it('when the first call on a key must sleep and the queue is full, the newest call on the key gives its room up', async () => {
    const clock = manualClock({ startMs: 0 });
    const work = throttle(async (id: number) => [id, clock.nowMs()], {
      policies: gcra({ limit: 1, periodMs: 1000 }),
      clock,
      maxQueue: 2,
    });
    await work(0);
    const batch = [1, 2, 3].map((id) => work(id).catch((error: { code?: string }) => error.code));
    await flush();
    expect(work.queued).toBe(2);
    expect(await batch[2]).toBe('ERR_QUEUE_FULL');
    clock.advance(1000);
    await flush();
    clock.advance(1000);
    expect(await Promise.all(batch.slice(0, 2))).toEqual([
      [1, 1000],
      [2, 2000],
    ]);
    expect(work.queued).toBe(0);
  });

  it('bounds the queue behind a call still asking a slow store', async () => {
    const memory = memoryStore();
    const slow: Store = {
      name: 'slow',
      hasOwnClock: false,
      decide: (request) => new Promise((resolve) => setTimeout(() => resolve(memory.decide(request)), 5)),
      reset: (prefix, key, policies) => memory.reset(prefix, key, policies),
    };
    const limiter = createLimiter({
      store: slow,
      policies: gcra({ limit: 1_000_000, periodMs: 1000 }),
      breaker: false,
    });
    let most = 0;
    const f = throttle(
      async () => {
        most = Math.max(most, f.queued);
      },
      { limiter, maxQueue: 2 },
    );
    const calls = Array.from({ length: 200 }, () =>
      f().then(
        () => 'ok',
        (error: { code?: string }) => error.code,
      ),
    );
    most = Math.max(most, f.queued);
    const out = await Promise.all(calls);
    expect(most).toBe(2);
    expect(out.filter((x) => x === 'ok').length).toBe(3);
    expect(out.filter((x) => x === 'ERR_QUEUE_FULL').length).toBe(197);
    expect(f.queued).toBe(0);
  });

  it('a signal rejects waiting calls and later ones with ERR_ABORTED; the function never runs for them', async () => {
    const clock = manualClock({ startMs: 0 });
    const controller = new AbortController();
    let runs = 0;
    const work = throttle(
      async () => {
        runs++;
      },
      { policies: gcra({ limit: 1, periodMs: 1000 }), clock, signal: controller.signal },
    );
    await work();
    const waiting = work();
    await flush();
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    await expect(work()).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    clock.advance(5000);
    expect(runs).toBe(1);
  });

  it('a timeout per call rejects with ERR_TIMEOUT without running the function', async () => {
    const clock = manualClock({ startMs: 0 });
    let runs = 0;
    const work = throttle(
      async () => {
        runs++;
      },
      { policies: gcra({ limit: 1, periodMs: 1000 }), clock, timeoutMs: 500 },
    );
    await work();
    await expect(work()).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    expect(runs).toBe(1);
  });

  it("passes the function's errors and `this` through unchanged", async () => {
    const clock = manualClock({ startMs: 0 });
    const boom = new Error('boom');
    const fail = throttle(
      async () => {
        throw boom;
      },
      { policies: gcra({ limit: 5, periodMs: 1000 }), clock },
    );
    await expect(fail()).rejects.toBe(boom);
    const client = {
      base: 'https://example.test',
      get: throttle(
        async function (this: { base: string }, path: string) {
          return `${this.base}${path}`;
        },
        { policies: gcra({ limit: 5, periodMs: 1000 }), clock },
      ),
    };
    expect(await client.get('/x')).toBe('https://example.test/x');
  });

  it('validates its options, naming them', () => {
    const policies = gcra({ limit: 1, periodMs: 1000 });
    const limiter = createLimiter({ policies });
    const cases: [unknown, unknown, string][] = [
      [() => 1, {}, 'limiter'],
      [() => 1, { limiter: {} }, 'limiter'],
      [() => 1, { limiter, policies }, 'policies'],
      [() => 1, { policies, maxQueue: -1 }, 'maxQueue'],
      [() => 1, { policies, maxQueue: 1.5 }, 'maxQueue'],
      [() => 1, { policies, timeoutMs: Number.NaN }, 'timeoutMs'],
      [() => 1, { policies, key: 5 }, 'key'],
      [() => 1, { policies, cost: 'x' }, 'cost'],
      [() => 1, { policies, signal: {} }, 'signal'],
      ['nope', { policies }, 'fn'],
    ];
    for (const [fn, options, option] of cases) {
      expect(() => throttle(fn as never, options as never)).toThrow(expect.objectContaining({ option }));
    }
  });
});
