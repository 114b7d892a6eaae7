// Hostile permit decisions. A client that holds a decision (or its `permit`, sent back over the wire) may
// alter it, send it for another key, replay it, or make one up. A malformed one is refused with a typed
// error before any store call; a well-formed one can end only the lease it names, on the key it names;
// a caller-chosen lease id is checked the same way. Nothing may pollute a prototype.
import { describe, expect, it } from 'vitest';
import {
  concurrency,
  createLimiter,
  createPermits,
  type Decision,
  gcra,
  isFloodgateError,
  memoryPermitStore,
  type PermitStore,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

/** A memory permit store that counts the calls that reach it. */
function counted(): { store: PermitStore; calls: () => number } {
  const inner = memoryPermitStore({ clock: manualClock() });
  let calls = 0;
  return {
    store: {
      name: 'counted',
      acquire: (k, a) => {
        calls++;
        return inner.acquire(k, a);
      },
      refresh: (k, a) => {
        calls++;
        return inner.refresh(k, a);
      },
      release: (k, a) => {
        calls++;
        return inner.release(k, a);
      },
    },
    calls: () => calls,
  };
}

function setup() {
  const { store, calls } = counted();
  const limiter = createLimiter({
    policies: [gcra({ limit: 100, periodMs: 1000 }), concurrency({ limit: 1, leaseMs: 10_000 })],
    permits: store,
  });
  return { limiter, calls };
}

async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
  } catch (error) {
    return isFloodgateError(error) ? `${error.code} ${error.option}` : String(error);
  }
  return 'resolved';
}

describe('hostile permit decisions', () => {
  it.each([
    ['null', null],
    ['a string', 'lease'],
    ['a number', 7],
    ['a permit without a key', { permit: { leaseId: 'A'.repeat(22) } }],
    ['a permit with a number for its key', { permit: { key: 1, leaseId: 'A'.repeat(22) } }],
    ['a permit of null', { permit: null }],
  ])('refuses %s with ERR_INVALID_OPTION before any store call', async (_name, value) => {
    const { limiter, calls } = setup();
    expect(await codeOf(limiter.release(value as never))).toBe('ERR_INVALID_OPTION decision');
    expect(await codeOf(limiter.refresh(value as never))).toBe('ERR_INVALID_OPTION decision');
    expect(() => limiter.permit(value as never)).toThrow();
    expect(calls()).toBe(0);
  });

  it.each([
    ['too short', 'abc'],
    ['a path', '../../../../etc/passwd'],
    ['22 characters with a NUL', `${'A'.repeat(21)}\u0000`],
    ['a long one', 'A'.repeat(100_000)],
  ])('refuses a lease id that is %s, naming leaseId, before any store call', async (_name, leaseId) => {
    const { limiter, calls } = setup();
    expect(await codeOf(limiter.release({ permit: { key: 'k', leaseId } } as never))).toBe(
      'ERR_INVALID_OPTION leaseId',
    );
    const permits = createPermits({ store: memoryPermitStore(), policy: concurrency({ limit: 1, leaseMs: 1000 }) });
    expect(await codeOf(permits.limit('k', { leaseId }))).toBe('ERR_INVALID_OPTION leaseId');
    expect(calls()).toBe(0);
  });

  it('a decision altered to name another key, or a made-up lease, ends nothing; the real one still releases', async () => {
    const { limiter } = setup();
    const victim = await limiter.limit('victim');
    expect(victim.permit).toBeDefined();
    const forged: Decision = {
      ...victim,
      permit: { ...(victim.permit as NonNullable<Decision['permit']>), key: 'attacker' },
    };
    expect(await limiter.release(forged)).toBe(false);
    expect(limiter.permit(forged)).toBeUndefined();
    const madeUp = {
      ...victim,
      permit: { ...(victim.permit as NonNullable<Decision['permit']>), leaseId: 'B'.repeat(22) },
    };
    expect(await limiter.release(madeUp)).toBe(false);
    // The victim's permit is still held.
    expect((await limiter.limit('victim')).allowed).toBe(false);
    expect(await limiter.release(victim)).toBe(true);
    // A replayed release ends nothing more, and cannot free a later holder's permit.
    const next = await limiter.limit('victim');
    expect(await limiter.release(victim)).toBe(false);
    expect((await limiter.limit('victim')).allowed).toBe(false);
    await limiter.release(next);
  });

  it('a decision parsed from JSON with __proto__ keys pollutes nothing and releases only its own lease', async () => {
    const { limiter } = setup();
    const d = await limiter.limit('k');
    const text = JSON.stringify(d).replace('"permit":{', '"permit":{"__proto__":{"polluted":true},');
    const parsed = JSON.parse(text) as Decision;
    expect(await limiter.release(parsed)).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
