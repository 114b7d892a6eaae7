// Settling across a fleet: limiters that share `settleSecret` verify each other's settlements, and with
// `settleOnce: 'store'` a decision settles once between all of them, whichever one is sent it (a replay
// to another process, or to a limiter made again after a reload). `charge` charges a debt past the
// limit and is refused, like every input, before any store call.

import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createLimiter, type Decision, gcra, isFloodgateError, memoryStore } from '../../src/index.js';
import { encodeKey, storageKey } from '../../src/keys.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { connectSingle } from '../stores/redis/clients.js';
import { redisAvailable, requireServer } from '../stores/redis/servers.js';

const policy = gcra({ limit: 10, periodMs: 1000 });
const SECRET = 'k'.repeat(32);

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!isFloodgateError(error)) throw new Error(`expected a typed refusal, got ${String(error)}`);
  return `${error.code} ${error.option}`;
}

describe('settling across limiters that share a secret', () => {
  it('a settlement verifies on another limiter with the same secret, not on one with another', async () => {
    const store = memoryStore();
    const clock = manualClock({ startMs: 1e6 });
    const a = createLimiter({ store, clock, policies: policy, settleSecret: SECRET });
    const b = createLimiter({ store, clock, policies: policy, settleSecret: SECRET });
    const c = createLimiter({ store, clock, policies: policy, settleSecret: 'x'.repeat(32) });
    const decision = await a.limit('k', { cost: 10, settle: true });
    expect(await refusal(c.settle('k', decision, { cost: 0 }))).toBe('ERR_INVALID_OPTION decision');
    expect(await b.settle('k', decision, { cost: 0 })).toBe(true);
    // The 10 units came back: the key is untouched.
    expect((await a.check('k', { cost: 10 })).allowed).toBe(true);
  });

  it('ids of limiters sharing a secret do not collide', async () => {
    const store = memoryStore();
    const a = createLimiter({ store, policies: policy, settleSecret: SECRET });
    const b = createLimiter({ store, policies: policy, settleSecret: SECRET });
    const da = await a.limit('k', { cost: 1, settle: true });
    const db = await b.limit('k', { cost: 1, settle: true });
    expect(da.settlement?.id).not.toBe(db.settlement?.id);
    expect(da.settlement?.id.length).toBeLessThanOrEqual(16);
    // Each settles once on the other: one limiter's settled id never refuses another's.
    expect(await b.settle('k', da, { cost: 0 })).toBe(true);
    expect(await b.settle('k', db, { cost: 0 })).toBe(true);
  });

  it("with settleOnce: 'store', a replay to another limiter is refused; with 'limiter' it is not", async () => {
    for (const settleOnce of ['store', 'limiter'] as const) {
      const store = memoryStore();
      const clock = manualClock({ startMs: 1e6 });
      const make = () => createLimiter({ store, clock, policies: policy, settleSecret: SECRET, settleOnce });
      const [a, b, c] = [make(), make(), make()];
      const decision = await a.limit('k', { cost: 10, settle: true });
      expect(await b.settle('k', decision, { cost: 0 })).toBe(true);
      const replay = c.settle('k', structuredClone(decision), { cost: 0 });
      if (settleOnce === 'store') {
        expect(await refusal(replay)).toBe('ERR_INVALID_OPTION decision');
        // Given back once only: 10 units spent elsewhere stay spent.
        await a.limit('k', { cost: 10 });
        expect((await a.check('k', { cost: 1 })).allowed).toBe(false);
      } else {
        // The documented limit of 'limiter': another limiter does not know the decision was settled.
        expect(await replay).toBe(true);
      }
    }
  });

  it("settleOnce: 'store' keeps an id until its settlement expires, then forgets it", async () => {
    const store = memoryStore();
    const clock = manualClock({ startMs: 1e6 });
    const limiter = createLimiter({ store, clock, policies: policy, settleOnce: 'store', settleWithinMs: 1000 });
    const decision = await limiter.limit('k', { cost: 5, settle: true });
    expect(await limiter.settle('k', decision, { cost: 0 })).toBe(true);
    clock.advance(1001);
    // Expired: a settle gives nothing back and the store's id is gone with its window.
    expect(await limiter.settle('k', decision, { cost: 0 })).toBe(false);
  });

  it('a bad secret or settleOnce is refused naming the option, and the secret is never shown', () => {
    for (const settleSecret of ['short', 'y'.repeat(1025), 42, null]) {
      let error: unknown;
      try {
        createLimiter({ policies: policy, settleSecret: settleSecret as string });
      } catch (e) {
        error = e;
      }
      expect(isFloodgateError(error) && error.option).toBe('settleSecret');
      expect((error as Error).message).not.toContain('short');
    }
    expect(() => createLimiter({ policies: policy, settleOnce: 'fleet' as 'store' })).toThrow(/settleOnce/);
  });
});

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

