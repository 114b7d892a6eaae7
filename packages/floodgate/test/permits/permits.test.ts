import { describe, expect, it } from 'vitest';
import {
  concurrency,
  createPermits,
  isFloodgateError,
  MAX_PERMIT_LIMIT,
  memoryPermitStore,
  type PermitDecision,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

function setup(limit = 3, leaseMs = 1000) {
  const clock = manualClock();
  const store = memoryPermitStore({ clock });
  const permits = createPermits({ store, policy: concurrency({ limit, leaseMs }), clock });
  return { clock, store, permits };
}

function errorOf(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error('did not throw');
}

/** Lets the clock's woken sleepers run their callbacks. */
function tick(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('did not reject');
    },
    (error: unknown) => error,
  );
}

describe('concurrency()', () => {
  it('is plain frozen data with a default name', () => {
    const policy = concurrency({ limit: 2, leaseMs: 30_000 });
    expect(policy).toEqual({
      algorithm: 'concurrency',
      name: 'concurrency',
      limit: 2,
      leaseMs: 30_000,
      maxQueue: 1000,
    });
    expect(Object.isFrozen(policy)).toBe(true);
    expect(structuredClone(policy)).toEqual(policy);
  });

  it.each([
    [{ limit: 0, leaseMs: 1000 }, 'limit', 0],
    [{ limit: 1.5, leaseMs: 1000 }, 'limit', 1.5],
    [{ limit: MAX_PERMIT_LIMIT + 1, leaseMs: 1000 }, 'limit', MAX_PERMIT_LIMIT + 1],
    [{ limit: Number.NaN, leaseMs: 1000 }, 'limit', Number.NaN],
    [{ limit: 2, leaseMs: 0 }, 'leaseMs', 0],
    [{ limit: 2, leaseMs: 2 ** 31 }, 'leaseMs', 2 ** 31],
    [{ limit: 2, leaseMs: '100' }, 'leaseMs', '100'],
    [{ limit: 2, leaseMs: 100, name: 'Bad Name' }, 'name', 'Bad Name'],
  ])('refuses %j with ERR_INVALID_POLICY naming the option and the value', (options, option, value) => {
    const error = errorOf(() => concurrency(options as never));
    expect(error).toMatchObject({ code: 'ERR_INVALID_POLICY', option });
    expect((error as Error).message).toContain(String(value));
  });

  it('refuses an unknown option', () => {
    expect(errorOf(() => concurrency({ limit: 1, leaseMs: 1, burst: 2 } as never))).toMatchObject({
      code: 'ERR_INVALID_POLICY',
      option: 'burst',
      unknownOption: true,
    });
  });
});

