import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  concurrency,
  createLimiter,
  createPermits,
  type Decision,
  FloodgateError,
  gcra,
  isFloodgateError,
  memoryPermitStore,
  memoryStore,
  type PermitStore,
  type Store,
} from '../../src/index.js';
import { fromIoredis, redisPermitStore, redisStore } from '../../src/stores/redis/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { redisAvailable, requireServer } from '../stores/redis/servers.js';

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

/** The two ways a limiter decides: a permit store of its own (two calls), or the rate store's (one call). */
type Path = 'two calls' | 'one call';
const PATHS: readonly Path[] = ['two calls', 'one call'];

/** 3 a minute and at most 2 in flight, on the memory stores and one manual clock. */
function setup(path: Path, rate = 3, inFlight = 2) {
  const clock = manualClock();
  const store = memoryStore();
  const permits = path === 'one call' ? store.permits : memoryPermitStore({ clock });
  const limiter = createLimiter({
    policies: [
      gcra({ limit: rate, periodMs: 60_000, name: 'gcra' }),
      concurrency({ limit: inFlight, leaseMs: 10_000 }),
    ],
    store,
    ...(path === 'one call' ? {} : { permits }),
    clock,
  });
  return { clock, permits, limiter };
}

async function rejectionOf(promise: Promise<unknown>): Promise<FloodgateError> {
  const error = await promise.then(
    () => {
      throw new Error('did not reject');
    },
    (e: unknown) => e,
  );
  if (!(error instanceof FloodgateError)) throw error;
  return error;
}

function errorOf(run: () => unknown): FloodgateError {
  try {
    run();
  } catch (error) {
    if (error instanceof FloodgateError) return error;
    throw error;
  }
  throw new Error('did not throw');
}