describe.skipIf(!redisUp)("settleOnce: 'store' on Redis: two processes' limiters on their own connections", () => {
  it('a decision settles once between them; the id leaves Redis when its settlement expires', async () => {
    const [one, two] = [await connectSingle('ioredis'), await connectSingle('ioredis')];
    try {
      const prefix = uniquePrefix('settle-once');
      const make = (client: typeof one.client) =>
        createLimiter({
          store: redisStore({ client }),
          prefix,
          policies: policy,
          settleSecret: SECRET,
          settleOnce: 'store',
          settleWithinMs: 60_000,
        });
      const [a, b] = [make(one.client), make(two.client)];
      const decision = await a.limit('k', { cost: 10, settle: true });
      const outcomes = await Promise.allSettled([
        b.settle('k', structuredClone(decision), { cost: 0 }),
        a.settle('k', structuredClone(decision), { cost: 0 }),
        b.settle('k', structuredClone(decision), { cost: 0 }),
      ]);
      expect(outcomes.filter((o) => o.status === 'fulfilled' && o.value === true)).toHaveLength(1);
      expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(2);
      expect((await a.check('k', { cost: 10 })).allowed).toBe(true);
      await a.limit('k', { cost: 10 });
      expect((await a.check('k', { cost: 1 })).allowed).toBe(false);
      // The id is held under one key that expires with the settlement (60 s here).
      const raw = new Redis({ host: '127.0.0.1', port: 6379 });
      try {
        const id = (decision.settlement as { id: string }).id;
        const ttl = await raw.pttl(storageKey(prefix, encodeKey(`\0settled:${id}`), 'settled-once'));
        expect(ttl).toBeGreaterThan(50_000);
        expect(ttl).toBeLessThanOrEqual(60_000);
      } finally {
        raw.disconnect();
      }
    } finally {
      await one.close();
      await two.close();
    }
  });
});

describe('limiter.charge', () => {
  it('charges past the limit as a debt the next calls wait for, admitting nothing', async () => {
    const clock = manualClock({ startMs: 1e6 });
    const limiter = createLimiter({ store: memoryStore(), clock, policies: policy });
    await limiter.charge('k', { cost: 25 });
    // 25 units at 10 a second: 2.5 s owed; a unit fits once at most the burst (1 s) less its own 0.1 s is
    // owed: after 1.6 s.
    const denied = await limiter.check('k');
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBe(1600);
    clock.advance(1600);
    expect((await limiter.check('k')).allowed).toBe(true);
    // The synchronous twin charges the same debt.
    limiter.chargeSync('s', { cost: 25 });
    expect(limiter.checkSync('s').retryAfterMs).toBe(1600);
  });

  it('refuses a bad cost, a policy that cannot settle and a bad key before any store call', async () => {
    let calls = 0;
    const inner = memoryStore();
    const store = {
      ...inner,
      name: 'counted',
      hasOwnClock: false,
      decide: (r: Parameters<typeof inner.decide>[0]) => {
        calls++;
        return inner.decide(r);
      },
      settle: (r: Parameters<typeof inner.settle>[0]) => {
        calls++;
        return inner.settle(r);
      },
    };
    const limiter = createLimiter({ store, policies: policy });
    for (const cost of [-1, Number.NaN, Number.POSITIVE_INFINITY, '5', 2 ** 60, 1e-12]) {
      expect(await refusal(limiter.charge('k', { cost: cost as number }))).toMatch(/^ERR_INVALID_COST/);
    }
    const { fixedWindow } = await import('../../src/index.js');
    expect(await refusal(limiter.charge('k', { cost: 1, policies: fixedWindow({ limit: 1, windowMs: 1000 }) }))).toBe(
      'ERR_INVALID_OPTION policies',
    );
    expect(await refusal(limiter.charge(42 as unknown as string, { cost: 1 }))).toMatch(/^ERR_INVALID_KEY/);
    expect(await refusal(limiter.charge('k', null as unknown as { cost: number }))).toBe('ERR_INVALID_OPTION options');
    expect(calls).toBe(0);
    const d: Decision = await limiter.limit('k');
    expect(d.allowed).toBe(true);
  });
});