describe('permits on the memory store, with a manual clock', () => {
  it('grants up to the limit in summed costs, then refuses with the time until enough leases run out', async () => {
    const { clock, permits } = setup(3, 1000);
    const a = await permits.limit('k', { cost: 2 });
    expect(a).toMatchObject({ allowed: true, inFlight: 2, remaining: 1, retryAfterMs: 0, resetAfterMs: 1000 });
    clock.advance(100);
    const b = await permits.limit('k');
    expect(b).toMatchObject({ allowed: true, inFlight: 3, remaining: 0 });
    const c = await permits.limit('k', { cost: 2 });
    // 2 more need a's 2 back: a runs out at 1000 ms, 900 ms from now.
    expect(c).toMatchObject({ allowed: false, reason: 'limit', inFlight: 3, retryAfterMs: 900, resetAfterMs: 1000 });
    expect(c.permit).toBeUndefined();
    // Another key is independent.
    expect((await permits.limit('other', { cost: 3 })).allowed).toBe(true);
  });

  it('a cost above the limit is exceeds-capacity, retryAfterMs Infinity, and changes nothing', async () => {
    const { permits, store } = setup(3);
    const d = await permits.limit('k', { cost: 4 });
    expect(d).toMatchObject({ allowed: false, reason: 'exceeds-capacity', retryAfterMs: Number.POSITIVE_INFINITY });
    expect(store.size).toBe(0);
  });

  it('frees an expired lease at its expiry, not a microsecond before', async () => {
    const { clock, permits } = setup(1, 1000);
    expect((await permits.limit('k')).allowed).toBe(true);
    clock.advanceUs(999_999);
    expect((await permits.limit('k')).allowed).toBe(false);
    clock.advanceUs(1);
    expect((await permits.limit('k')).allowed).toBe(true);
  });

  it('release is idempotent and frees exactly its own cost', async () => {
    const { permits } = setup(3);
    const a = (await permits.limit('k', { cost: 2 })).permit;
    const b = (await permits.limit('k')).permit;
    expect(await a?.release()).toBe(true);
    expect(await a?.release()).toBe(true); // the same answer: the first call ended it
    expect((await permits.limit('k', { cost: 3 })).allowed).toBe(false);
    const d = await permits.limit('k', { cost: 2 });
    expect(d).toMatchObject({ allowed: true, inFlight: 3 });
    expect(await b?.release()).toBe(true);
    expect(await permits.release('k', (b as { leaseId: string }).leaseId)).toBe(false);
  });

  it('refresh extends a live lease and never takes back one that ran out', async () => {
    const { clock, permits } = setup(1, 1000);
    const permit = (await permits.limit('k')).permit;
    clock.advance(900);
    expect(await permit?.refresh()).toBe(true);
    clock.advance(900); // 1800 ms: alive thanks to the refresh (until 1900)
    expect((await permits.limit('k')).allowed).toBe(false);
    expect(permit?.signal.aborted).toBe(false);
    clock.advance(100); // 1900: expired
    await tick();
    expect(permit?.signal.aborted).toBe(true);
    expect(await permit?.refresh()).toBe(false);
    // Also by id, from "another process": refused, and the key is not taken.
    expect(await permits.refresh('k', (permit as { leaseId: string }).leaseId)).toBe(false);
    const next = await permits.limit('k');
    expect(next.allowed).toBe(true);
  });

  it('a refresh refused by the store aborts the signal with ERR_LEASE_LOST', async () => {
    const { clock, permits } = setup(1, 1000);
    const permit = (await permits.limit('k')).permit;
    if (permit === undefined) throw new Error('no permit');
    // Released elsewhere (e.g. by id after a crash report): the holder learns it at its next refresh.
    expect(await permits.release('k', permit.leaseId)).toBe(true);
    clock.advance(10);
    expect(await permit.refresh()).toBe(false);
    expect(permit.signal.aborted).toBe(true);
    expect(permit.signal.reason).toMatchObject({ code: 'ERR_LEASE_LOST' });
    expect(isFloodgateError(permit.signal.reason)).toBe(true);
  });

  it('the signal aborts when the lease runs out, and not before', async () => {
    const { clock, permits } = setup(1, 1000);
    const permit = (await permits.limit('k')).permit;
    clock.advance(999);
    await tick();
    expect(permit?.signal.aborted).toBe(false);
    clock.advance(1);
    await tick();
    expect(permit?.signal.aborted).toBe(true);
    expect(permit?.signal.reason).toMatchObject({ code: 'ERR_LEASE_LOST' });
  });

  it('a released permit never aborts its signal', async () => {
    const { clock, permits } = setup(1, 1000);
    const permit = (await permits.limit('k')).permit;
    await permit?.release();
    clock.advance(5000);
    await tick();
    expect(permit?.signal.aborted).toBe(false);
    expect(clock.pending).toBe(0);
  });

  it('fences strictly increase per key, across releases, expiries and a forgotten key', async () => {
    const { clock, permits, store } = setup(2, 1000);
    const fences: number[] = [];
    for (let i = 0; i < 50; i++) {
      const d: PermitDecision = await permits.limit('k');
      if (d.permit !== undefined) {
        fences.push(d.permit.fence);
        if (i % 3 === 0) await d.permit.release();
      }
      if (i % 7 === 0) clock.advance(i % 2 === 0 ? 0 : 2000);
    }
    clock.advance(10_000);
    await permits.limit('x'); // sweeps
    await permits.limit('y');
    expect(store.size).toBeLessThanOrEqual(3);
    fences.push(((await permits.limit('k')).permit as { fence: number }).fence);
    expect(fences.length).toBeGreaterThan(10);
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1] as number);
  });

  it('withPermit runs the function holding a permit and releases it in finally', async () => {
    const { permits } = setup(1, 1000);
    const done = await permits.withPermit('k', async (signal, permit) => {
      expect(signal.aborted).toBe(false);
      expect((await permits.limit('k')).allowed).toBe(false);
      return permit.fence;
    });
    expect(done.allowed).toBe(true);
    expect(done.allowed && typeof done.value).toBe('number');
    const failed = permits.withPermit('k', () => {
      throw new Error('boom');
    });
    expect(await rejectionOf(failed)).toMatchObject({ message: 'boom' });
    expect((await permits.limit('k')).allowed).toBe(true);
    const refused = await permits.withPermit('k', () => 1);
    expect(refused).toMatchObject({ allowed: false, decision: { allowed: false, reason: 'limit' } });
  });

  it('await using releases the permit', async () => {
    const { permits } = setup(1, 1000);
    {
      const permit = (await permits.limit('k')).permit;
      if (permit === undefined) throw new Error('no permit');
      await permit[Symbol.asyncDispose]();
    }
    expect((await permits.limit('k')).allowed).toBe(true);
  });

  it('a decision is data: JSON keeps its fields and the permit’s', async () => {
    const { permits } = setup(1, 1000);
    const d = await permits.limit('k');
    const json = JSON.parse(JSON.stringify(d)) as Record<string, unknown>;
    expect(json).toMatchObject({ allowed: true, limit: 1, inFlight: 1, remaining: 0, policy: 'concurrency' });
    expect(json.permit).toMatchObject({ key: 'k', cost: 1, fence: d.permit?.fence, leaseId: d.permit?.leaseId });
  });
});

