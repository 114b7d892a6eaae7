import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  FloodgateError,
  type FloodgateError as FloodgateErrorType,
  gcra,
  isFloodgateError,
  type Limiter,
  memoryStore,
} from '../../src/index.js';
import { classifyStoreError, type StoreRequest, type StoreResult, type SyncStore } from '../../src/stores/index.js';
import { manualClock } from '../../src/testing/index.js';

/**
 * Limiter routing only: stores that throw a chosen error, so each class of store error can be driven
 * through the limiter's one store-call path. (The stores themselves are tested against real servers,
 * and `test/hostile/cost.test.ts` provokes real rejections from PostgreSQL and Redis.)
 */
function throwingStore(make: () => unknown): SyncStore & { calls: number } {
  const store = {
    name: 'double',
    hasOwnClock: false,
    calls: 0,
    decideSync(_request: StoreRequest): StoreResult {
      store.calls++;
      throw make();
    },
    decide(request: StoreRequest): Promise<StoreResult> {
      try {
        return Promise.resolve(store.decideSync(request));
      } catch (error) {
        return Promise.reject(error);
      }
    },
    resetSync(): void {},
    reset: () => Promise.resolve(),
  };
  return store;
}

/** A store full of other keys: it refuses every new one, as `memoryStore({ onFull: 'refuse' })` does. */
const full = () => new FloodgateError('ERR_STORE_FULL', 'the memory store is full (100 keys); new keys are refused');
/** An answer that refuses this one call: what a PostgreSQL data exception becomes. */
const rejected = () => new FloodgateError('ERR_STORE_REJECTED', 'the postgres store refused the call');
const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });

const policies = [gcra({ limit: 3, periodMs: 60_000 })];

function watched(limiter: Limiter): { errors: string[]; breaker: string[] } {
  const seen = { errors: [] as string[], breaker: [] as string[] };
  limiter.on('storeError', ({ error }) => seen.errors.push(error.code));
  limiter.on('breaker', ({ state }) => seen.breaker.push(state));
  return seen;
}

async function rejection(promise: Promise<unknown>): Promise<FloodgateErrorType> {
  try {
    await promise;
  } catch (error) {
    expect(isFloodgateError(error)).toBe(true);
    return error as FloodgateErrorType;
  }
  throw new Error('expected a rejection');
}

