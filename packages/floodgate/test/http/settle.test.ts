import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpRateLimiter, type RequestAccess } from '../../src/http/index.js';
import { createLimiter, fixedWindow, gcra, memoryStore } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';
import { type Harness, harnesses, type NeutralOptions, type Running, SEEN_REMAINING, type View } from './harness.js';
import { collectWarnings } from './warnings.js';
import { Watched } from './watched-store.js';

// The `settle` option: a request's cost is an estimate (here the `x-estimate` header), and once its
// response is over it is charged what `settle` returns (here the `x-actual` header, standing for what a
// response reported), through every adapter over real HTTP.

// 10 units a minute: one every 6 s, so nothing drains while a test runs on the manual clock.
const tokens = gcra({ limit: 10, periodMs: 60_000, name: 'tokens' });

function app(store: Watched, clock: ReturnType<typeof manualClock>): NeutralOptions {
  return {
    clock,
    store,
    policies: tokens,
    cost: (request: View) => Number(request.header('x-estimate') ?? 1),
    settle: (request: View) => Number(request.header('x-actual')),
  };
}

async function call(
  server: Running,
  estimate: number,
  actual: number,
): Promise<{ status: number; remaining: string | null }> {
  const response = await fetch(`${server.url}/tokens`, {
    headers: { 'x-estimate': String(estimate), 'x-actual': String(actual) },
  });
  await response.text();
  return { status: response.status, remaining: response.headers.get(SEEN_REMAINING) };
}

describe.each(harnesses.map((h) => [h.name, h] as [string, Harness]))('%s: settle', (_name, harness) => {
  const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
  const store = new Watched(memoryStore());
  let server: Running;
  beforeAll(async () => {
    const limit = app(store, clock);
    server = await harness.start({ global: limit, routes: [{ method: 'GET', path: '/tokens', limit }] }, '127.0.0.1');
  });
  afterAll(async () => {
    await server?.close();
  });

  it('charges what a response really cost: more than the estimate is a debt, less comes back', async () => {
    // Estimated 2, cost 8: the key owes 8 once the response is over.
    expect(await call(server, 2, 8)).toEqual({ status: 200, remaining: '8' });
    await store.refunded(1);
    // Owing 8, an estimate of 1 fits (1 left after it); it cost nothing: it comes back.
    expect(await call(server, 1, 0)).toEqual({ status: 200, remaining: '1' });
    await store.refunded(2);
    // Owing 8: an estimate of 3 does not fit.
    expect((await call(server, 3, 3)).status).toBe(429);
    // An estimate of 2 does, and leaves nothing.
    expect(await call(server, 2, 2)).toEqual({ status: 200, remaining: '0' });
    expect((await call(server, 1, 1)).status).toBe(429);
    // A debt past the limit: 10 owed, settled at 30.
    clock.advance(60_000);
    const debt = await call(server, 10, 30);
    expect(debt.status).toBe(200);
    await store.refunded(3);
    // 30 owed: the next unit fits once 21 have drained (126 s), not after one minute.
    clock.advance(120_000);
    expect((await call(server, 1, 1)).status).toBe(429);
    clock.advance(6_000);
    expect((await call(server, 1, 1)).status).toBe(200);
  });
});

/** Requests as plain objects: the core needs only a peer address and headers. */
interface FakeRequest {
  peer?: string;
  headers?: Record<string, string>;
}
const access: RequestAccess<FakeRequest> = {
  peer: (request) => request.peer,
  header: (request, name) => request.headers?.[name],
};
const client = { peer: '192.0.2.1' };

describe('settle in the core', () => {
  it('is refused with a policy that cannot settle, with skipFailedRequests, and when not a function', () => {
    const window = fixedWindow({ limit: 2, windowMs: 60_000 });
    for (const options of [
      { policies: window, settle: () => 1 },
      { policies: tokens, settle: () => 1, skipFailedRequests: true },
      { policies: tokens, settle: 'tokens' as never },
    ]) {
      expect(() => createHttpRateLimiter(options, access)).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'settle' }),
      );
    }
  });

  it('a response cut short stays charged its estimate, never zero', async () => {
    const limiter = createLimiter({ policies: tokens, clock: manualClock() });
    const decide = createHttpRateLimiter<FakeRequest>({ limiter, cost: 4, settle: () => 0 }, access);
    const outcome = await decide(client);
    expect(outcome?.settle).toBeDefined();
    await outcome?.settle?.(undefined);
    // A later call of the hook does nothing either.
    await outcome?.settle?.(200);
    expect((await limiter.status('192.0.2.1')).remaining).toBe(6);
  });

  it('a settle that throws or returns no valid cost leaves the estimate, with one warning', async () => {
    const warnings = collectWarnings();
    try {
      const limiter = createLimiter({ policies: tokens, clock: manualClock() });
      let answer: unknown = Number.NaN;
      const decide = createHttpRateLimiter<FakeRequest>(
        {
          limiter,
          cost: 3,
          settle: () => {
            if (answer === 'throw') throw new Error('no usage in the response');
            return answer as number;
          },
        },
        access,
      );
      await (await decide(client))?.settle?.(200);
      answer = 'throw';
      await (await decide(client))?.settle?.(200);
      answer = Promise.reject(new Error('rejected'));
      await (await decide(client))?.settle?.(200);
      expect((await limiter.status('192.0.2.1')).remaining).toBe(1);
      await warnings.flush();
      expect(warnings.codes()).toEqual(['FLOODGATE_SETTLE_FAILED']);
    } finally {
      warnings.stop();
    }
  });

  it('a denied request has nothing to settle', async () => {
    const limiter = createLimiter({ policies: tokens, clock: manualClock() });
    const decide = createHttpRateLimiter<FakeRequest>({ limiter, cost: 11, settle: () => 0 }, access);
    const outcome = await decide(client);
    expect(outcome?.allowed).toBe(false);
    expect(outcome?.settle).toBeUndefined();
  });
});
