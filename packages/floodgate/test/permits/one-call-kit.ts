import { expect, it } from 'vitest';
import {
  concurrency,
  createLimiter,
  createPermits,
  type Decision,
  FloodgateError,
  fixedWindow,
  gcra,
  type Limiter,
  type PermitClaim,
  type PermitStore,
  type Store,
  tokenBucket,
} from '../../src/index.js';
import { encodeKey, storageKey } from '../../src/keys.js';
import { compilePolicy } from '../../src/model/compile.js';
import { type ManualClock, manualClock, uniquePrefix } from '../../src/testing/index.js';

/**
 * One store under test for the one-call path: `own()` is a store with its own permit store
 * (`store.permits` and `decideWithPermit`); `separate()` a store of the same kind and a permit store
 * of its own beside it, which a limiter decides with in two calls. `calls()` counts the round trips to
 * the server (or the store calls of an in-process store) made since the backend was made.
 */
export interface OneCallBackend {
  readonly name: string;
  own(): Store;
  separate(): { store: Store; permits: PermitStore };
  calls(): number;
}

const RATE = 'rate';
const CONC = 'concurrency';

function limiterOn(
  store: Store,
  permits: PermitStore | undefined,
  clock: ManualClock,
  prefix: string,
  rate: number,
  inFlight: number,
): Limiter {
  return createLimiter({
    policies: [gcra({ limit: rate, periodMs: 60_000, name: RATE }), concurrency({ limit: inFlight, leaseMs: 10_000 })],
    store,
    ...(permits === undefined ? {} : { permits }),
    clock,
    prefix,
  });
}

/** A decision without what differs between two grants made alike (the lease id is random). */
function comparable(d: Decision): unknown {
  const { permit, ...rest } = d;
  return permit === undefined ? rest : { ...rest, permit: { ...permit, leaseId: 'x' } };
}

/**
 * The three outcomes of a call on the one-call path, and its round trips: a refused permit charges no
 * rate, a rate denial holds no permit, a call both admit holds its permit and is charged; one store call
 * per decision.
 */