describe('store errors through the limiter', () => {
  describe('ERR_STORE_FULL: answered by the failure policy, never counted by the breaker', () => {
    it("'open' admits, degraded, with a storeError event per call; the breaker stays closed", async () => {
      const store = throwingStore(full);
      const limiter = createLimiter({ store, policies, failure: 'open', breaker: { failureThreshold: 2 } });
      const seen = watched(limiter);
      const decisions = [];
      for (let i = 0; i < 20; i++) decisions.push(await limiter.limit(`new-${i}`));
      expect(decisions.every((d) => d.allowed && d.reason === 'degraded')).toBe(true);
      expect(seen.errors).toEqual(Array.from({ length: 20 }, () => 'ERR_STORE_FULL'));
      expect(limiter.breakerState).toBe('closed');
      expect(seen.breaker).toEqual([]);
      // Every call asked the store: the breaker never skipped it.
      expect(store.calls).toBe(20);
    });

    it("'closed' denies, degraded", async () => {
      const limiter = createLimiter({ store: throwingStore(full), policies, failure: 'closed' });
      expect(await limiter.limit('k')).toMatchObject({ allowed: false, reason: 'degraded', retryAfterMs: 1000 });
      expect(limiter.limitSync('k')).toMatchObject({ allowed: false, reason: 'degraded' });
    });

    it("'throw' rejects with ERR_STORE_FULL itself", async () => {
      const limiter = createLimiter({ store: throwingStore(full), policies });
      const seen = watched(limiter);
      expect((await rejection(limiter.limit('k'))).code).toBe('ERR_STORE_FULL');
      expect(() => limiter.limitSync('k')).toThrow(expect.objectContaining({ code: 'ERR_STORE_FULL' }));
      expect(seen.errors).toEqual(['ERR_STORE_FULL', 'ERR_STORE_FULL']);
    });

    it('a fallback limiter decides, degraded, within its own limit', async () => {
      const fallback = createLimiter({ store: memoryStore(), policies, clock: manualClock() });
      const limiter = createLimiter({ store: throwingStore(full), policies, failure: { fallback } });
      const allowed = [];
      for (let i = 0; i < 5; i++) allowed.push((await limiter.limit('k')).allowed);
      expect(allowed).toEqual([true, true, true, false, false]);
      expect(limiter.breakerState).toBe('closed');
    });

    it('faults still open the breaker (the same double, another error)', async () => {
      const limiter = createLimiter({ store: throwingStore(refused), policies, failure: 'open' });
      const seen = watched(limiter);
      for (let i = 0; i < 5; i++) await limiter.limit('k');
      expect(limiter.breakerState).toBe('open');
      expect(seen.errors).toEqual(Array.from({ length: 5 }, () => 'ERR_STORE_UNAVAILABLE'));
    });
  });

  describe('ERR_STORE_REJECTED: thrown to the caller, nothing else', () => {
    for (const failure of ['open', 'closed', 'throw'] as const) {
      it(`reaches the caller under failure '${failure}': no event, no degraded decision, breaker closed`, async () => {
        const store = throwingStore(rejected);
        const limiter = createLimiter({ store, policies, failure, breaker: { failureThreshold: 1 } });
        const seen = watched(limiter);
        const decisions: string[] = [];
        limiter.on('decision', ({ source }) => decisions.push(source));
        for (let i = 0; i < 10; i++) expect((await rejection(limiter.limit('k'))).code).toBe('ERR_STORE_REJECTED');
        expect(() => limiter.limitSync('k')).toThrow(expect.objectContaining({ code: 'ERR_STORE_REJECTED' }));
        expect(seen).toEqual({ errors: [], breaker: [] });
        expect(decisions).toEqual([]);
        expect(store.calls).toBe(11);
      });
    }

    it('a rejected probe closes a half-open breaker: the store answered', async () => {
      const clock = manualClock();
      let next: () => unknown = refused;
      const store = throwingStore(() => next());
      const limiter = createLimiter({ store, policies, clock, failure: 'open', breaker: { failureThreshold: 1 } });
      await limiter.limit('k');
      expect(limiter.breakerState).toBe('open');
      clock.advance(1000);
      next = rejected;
      expect((await rejection(limiter.limit('k'))).code).toBe('ERR_STORE_REJECTED');
      expect(limiter.breakerState).toBe('closed');
    });
  });

  describe('classifyStoreError', () => {
    const pg = (code: string) => Object.assign(new Error(`sqlstate ${code}`), { code, severity: 'ERROR' });
    const sqlite = (code: string) => Object.assign(new Error(code), { code, name: 'SqliteError' });
    const table: [string, unknown, string][] = [
      ['an invalid cost', new FloodgateError('ERR_INVALID_COST', 'cost'), 'input'],
      ['an invalid key', new FloodgateError('ERR_INVALID_KEY', 'key'), 'input'],
      ['a full store', full(), 'full'],
      ['a rejection', rejected(), 'rejected'],
      ['a timeout', new FloodgateError('ERR_TIMEOUT', 't'), 'fault'],
      ['an unexpected reply', new FloodgateError('ERR_STORE_PROTOCOL', 'p'), 'fault'],
      ['a refused connection', refused(), 'fault'],
      ['a thrown string', 'boom', 'fault'],
      ['PostgreSQL 22003 numeric value out of range', pg('22003'), 'rejected'],
      ['PostgreSQL 22P02 invalid text representation', pg('22P02'), 'rejected'],
      ['PostgreSQL 23505 unique violation', pg('23505'), 'rejected'],
      ['PostgreSQL 42804 datatype mismatch', pg('42804'), 'rejected'],
      ['PostgreSQL P0001 raise exception', pg('P0001'), 'rejected'],
      ['PostgreSQL 42883 function missing (not migrated)', pg('42883'), 'fault'],
      ['PostgreSQL 42P01 table missing (not migrated)', pg('42P01'), 'fault'],
      ['PostgreSQL 08006 connection failure', pg('08006'), 'fault'],
      ['PostgreSQL 53300 too many connections', pg('53300'), 'fault'],
      ['PostgreSQL 57P01 admin shutdown', pg('57P01'), 'fault'],
      ['PostgreSQL 57014 query canceled (statement timeout)', pg('57014'), 'fault'],
      ['PostgreSQL 58030 io error', pg('58030'), 'fault'],
      ['PostgreSQL XX000 internal error', pg('XX000'), 'fault'],
      ['PostgreSQL 40001 serialization failure', pg('40001'), 'fault'],
      ['PostgreSQL 40P01 deadlock', pg('40P01'), 'fault'],
      ['a SQLSTATE-like code without severity (not a server error)', { code: '22003' }, 'fault'],
      ['SQLite constraint', sqlite('SQLITE_CONSTRAINT_NOTNULL'), 'rejected'],
      ['SQLite busy', sqlite('SQLITE_BUSY'), 'fault'],
      ['SQLite disk full', sqlite('SQLITE_FULL'), 'fault'],
      ['Redis WRONGTYPE', new Error('WRONGTYPE Operation against a key holding the wrong kind of value'), 'rejected'],
      [
        'Redis 7 script runtime error',
        new Error('ERR user_script:1: attempt to compare number with nil script: c6b4, on @user_script:1.'),
        'rejected',
      ],
      [
        'Redis 6 script runtime error',
        new Error('ERR Error running script (call to f_c6b4): @user_script:1: …'),
        'rejected',
      ],
      ['Redis LOADING', new Error('LOADING Redis is loading the dataset in memory'), 'fault'],
      ['Redis BUSY', new Error('BUSY Redis is busy running a script.'), 'fault'],
      ['Redis OOM', new Error("OOM command not allowed when used memory > 'maxmemory'."), 'fault'],
      ['Redis READONLY', new Error("READONLY You can't write against a read only replica."), 'fault'],
      ['Redis CLUSTERDOWN', new Error('CLUSTERDOWN The cluster is down'), 'fault'],
      ['Redis max clients', new Error('ERR max number of clients reached'), 'fault'],
      ['ioredis offline queue', new Error("Stream isn't writeable and enableOfflineQueue options is false"), 'fault'],
    ];
    for (const [name, error, expected] of table) {
      it(`${name}: ${expected}`, () => {
        expect(classifyStoreError(error)).toBe(expected);
      });
    }
  });
});