describe.each(PATHS)('a limiter with a concurrency policy beside its rate policies (%s)', (path) => {
  it('admits a call only when both admit it, and the decision holds the permit as data', async () => {
    const { limiter } = setup(path);
    const d = await limiter.limit('u');
    expect(d.allowed).toBe(true);
    expect(d.policies.map((p) => p.policy)).toEqual(['gcra', 'concurrency']);
    expect(d.policies[1]).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
    expect(d.permit).toMatchObject({ policy: 'concurrency', key: 'u', cost: 1, leaseMs: 10_000 });
    expect(d.permit?.leaseId).toMatch(/^[A-Za-z0-9_-]{22}$/);
    // Plain data: a spread, a structured clone and JSON keep every field.
    expect({ ...d }).toEqual(d);
    expect(structuredClone(d)).toEqual(d);
    expect(JSON.parse(JSON.stringify(d))).toEqual(d);
    // The live handle is reachable from the decision and from any copy of it.
    const permit = limiter.permit(structuredClone(d));
    expect(permit).toBe(limiter.permit(d));
    expect(permit?.fence).toBe(d.permit?.fence);
    expect(permit?.signal.aborted).toBe(false);
  });

  it('refuses the third call in flight by the concurrency policy, charging no rate', async () => {
    const { limiter } = setup(path, 10, 2);
    await limiter.limit('u');
    const second = await limiter.limit('u');
    const before = (await limiter.status('u')).remaining;
    const third = await limiter.limit('u');
    expect(third).toMatchObject({ allowed: false, policy: 'concurrency', reason: 'limit', limit: 2 });
    expect(third.permit).toBeUndefined();
    expect(third.policies[1]).toMatchObject({ allowed: false, remaining: 0 });
    // The rate entry is there, looked at but not charged.
    expect(third.policies[0]).toMatchObject({ policy: 'gcra', allowed: true });
    expect((await limiter.status('u')).remaining).toBe(before);
    // A release lets the next call in.
    expect(await limiter.release(second)).toBe(true);
    expect((await limiter.limit('u')).allowed).toBe(true);
  });

  it('takes no permit for a call the rate policies deny (the permit granted first goes back)', async () => {
    const { limiter } = setup(path, 2, 5);
    const a = await limiter.limit('u');
    const b = await limiter.limit('u');
    expect(a.allowed && b.allowed).toBe(true);
    const denied = await limiter.limit('u');
    expect(denied).toMatchObject({ allowed: false, policy: 'gcra', reason: 'limit' });
    expect(denied.permit).toBeUndefined();
    // In flight after the denial: a and b only, 3 of 5 left.
    expect(denied.policies[1]).toMatchObject({ policy: 'concurrency', allowed: true, remaining: 3 });
    await limiter.release(a);
    await limiter.release(b);
    // Every permit came back: 5 fit again at once (the rate allowing them after a minute).
    const { limiter: wide, clock } = setup(path, 100, 5);
    const held: Decision[] = [];
    for (let i = 0; i < 5; i++) held.push(await wide.limit('v'));
    expect(held.every((d) => d.allowed)).toBe(true);
    expect((await wide.limit('v')).allowed).toBe(false);
    clock.advance(1);
    for (const d of held) expect(await wide.release(d)).toBe(true);
  });

  it('never loses a permit on rate denials: after many denied calls every permit is free', async () => {
    const { limiter } = setup(path, 1, 3);
    const first = await limiter.limit('u');
    for (let i = 0; i < 50; i++) expect((await limiter.limit('u')).allowed).toBe(false);
    expect(await limiter.release(first)).toBe(true);
    // 3 permits free: the concurrency entry says so on the next (rate-denied) call.
    const next = await limiter.limit('u');
    expect(next.policies[1]?.remaining).toBe(3);
  });

  it('releases idempotently, from a copy of the decision too, and forgets the handle', async () => {
    const { limiter } = setup(path);
    const d = await limiter.limit('u');
    const copy = JSON.parse(JSON.stringify(d)) as Decision;
    expect(await limiter.release(copy)).toBe(true);
    expect(await limiter.release(d)).toBe(false);
    expect(limiter.permit(d)).toBeUndefined();
    expect(await limiter.release(await limiter.limit('other', { cost: 1 }))).toBe(true);
  });

  it('refreshes a live lease and aborts the signal of a lost one', async () => {
    const { limiter, clock } = setup(path);
    const d = await limiter.limit('u');
    const permit = limiter.permit(d);
    clock.advance(9_000);
    expect(await limiter.refresh(d)).toBe(true);
    clock.advance(9_000);
    expect(permit?.signal.aborted).toBe(false);
    clock.advance(1_001);
    await new Promise((resolve) => setImmediate(resolve));
    expect(permit?.signal.aborted).toBe(true);
    expect(limiter.permit(d)).toBeUndefined();
    expect(await limiter.refresh(d)).toBe(false);
  });

  it('works with a concurrency policy alone', async () => {
    const clock = manualClock();
    const limiter = createLimiter({
      policies: concurrency({ limit: 1, leaseMs: 1000 }),
      permits: memoryPermitStore({ clock }),
      clock,
    });
    expect(limiter.policies).toEqual([]);
    expect(limiter.concurrency).toMatchObject({ limit: 1 });
    const d = await limiter.limit('k');
    expect(d).toMatchObject({ allowed: true, policies: [{ policy: 'concurrency' }] });
    expect((await limiter.limit('k')).allowed).toBe(false);
    await limiter.release(d);
    expect((await limiter.limit('k')).allowed).toBe(true);
  });

  it('carries a settlement of the rate policies beside the permit', async () => {
    const { limiter } = setup(path);
    const d = await limiter.limit('u', { cost: 1, settle: true });
    expect(d.settlement).toBeDefined();
    expect(d.permit).toBeDefined();
    expect(await limiter.settle('u', d, { cost: 0 })).toBe(true);
  });

  it('applies the failure policy when the permit store fails', async () => {
    const failing: PermitStore = {
      name: 'failing',
      acquire() {
        throw new Error('down');
      },
      refresh() {
        throw new Error('down');
      },
      release() {
        throw new Error('down');
      },
    };
    const policies = [gcra({ limit: 5, periodMs: 1000 }), concurrency({ limit: 1, leaseMs: 1000 })];
    const thrown = await rejectionOf(createLimiter({ policies, permits: failing }).limit('k'));
    expect(isFloodgateError(thrown)).toBe(true);
    const open = await createLimiter({ policies, permits: failing, failure: 'open' }).limit('k');
    expect(open).toMatchObject({ allowed: true, reason: 'degraded' });
    expect(open.permit).toBeUndefined();
    const closed = createLimiter({ policies, permits: failing, failure: 'closed' });
    expect(await closed.limit('k')).toMatchObject({ allowed: false, reason: 'degraded' });
    // Closed charged no rate.
    expect((await closed.status('k')).remaining).toBe(5);
  });

  describe('refuses before any store call', () => {
    const policies = [gcra({ limit: 5, periodMs: 1000 }), concurrency({ limit: 2, leaseMs: 1000 })];
    it('a concurrency policy without a permit store, and a permit store without one', () => {
      // A store with no permit store of its own needs one given.
      const inner = memoryStore();
      const without: Store = {
        name: 'bare',
        hasOwnClock: false,
        decide: (request) => inner.decide(request),
        reset: (prefix, key, p) => inner.reset(prefix, key, p),
      };
      expect(errorOf(() => createLimiter({ policies, store: without })).option).toBe('permits');
      expect(errorOf(() => createLimiter({ policies, permits: {} as never })).option).toBe('permits');
      expect(
        errorOf(() => createLimiter({ policies: gcra({ limit: 1, periodMs: 1 }), permits: memoryPermitStore() }))
          .option,
      ).toBe('permits');
    });

    it('two concurrency policies, and a name shared with a rate policy', () => {
      const two = [concurrency({ limit: 1, leaseMs: 1 }), concurrency({ limit: 2, leaseMs: 1, name: 'b' })];
      expect(errorOf(() => createLimiter({ policies: two, permits: memoryPermitStore() })).option).toBe('policies[1]');
      const same = [gcra({ limit: 1, periodMs: 1, name: 'x' }), concurrency({ limit: 1, leaseMs: 1, name: 'x' })];
      expect(errorOf(() => createLimiter({ policies: same, permits: memoryPermitStore() })).code).toBe(
        'ERR_INVALID_POLICY',
      );
    });

    it.each([0, 0.5, -1, Number.NaN, '1', Number.POSITIVE_INFINITY])('cost %s', async (cost) => {
      let calls = 0;
      const store = memoryPermitStore();
      const counted: PermitStore = {
        name: 'counted',
        acquire: (k, a) => {
          calls++;
          return store.acquire(k, a);
        },
        refresh: (k, a) => store.refresh(k, a),
        release: (k, a) => store.release(k, a),
      };
      const limiter = createLimiter({ policies, permits: counted });
      const error = await rejectionOf(limiter.limit('k', { cost: cost as number }));
      expect(error.code).toBe('ERR_INVALID_COST');
      expect(error.option).toBe('cost');
      expect(calls).toBe(0);
    });

    it('a bad key, maxDelayMs, a bad decision, and the methods that cannot hold a permit', async () => {
      const limiter = createLimiter({ policies, permits: memoryPermitStore() });
      expect((await rejectionOf(limiter.limit('x'.repeat(100_000)))).code).toBe('ERR_INVALID_KEY');
      expect((await rejectionOf(limiter.limit('k', { maxDelayMs: 10 }))).option).toBe('maxDelayMs');
      expect((await rejectionOf(limiter.limit('k', { cost: 1, policies: 'x' as never }))).code).toBe(
        'ERR_INVALID_POLICY',
      );
      expect((await rejectionOf(limiter.release(null as never))).option).toBe('decision');
      expect((await rejectionOf(limiter.release({ permit: { key: 1 } } as never))).option).toBe('decision');
      expect((await rejectionOf(limiter.release({ permit: { key: 'k', leaseId: 'not an id' } } as never))).option).toBe(
        'leaseId',
      );
      expect(errorOf(() => limiter.limitSync('k')).option).toBe('policies');
      expect((await rejectionOf(limiter.acquire('k'))).option).toBe('policies');
    });
  });
});

