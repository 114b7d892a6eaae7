import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createLimiter, gcra, isFloodgateError } from '../../src/index.js';
import { isPermanentStoreError } from '../../src/stores/index.js';
import { fromPg, postgresStore } from '../../src/stores/postgres/index.js';
import { PG_CONFIG, requirePostgres } from './sql/postgres-env.js';

const available = await requirePostgres();

/** The error a call rejects with, or undefined when it resolves. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (error: unknown) => error,
  );
}

describe.skipIf(!available)('a store that cannot work as configured is told from one that is down', () => {
  it('a PostgreSQL URL naming a missing database: ERR_STORE_MISCONFIGURED, the server’s words kept', async () => {
    const pool = new pg.Pool({ ...PG_CONFIG, database: 'floodgate_no_such_database', max: 1 });
    pool.on('error', () => {});
    const limiter = createLimiter({
      store: postgresStore({ client: fromPg(pool) }),
      policies: [gcra({ limit: 5, periodMs: 1000 })],
    });
    try {
      const error = await rejection(limiter.limit('k'));
      expect(isFloodgateError(error) && error.code).toBe('ERR_STORE_MISCONFIGURED');
      expect(String((error as Error).message)).toMatch(/retrying will not help.*floodgate_no_such_database/);
      expect(isPermanentStoreError(error)).toBe(true);
    } finally {
      await pool.end();
    }
  });

  it('a refused login: ERR_STORE_MISCONFIGURED; a server that is not there: ERR_STORE_UNAVAILABLE', async () => {
    const wrongUser = new pg.Pool({ ...PG_CONFIG, user: 'floodgate_no_such_role', max: 1 });
    const nobody = new pg.Pool({ ...PG_CONFIG, port: 1, max: 1, connectionTimeoutMillis: 2000 });
    wrongUser.on('error', () => {});
    nobody.on('error', () => {});
    const policies = [gcra({ limit: 5, periodMs: 1000 })];
    try {
      const refused = await rejection(
        createLimiter({ store: postgresStore({ client: fromPg(wrongUser) }), policies }).limit('k'),
      );
      expect(isFloodgateError(refused) && refused.code).toBe('ERR_STORE_MISCONFIGURED');
      const down = await rejection(
        createLimiter({ store: postgresStore({ client: fromPg(nobody) }), policies }).limit('k'),
      );
      expect(isFloodgateError(down) && [down.code, isPermanentStoreError(down)]).toEqual([
        'ERR_STORE_UNAVAILABLE',
        false,
      ]);
    } finally {
      await wrongUser.end();
      await nobody.end();
    }
  });

  it('Redis replies that want a password are permanent; other replies are not', () => {
    expect(isPermanentStoreError(new Error('NOAUTH Authentication required.'))).toBe(true);
    expect(isPermanentStoreError(new Error('WRONGPASS invalid username-password pair or user is disabled.'))).toBe(
      true,
    );
    expect(isPermanentStoreError(new Error('LOADING Redis is loading the dataset in memory'))).toBe(false);
    expect(isPermanentStoreError({ code: '3D000' })).toBe(false);
  });
});