describe('permits: hostile input', () => {
  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, '1', null])(
    'refuses cost %s with ERR_INVALID_COST before the store',
    async (cost) => {
      const { permits, store } = setup(3);
      const error = await rejectionOf(permits.limit('k', { cost: cost as number }));
      expect(error).toMatchObject({ code: 'ERR_INVALID_COST', option: 'cost' });
      expect(store.size).toBe(0);
    },
  );

  it('a huge whole cost is exceeds-capacity', async () => {
    const { permits } = setup(3);
    expect(await permits.limit('k', { cost: Number.MAX_SAFE_INTEGER })).toMatchObject({
      allowed: false,
      reason: 'exceeds-capacity',
    });
  });

  it('a forged or malformed lease id releases and refreshes nothing of anyone else', async () => {
    const { clock, permits } = setup(2, 1000);
    const held = (await permits.limit('k', { cost: 2 })).permit;
    for (const forged of ['AAAAAAAAAAAAAAAAAAAAAA', held?.leaseId.replace(/^./, (c) => (c === 'A' ? 'B' : 'A'))]) {
      expect(await permits.release('k', forged as string)).toBe(false);
      expect(await permits.refresh('k', forged as string)).toBe(false);
    }
    // Its own id under another key is another lease: nothing.
    expect(await permits.release('other', held?.leaseId as string)).toBe(false);
    for (const bad of ['', 'x', 'a'.repeat(23), 'AAAAAAAAAAAAAAAAAAAA{}', 42, null]) {
      expect(await rejectionOf(permits.release('k', bad as string))).toMatchObject({
        code: 'ERR_INVALID_OPTION',
        option: 'leaseId',
      });
      expect(await rejectionOf(permits.refresh('k', bad as string))).toMatchObject({ option: 'leaseId' });
    }
    expect((await permits.limit('k')).allowed).toBe(false);
    clock.advance(999);
    expect((await permits.limit('k')).allowed).toBe(false);
    expect(held?.signal.aborted).toBe(false);
  });

  it('refuses bad keys and options with typed errors', async () => {
    const { permits } = setup();
    expect(await rejectionOf(permits.limit('' as string))).toMatchObject({ code: 'ERR_INVALID_KEY' });
    expect(await rejectionOf(permits.limit(1 as unknown as string))).toMatchObject({ code: 'ERR_INVALID_KEY' });
    expect(
      errorOf(() => createPermits({ store: {} as never, policy: concurrency({ limit: 1, leaseMs: 1 }) })),
    ).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'store' });
    expect(
      errorOf(() => createPermits({ store: memoryPermitStore(), policy: { algorithm: 'gcra' } as never })),
    ).toMatchObject({ code: 'ERR_INVALID_POLICY', option: 'policy' });
  });

  it('a key with braces or a long key cannot reach another key’s leases', async () => {
    const { permits } = setup(1);
    expect((await permits.limit('a}:concurrency:l{')).allowed).toBe(true);
    expect((await permits.limit('a')).allowed).toBe(true);
    expect((await permits.limit('x'.repeat(5000))).allowed).toBe(true);
    expect((await permits.limit(`${'x'.repeat(4999)}y`)).allowed).toBe(true);
  });

  it('bounds the keys held: a new key beyond maxKeys is ERR_STORE_FULL, and idle keys leave', async () => {
    const clock = manualClock();
    const store = memoryPermitStore({ clock, maxKeys: 4 });
    const permits = createPermits({ store, policy: concurrency({ limit: 1, leaseMs: 1000 }), clock });
    for (const key of ['a', 'b', 'c', 'd']) expect((await permits.limit(key)).allowed).toBe(true);
    expect(await rejectionOf(permits.limit('e'))).toMatchObject({ code: 'ERR_STORE_FULL' });
    clock.advance(1000);
    // Each call looks at two keys: the expired ones leave in a few calls.
    for (let i = 0; i < 4; i++) await permits.limit('a').then((d) => d.permit?.release());
    expect(store.size).toBeLessThanOrEqual(2);
    expect((await permits.limit('e')).allowed).toBe(true);
  });
});

describe('permits: a failing store', () => {
  it('a release that fails rejects with a FloodgateError and may be tried again', async () => {
    const clock = manualClock();
    const inner = memoryPermitStore({ clock });
    let fail = false;
    const store = {
      name: 'flaky',
      acquire: inner.acquire.bind(inner),
      refresh: inner.refresh.bind(inner),
      release: (key: string, args: Parameters<typeof inner.release>[1]) => {
        if (fail) throw new Error('connection reset');
        return inner.release(key, args);
      },
    };
    const permits = createPermits({ store, policy: concurrency({ limit: 1, leaseMs: 1000 }), clock });
    const permit = (await permits.limit('k')).permit;
    fail = true;
    expect(await rejectionOf(permit?.release() as Promise<boolean>)).toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    fail = false;
    expect(await permit?.release()).toBe(true);
    expect((await permits.limit('k')).allowed).toBe(true);
  });
});
