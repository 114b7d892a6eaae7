import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  type Decision,
  type FloodgateError,
  fixedWindow,
  gcra,
  isFloodgateError,
  memoryStore,
  type Store,
  slidingLog,
} from '../../src/index.js';
import { manualClock, modelStore } from '../../src/testing/index.js';

const policies = [gcra({ limit: 2, periodMs: 1000 })];

async function rejection(promise: Promise<unknown>): Promise<FloodgateError> {
  try {
    await promise;
  } catch (error) {
    expect(isFloodgateError(error)).toBe(true);
    return error as FloodgateError;
  }
  throw new Error('expected a rejection');
}

function thrown(fn: () => unknown): FloodgateError {
  try {
    fn();
  } catch (error) {
    expect(isFloodgateError(error)).toBe(true);
    return error as FloodgateError;
  }
  throw new Error('expected a throw');
}

/** An array of `length` with holes everywhere but at the given indexes. */
function sparse<T>(length: number, at: Record<number, T>): T[] {
  const list = new Array<T>(length);
  for (const [i, value] of Object.entries(at)) list[Number(i)] = value;
  return list;
}

/** A store whose server is gone: every call fails (limiter behaviour only; stores are tested for real). */
const brokenStore: Store = {
  name: 'broken',
  hasOwnClock: true,
  decide: () => Promise.reject(new Error('connection refused')),
  reset: () => Promise.reject(new Error('connection refused')),
};
/** A store that accepts the call and never answers. */
const silentStore: Store = {
  name: 'silent',
  hasOwnClock: true,
  decide: () => new Promise(() => {}),
  reset: () => new Promise(() => {}),
};

