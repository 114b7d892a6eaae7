import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  type Decision,
  fixedWindow,
  gcra,
  isFloodgateError,
  memoryStore,
  type Store,
  tokenBucket,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

// 10 per second, burst 10: one unit every 100 ms.
const policy = gcra({ limit: 10, periodMs: 1000 });

function setup(store: Store = memoryStore()) {
  const clock = manualClock({ startMs: 1_000_000 });
  const limiter = createLimiter({ clock, store, policies: [policy] });
  return { clock, limiter };
}

async function refused(promise: Promise<unknown>): Promise<{ code: string; option: string | undefined }> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!isFloodgateError(error)) throw new Error(`expected a FloodgateError, got ${String(error)}`);
  return { code: error.code, option: error.option };
}

describe('limiter.settle', () => {
  it('charges the difference past the limit: a debt the next calls pay by waiting', async () => {
    const { clock, limiter } = setup();
    const decision = await limiter.limit('k', { cost: 2, settle: true });
    expect(decision.allowed).toBe(true);
    expect(decision.settlement).toMatchObject({ cost: 2, policies: [policy.name] });
    expect(await limiter.settle('k', decision, { cost: 25 })).toBe(true);
    // 25 units owed against a burst of 10: nothing passes until 15 units have drained (1.5 s).
    const next = await limiter.limit('k');
    expect(next.allowed).toBe(false);
    expect(next.retryAfterMs).toBe(1600);
    clock.advance(1599);
    expect((await limiter.limit('k')).allowed).toBe(false);
    clock.advance(1);
    expect((await limiter.limit('k')).allowed).toBe(true);
  });

  it('gives back what a smaller actual cost leaves', async () => {
    const { limiter } = setup();
    const decision = await limiter.limit('k', { cost: 10, settle: true });
    expect((await limiter.limit('k')).allowed).toBe(false);
    expect(await limiter.settle('k', decision, { cost: 4 })).toBe(true);
    expect((await limiter.check('k', { cost: 6 })).allowed).toBe(true);
    expect((await limiter.check('k', { cost: 7 })).allowed).toBe(false);
  });

  it('settles once: a second settle is refused before the store is asked, and gives nothing back', async () => {
    const { limiter } = setup();
    const decision = await limiter.limit('k', { cost: 10, settle: true });
    await limiter.settle('k', decision, { cost: 5 });
    expect(await refused(limiter.settle('k', decision, { cost: 0 }))).toEqual({
      code: 'ERR_INVALID_OPTION',
      option: 'decision',
    });
    // A copy of the decision is the same decision.
    expect(await refused(limiter.settle('k', structuredClone(decision), { cost: 0 }))).toMatchObject({
      option: 'decision',
    });
    expect((await limiter.check('k', { cost: 5 })).allowed).toBe(true);
    expect((await limiter.check('k', { cost: 6 })).allowed).toBe(false);
  });

  it('refuses a forged or altered settlement, and one for another key', async () => {
    const { limiter } = setup();
    const decision = await limiter.limit('k', { cost: 1, settle: true });
    const settlement = decision.settlement as NonNullable<Decision['settlement']>;
    for (const forged of [
      { ...decision, settlement: { ...settlement, cost: 10 } },
      { ...decision, settlement: { ...settlement, atUs: settlement.atUs + 1_000_000 } },
      { ...decision, settlement: { ...settlement, expiresAtMs: settlement.expiresAtMs + 1 } },
      { ...decision, settlement: { ...settlement, id: `${settlement.id}0` } },
      { ...decision, settlement: { ...settlement, signature: `${settlement.signature.slice(1)}A` } },
      { ...decision, settlement: { ...settlement, policies: ['other'] } },
      { ...decision, settlement: 'x' },
      { ...decision, settlement: null },
    ] as unknown as Decision[]) {
      expect(await refused(limiter.settle('k', forged, { cost: 0 }))).toEqual({
        code: 'ERR_INVALID_OPTION',
        option: 'decision',
      });
    }
    expect(await refused(limiter.settle('other', decision, { cost: 0 }))).toMatchObject({ option: 'decision' });
    // Another limiter (another secret) did not issue it either.
    const { limiter: another } = setup();
    expect(await refused(another.settle('k', decision, { cost: 0 }))).toMatchObject({ option: 'decision' });
    // Nothing came back: the key is still charged 1.
    expect((await limiter.check('k', { cost: 10 })).allowed).toBe(false);
  });

  it('refuses a cost that is not a finite number ≥ 0 before anything else', async () => {
    const { limiter } = setup();
    const decision = await limiter.limit('k', { cost: 1, settle: true });
    for (const cost of [Number.NaN, -1, Number.POSITIVE_INFINITY, 1e-12, 2 ** 54, '3', undefined]) {
      expect(await refused(limiter.settle('k', decision, { cost } as unknown as { cost: number }))).toEqual({
        code: 'ERR_INVALID_COST',
        option: 'cost',
      });
    }
    expect(await refused(limiter.settle('k', decision, null as unknown as { cost: number }))).toMatchObject({
      option: 'options',
    });
    // The refused calls did not settle it.
    expect(await limiter.settle('k', decision, { cost: 0 })).toBe(true);
  });

  it('has nothing to settle on a denial or without settle: true', async () => {
    const { limiter } = setup();
    const denied = await limiter.limit('k', { cost: 11, settle: true });
    expect(denied.allowed).toBe(false);
    expect(denied.settlement).toBeUndefined();
    expect(await limiter.settle('k', denied, { cost: 0 })).toBe(false);
    const plain = await limiter.limit('k');
    expect(plain.settlement).toBeUndefined();
    const checked = await limiter.check('k', { cost: 1, settle: true });
    expect(checked.settlement).toBeUndefined();
  });

  it('refuses settle: true under a policy that cannot be settled, naming it', async () => {
    const clock = manualClock();
    const window = fixedWindow({ limit: 5, windowMs: 1000 });
    const limiter = createLimiter({ clock, policies: [policy, window] });
    expect(await refused(limiter.limit('k', { settle: true }))).toEqual({
      code: 'ERR_INVALID_OPTION',
      option: 'settle',
    });
    expect(await refused(limiter.limit('k', { settle: 'yes' as unknown as boolean }))).toEqual({
      code: 'ERR_INVALID_OPTION',
      option: 'settle',
    });
    // A continuous token bucket is a meter.
    const bucket = tokenBucket({ capacity: 5, refillAmount: 1, refillIntervalMs: 100 });
    expect((await limiter.limit('k', { settle: true, policies: [bucket] })).settlement).toBeDefined();
  });

  it('past settleWithinMs charges a debt but gives nothing back, and forgets what it settled', async () => {
    const clock = manualClock({ startMs: 1_000_000 });
    const limiter = createLimiter({ clock, policies: [policy], settleWithinMs: 1000 });
    const small = await limiter.limit('a', { cost: 5, settle: true });
    const large = await limiter.limit('b', { cost: 1, settle: true });
    clock.advance(200);
    const settled = await limiter.limit('c', { cost: 1, settle: true });
    await limiter.settle('c', settled, { cost: 0 });
    clock.advance(1000);
    expect(await limiter.settle('a', small, { cost: 0 })).toBe(false);
    expect(await limiter.settle('b', large, { cost: 20 })).toBe(true);
    expect((await limiter.check('b', { cost: 1 })).allowed).toBe(false);
  });

  it('refuses a settleWithinMs that is not a whole number of ms from 1 to 2^31, naming it', () => {
    for (const settleWithinMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31 + 1, '1000']) {
      expect(() => createLimiter({ policies: [policy], settleWithinMs: settleWithinMs as number })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'settleWithinMs' }),
      );
    }
  });

  it('refuses a store without settle, naming the store', async () => {
    const base = memoryStore();
    const store: Store = {
      name: 'plain',
      hasOwnClock: false,
      decide: (r) => base.decide(r),
      reset: (p, k, c) => base.reset(p, k, c),
    };
    const { limiter } = setup(store);
    const decision = await limiter.limit('k', { cost: 2, settle: true });
    expect(await refused(limiter.settle('k', decision, { cost: 1 }))).toEqual({
      code: 'ERR_INVALID_OPTION',
      option: 'store',
    });
  });

  it('keeps decisions plain data with the settlement in them', async () => {
    const { limiter } = setup();
    const decision = await limiter.limit('k', { cost: 2, settle: true });
    const copy = JSON.parse(JSON.stringify(decision)) as Decision;
    expect(copy).toEqual(decision);
    expect(await limiter.settle('k', copy, { cost: 3 })).toBe(true);
  });

  it('works the same way on the sync path', () => {
    const { limiter } = setup();
    const decision = limiter.limitSync('k', { cost: 10, settle: true });
    expect(decision.settlement).toBeDefined();
    return limiter.settle('k', decision, { cost: 0 }).then((done) => {
      expect(done).toBe(true);
      expect(limiter.checkSync('k', { cost: 10 }).allowed).toBe(true);
    });
  });
});