export function runOneCallSuite(backend: OneCallBackend): void {
  it('a refused permit charges no rate (the rate policies are only looked at)', async () => {
    const clock = manualClock();
    const prefix = uniquePrefix('one');
    const limiter = limiterOn(backend.own(), undefined, clock, prefix, 10, 1);
    const held = await limiter.limit('k');
    expect(held.allowed).toBe(true);
    expect(held.permit).toBeDefined();
    const before = await limiter.status('k');
    const refused = await limiter.limit('k', { cost: 1 });
    expect(refused).toMatchObject({ allowed: false, policy: CONC, reason: 'limit' });
    expect(refused.permit).toBeUndefined();
    // A check of cost 1 on 9 left: 8 would be left after it.
    expect(refused.policies[0]).toMatchObject({ policy: RATE, allowed: true, remaining: 8 });
    expect(refused.policies[1]).toMatchObject({ policy: CONC, allowed: false, remaining: 0 });
    expect((await limiter.status('k')).remaining).toBe(before.remaining);
    expect(await limiter.release(held)).toBe(true);
  });

  it('a rate denial holds no permit (the lease goes back in the same call)', async () => {
    const clock = manualClock();
    const prefix = uniquePrefix('one');
    const store = backend.own();
    const limiter = limiterOn(store, undefined, clock, prefix, 1, 3);
    const first = await limiter.limit('k');
    expect(first.allowed).toBe(true);
    for (let i = 0; i < 5; i++) {
      const denied = await limiter.limit('k');
      expect(denied).toMatchObject({ allowed: false, policy: RATE, reason: 'limit' });
      expect(denied.permit).toBeUndefined();
      // In flight: the first call's permit only.
      expect(denied.policies[1]).toMatchObject({ policy: CONC, allowed: true, remaining: 2 });
    }
    // Two permits are free in the store itself: a permit caller on the same keys takes both.
    const permits = createPermits({
      store: store.permits as PermitStore,
      policy: concurrency({ limit: 3, leaseMs: 10_000 }),
      prefix,
      clock,
    });
    const a = await permits.limit('k');
    const b = await permits.limit('k');
    const c = await permits.limit('k');
    expect([a.allowed, b.allowed, c.allowed]).toEqual([true, true, false]);
    await a.permit?.release();
    await b.permit?.release();
    expect(await limiter.release(first)).toBe(true);
  });

  it('a call both admit holds its permit and is charged; both denying is the longer wait', async () => {
    const clock = manualClock();
    const prefix = uniquePrefix('one');
    const limiter = limiterOn(backend.own(), undefined, clock, prefix, 2, 1);
    const d = await limiter.limit('k');
    expect(d).toMatchObject({ allowed: true, remaining: 0, policies: [{ remaining: 1 }, { remaining: 0 }] });
    expect(d.permit).toMatchObject({ policy: CONC, key: 'k', cost: 1 });
    expect(limiter.permit(d)?.fence).toBe(d.permit?.fence);
    expect((await limiter.status('k')).remaining).toBe(1);
    await limiter.release(d);
    const e = await limiter.limit('k');
    expect(e.allowed).toBe(true);
    // Both deny now: the rate (a minute) waits longer than the lease (10 s).
    const both = await limiter.limit('k');
    expect(both).toMatchObject({ allowed: false, policy: RATE });
    expect(both.policies.map((p) => p.allowed)).toEqual([false, false]);
    await limiter.release(e);
  });

  it('decides each limit in one store call', async () => {
    const clock = manualClock();
    const prefix = uniquePrefix('one');
    const limiter = limiterOn(backend.own(), undefined, clock, prefix, 3, 2);
    // A server that has not seen the script yet answers NOSCRIPT to the first call, which sends it: not counted.
    await limiter.release(await limiter.limit('warm'));
    const outcomes: string[] = [];
    const held: Decision[] = [];
    for (let i = 0; i < 6; i++) {
      const before = backend.calls();
      const d = await limiter.limit('k');
      expect(backend.calls() - before).toBe(1);
      outcomes.push(d.allowed ? 'admitted' : (d.policy as string));
      if (d.permit !== undefined) held.push(d);
      if (i === 2) await limiter.release(held.shift() as Decision);
    }
    // Admitted, admitted, refused by the permit, (a release), admitted, then denied by the rate.
    expect(outcomes).toEqual(['admitted', 'admitted', CONC, 'admitted', RATE, RATE]);
    for (const d of held) await limiter.release(d);
  });

  it('refuses hostile claims with a typed error naming the argument, changing nothing', async () => {
    const store = backend.own();
    const prefix = uniquePrefix('one');
    const clock = manualClock();
    const rate = gcra({ limit: 2, periodMs: 60_000, name: RATE });
    const request = {
      prefix,
      key: 'k',
      policies: [compilePolicy(rate)],
      cost: 1,
      commit: true,
      nowUs: clock.nowUs(),
      maxDelayUs: 0,
    };
    const key = storageKey(prefix, encodeKey('k'), CONC);
    const args = { limit: 1, leaseUs: 10_000_000, cost: 1, leaseId: 'A'.repeat(22), nowUs: clock.nowUs() };
    const hostile: [string, unknown, string][] = [
      ['another user key', { key: storageKey(prefix, encodeKey('other'), CONC), args }, 'claim.key'],
      ['another prefix', { key: storageKey('elsewhere', encodeKey('k'), CONC), args }, 'claim.key'],
      ['the record key itself', { key: `${prefix}:{k}`, args }, 'claim.key'],
      ['a NUL in the key', { key: `${key}\0`, args }, 'key'],
      ['a key past 1024 characters', { key: `${key}${'x'.repeat(1100)}`, args }, 'key'],
      ['a limit of 0', { key, args: { ...args, limit: 0 } }, 'limit'],
      ['a NaN cost', { key, args: { ...args, cost: Number.NaN } }, 'cost'],
      ['a fractional lease', { key, args: { ...args, leaseUs: 1.5 } }, 'leaseUs'],
      ['a lease id with Lua in it', { key, args: { ...args, leaseId: "'); redis.call('FLUSHALL') --" } }, 'leaseId'],
      ['no claim', null, 'claim'],
    ];
    const decideWithPermit = store.decideWithPermit as NonNullable<Store['decideWithPermit']>;
    for (const [what, claim, option] of hostile) {
      const error = await decideWithPermit.call(store, request, claim as PermitClaim).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, what).toBeInstanceOf(FloodgateError);
      expect((error as FloodgateError).option, what).toBe(option);
    }
    // A check is not a limit.
    const check = await decideWithPermit.call(store, { ...request, commit: false }, { key, args }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((check as FloodgateError).option).toBe('request.commit');
    // Nothing was charged or held: the whole rate and the permit are there.
    const limiter = createLimiter({
      policies: [rate, concurrency({ limit: 1, leaseMs: 10_000 })],
      store,
      clock,
      prefix,
    });
    const d = await limiter.limit('k');
    expect(d).toMatchObject({ allowed: true, policies: [{ remaining: 1 }, { remaining: 0 }] });
    await limiter.release(d);
  });

  it('decides exactly as the two calls do, over a random run', async () => {
    const clock = manualClock();
    const separate = backend.separate();
    const policies = [
      tokenBucket({ capacity: 6, refillAmount: 1, refillIntervalMs: 500, name: 'bucket' }),
      fixedWindow({ limit: 9, windowMs: 4000, name: 'window' }),
      concurrency({ limit: 4, leaseMs: 3000 }),
    ];
    const one = createLimiter({ policies, store: backend.own(), clock, prefix: uniquePrefix('one') });
    const two = createLimiter({ policies, ...separate, clock, prefix: uniquePrefix('two') });
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    const held: [Decision, Decision][] = [];
    const kinds = new Set<string>();
    for (let step = 0; step < 300; step++) {
      const roll = random(10);
      if (roll < 6) {
        const key = `k${random(3)}`;
        const cost = 1 + random(3);
        const a = await one.limit(key, { cost });
        const b = await two.limit(key, { cost });
        expect(comparable(a), `step ${step}`).toEqual(comparable(b));
        kinds.add(a.allowed ? 'admitted' : (a.policy as string));
        if (a.permit !== undefined && b.permit !== undefined) held.push([a, b]);
      } else if (roll < 8 && held.length > 0) {
        const [a, b] = held.splice(random(held.length), 1)[0] as [Decision, Decision];
        expect(await one.release(a)).toBe(await two.release(b));
      } else {
        clock.advance(1 + random(1200));
      }
    }
    // The run went through every outcome.
    expect([...kinds].sort()).toEqual(['admitted', 'bucket', 'concurrency', 'window'].sort());
  });
}