describe.skipIf(!redisUp).each(PATHS)('a limiter with a concurrency policy on Redis (%s)', (path) => {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: false });
  afterAll(async () => {
    client.disconnect();
  });
  // On the one-call path the limiter keeps its permits in the store's own permit store.
  const ownOrNot = (p: Path) =>
    p === 'one call' ? {} : { permits: redisPermitStore({ client: fromIoredis(client) }) };

  it('holds at most the limit in flight across two limiters sharing the stores, and loses no permit', async () => {
    const prefix = uniquePrefix('conc');
    const make = () =>
      createLimiter({
        policies: [gcra({ limit: 1000, periodMs: 60_000 }), concurrency({ limit: 3, leaseMs: 30_000 })],
        store: redisStore({ client: fromIoredis(client) }),
        ...ownOrNot(path),
        prefix,
      });
    const limiters = [make(), make()];
    let inFlight = 0;
    let most = 0;
    const run = async (i: number) => {
      const limiter = limiters[i % 2] as (typeof limiters)[number];
      const d = await limiter.limit('shared');
      if (!d.allowed) return false;
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((resolve) => setImmediate(resolve));
      inFlight--;
      await limiter.release(d);
      return true;
    };
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => run(i)));
    expect(most).toBeLessThanOrEqual(3);
    expect(results.filter(Boolean).length).toBeGreaterThanOrEqual(3);
    // Nothing left in flight: three fit at once again.
    const again = await Promise.all(
      [0, 1, 2].map((i) => (limiters[i % 2] as (typeof limiters)[number]).limit('shared')),
    );
    expect(again.every((d) => d.allowed)).toBe(true);
    await Promise.all(again.map((d) => (limiters[0] as (typeof limiters)[number]).release(d)));
  });

  it('a rate denial on Redis takes no permit, and a concurrency refusal charges no rate', async () => {
    const prefix = uniquePrefix('conc');
    const limiter = createLimiter({
      policies: [gcra({ limit: 2, periodMs: 60_000, name: 'gcra' }), concurrency({ limit: 1, leaseMs: 30_000 })],
      store: redisStore({ client: fromIoredis(client) }),
      ...ownOrNot(path),
      prefix,
    });
    const held = await limiter.limit('k');
    const refused = await limiter.limit('k');
    expect(refused).toMatchObject({ allowed: false, policy: 'concurrency' });
    // The refusal charged nothing: one of the two rate units is left.
    expect((await limiter.status('k')).remaining).toBe(1);
    await limiter.release(held);
    const second = await limiter.limit('k');
    expect(second.allowed).toBe(true);
    await limiter.release(second);
    // The rate is spent now: a denied call takes the permit and gives it back before answering.
    const denied = await limiter.limit('k');
    expect(denied).toMatchObject({ allowed: false, policy: 'gcra' });
    expect(denied.policies[1]).toMatchObject({ policy: 'concurrency', remaining: 1 });
    const permits = createPermits({
      store: redisPermitStore({ client: fromIoredis(client) }),
      policy: concurrency({ limit: 1, leaseMs: 30_000 }),
      prefix,
    });
    const free = await permits.limit('k');
    expect(free.allowed).toBe(true);
    await free.permit?.release();
  });
});