describe('limiter', () => {
  it('refuses bad keys, costs and options with typed errors naming them', async () => {
    const limiter = createLimiter({ policies });
    const cases: [unknown, unknown, string, string][] = [
      ['', undefined, 'ERR_INVALID_KEY', 'key'],
      [42, undefined, 'ERR_INVALID_KEY', 'key'],
      [null, undefined, 'ERR_INVALID_KEY', 'key'],
      ['x'.repeat(65_537), undefined, 'ERR_INVALID_KEY', 'key'],
      ['k', { cost: -1 }, 'ERR_INVALID_COST', 'cost'],
      ['k', { cost: Number.NaN }, 'ERR_INVALID_COST', 'cost'],
      ['k', { cost: Number.POSITIVE_INFINITY }, 'ERR_INVALID_COST', 'cost'],
      ['k', { cost: '1' }, 'ERR_INVALID_COST', 'cost'],
      ['k', { maxDelayMs: -5 }, 'ERR_INVALID_OPTION', 'maxDelayMs'],
      ['k', 'fast', 'ERR_INVALID_OPTION', 'options'],
      ['k', { policies: 7 }, 'ERR_INVALID_POLICY', 'policies'],
      ['k', { policies: [{ algorithm: 'gcra', limit: 0, periodMs: 1 }] }, 'ERR_INVALID_POLICY', 'policies[0].limit'],
      ['k', { policies: sparse(2, { 1: gcra({ limit: 1, periodMs: 1000 }) }) }, 'ERR_INVALID_POLICY', 'policies[0]'],
    ];
    for (const [key, options, code, option] of cases) {
      const error = await rejection(limiter.limit(key as string, options as object));
      expect([error.code, error.option]).toEqual([code, option]);
      expect(thrown(() => limiter.checkSync(key as string, options as object)).code).toBe(code);
    }
  });

  it('refuses bad construction options', () => {
    expect(thrown(() => createLimiter({ policies, prefix: 'a{b}' })).option).toBe('prefix');
    expect(thrown(() => createLimiter({ policies, prefix: '' })).option).toBe('prefix');
    expect(thrown(() => createLimiter({ policies, timeoutMs: 0 })).option).toBe('timeoutMs');
    expect(thrown(() => createLimiter({ policies, failure: 'maybe' as 'open' })).option).toBe('failure');
    expect(thrown(() => createLimiter({ policies, store: {} as Store })).option).toBe('store');
    expect(thrown(() => createLimiter({ policies, clock: Date as never })).option).toBe('clock');
    expect(thrown(() => createLimiter(null as never)).code).toBe('ERR_INVALID_OPTION');
    const holes = sparse(3, { 0: gcra({ limit: 1, periodMs: 1 }), 2: gcra({ limit: 2, periodMs: 1, name: 'b' }) });
    const hole = thrown(() => createLimiter({ policies: holes }));
    expect([hole.code, hole.option]).toEqual(['ERR_INVALID_POLICY', 'policies[1]']);
    const dup = [gcra({ limit: 1, periodMs: 1, name: 'a' }), fixedWindow({ limit: 1, windowMs: 1, name: 'a' })];
    expect(thrown(() => createLimiter({ policies: dup })).message).toMatch(/two policies named "a"/);
  });

  it('needs policies from the limiter or the call', async () => {
    const limiter = createLimiter({});
    expect((await rejection(limiter.limit('k'))).code).toBe('ERR_INVALID_POLICY');
    expect((await limiter.limit('k', { policies })).allowed).toBe(true);
  });

  it('refuses a name reused for another algorithm, which would corrupt stored state', async () => {
    const limiter = createLimiter({ policies: [gcra({ limit: 1, periodMs: 1000, name: 'api' })] });
    const error = await rejection(
      limiter.limit('k', { policies: slidingLog({ limit: 1, windowMs: 1000, name: 'api' }) }),
    );
    expect(error.message).toMatch(/another algorithm/);
  });

  it('offers sync methods only over a synchronous store', () => {
    const limiter = createLimiter({ policies, store: modelStore() });
    expect(thrown(() => limiter.limitSync('k')).message).toMatch(/model store is asynchronous/);
  });

  it('decides on the injected clock; sync and async paths agree', async () => {
    const clock = manualClock();
    const a = createLimiter({ policies, clock });
    const b = createLimiter({ policies, clock });
    const sync: Decision[] = [];
    const viaPromise: Decision[] = [];
    for (let i = 0; i < 4; i++) {
      sync.push(a.limitSync('k'));
      viaPromise.push(await b.limit('k'));
      clock.advance(300);
    }
    expect(viaPromise).toEqual(sync);
    // T = 500 ms, τ = 1000 ms: at 900 ms the key would owe 1100 ms.
    expect(sync.map((d) => d.allowed)).toEqual([true, true, true, false]);
  });

  it('resets and reports status per call policy set', async () => {
    const clock = manualClock();
    const limiter = createLimiter({ policies, clock });
    const pro = [gcra({ limit: 10, periodMs: 1000, name: 'pro' })];
    await limiter.limit('k', { policies: pro, cost: 4 });
    expect((await limiter.status('k', { policies: pro })).remaining).toBe(6);
    await limiter.reset('k', { policies: pro });
    expect((await limiter.status('k', { policies: pro })).remaining).toBe(10);
    limiter.limitSync('k');
    limiter.resetSync('k');
    expect(limiter.statusSync('k').remaining).toBe(2);
  });

  describe('when the store fails', () => {
    it("rejects with ERR_STORE_UNAVAILABLE by default ('throw'), keeping the cause", async () => {
      const error = await rejection(createLimiter({ policies, store: brokenStore }).limit('k'));
      expect(error.code).toBe('ERR_STORE_UNAVAILABLE');
      expect((error.cause as Error).message).toBe('connection refused');
    });

    it("'open' admits as if the key were untouched, saying 'degraded'", async () => {
      const limiter = createLimiter({ policies, store: brokenStore, failure: 'open' });
      expect(await limiter.limit('k')).toMatchObject({ allowed: true, reason: 'degraded', remaining: 1 });
      expect(await limiter.limit('k', { cost: 3 })).toMatchObject({ allowed: false, reason: 'exceeds-capacity' });
    });

    it("'closed' denies, saying 'degraded'", async () => {
      const limiter = createLimiter({ policies, store: brokenStore, failure: 'closed' });
      const decision = await limiter.limit('k');
      expect(decision).toMatchObject({ allowed: false, reason: 'degraded', remaining: 0, retryAfterMs: 1000 });
      expect(decision.policies[0]).toMatchObject({ allowed: false, reason: 'degraded' });
    });

    it('a fallback limiter takes over', async () => {
      const fallback = createLimiter({ policies, store: memoryStore(), clock: manualClock() });
      const limiter = createLimiter({ policies, store: brokenStore, failure: { fallback } });
      const decisions = [await limiter.limit('k'), await limiter.limit('k'), await limiter.limit('k')];
      expect(decisions.map((d) => [d.allowed, d.reason])).toEqual([
        [true, 'degraded'],
        [true, 'degraded'],
        [false, 'degraded'],
      ]);
    });

    it('a store that never answers times out after timeoutMs', async () => {
      const limiter = createLimiter({ policies, store: silentStore, timeoutMs: 20 });
      const error = await rejection(limiter.limit('k'));
      expect(error.code).toBe('ERR_TIMEOUT');
      const open = createLimiter({ policies, store: silentStore, timeoutMs: 20, failure: 'open' });
      expect(await open.check('k')).toMatchObject({ allowed: true, reason: 'degraded' });
    });

    it('reset cannot be faked: it rejects', async () => {
      const limiter = createLimiter({ policies, store: brokenStore, failure: 'open' });
      expect((await rejection(limiter.reset('k'))).code).toBe('ERR_STORE_UNAVAILABLE');
    });
  });
});
