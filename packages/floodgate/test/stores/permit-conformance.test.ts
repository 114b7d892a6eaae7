import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, isFloodgateError, memoryPermitStore } from '../../src/index.js';
import { type PostgresPermitStore, postgresPermitStore } from '../../src/stores/postgres/index.js';
import { redisPermitStore } from '../../src/stores/redis/index.js';
import { type SqlitePermitStore, sqlitePermitStore } from '../../src/stores/sqlite/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { runPermitConformanceSuite } from '../permits/permit-conformance.js';
import { connectSingle, type DriverClient, DRIVERS as REDIS_DRIVERS } from './redis/clients.js';
import { redisAvailable, requireServer } from './redis/servers.js';
import { type Connection, connect, DRIVERS as PG_DRIVERS, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

// One permit store contract (test/permits/permit-conformance.ts) on every permit store; Redis Cluster runs
// it in permit-fleet.test.ts, where its cluster is started.

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const postgresUp = await requirePostgres();

describe('memory', () => {
  runPermitConformanceSuite({ describe, it }, { store: () => memoryPermitStore() });
});

for (const driver of REDIS_DRIVERS) {
  describe.skipIf(!redisUp)(`redis, ${driver}`, () => {
    let connection: DriverClient;
    beforeAll(async () => {
      connection = await connectSingle(driver);
    });
    afterAll(async () => {
      await connection?.close();
    });
    runPermitConformanceSuite({ describe, it }, { store: () => redisPermitStore({ client: connection.client }) });
  });
}

for (const driver of PG_DRIVERS) {
  describe.skipIf(!postgresUp)(`postgres, ${driver}`, () => {
    const schema = uniqueSchema('permits');
    let connection: Connection;
    let store: PostgresPermitStore;
    beforeAll(async () => {
      connection = connect(driver);
      store = postgresPermitStore({ client: connection.client, schema });
      await store.migrate();
      // Idempotent, and safe from several processes at once (an advisory lock).
      await Promise.all([store.migrate(), store.migrate()]);
    });
    afterAll(async () => {
      await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await connection?.close();
    });
    runPermitConformanceSuite({ describe, it }, { store: () => store });

    it('keeps a key to at most limit lease rows and one key row, which the sweep leaves in place', async () => {
      const permits = createPermits({ store, policy: concurrency({ limit: 3, leaseMs: 60_000 }), prefix: 'rows' });
      const held = await Promise.all([1, 2, 3, 4, 5].map(() => permits.limit('k')));
      // Five at once on several connections: exactly three granted, in whatever order they arrived.
      expect(held.filter((d) => d.allowed).length).toBe(3);
      const count = async (table: string) =>
        Number(
          (await connection.sql(`SELECT count(*) AS n FROM "${schema}"."${table}" WHERE key LIKE 'rows:%'`))[0]?.n,
        );
      expect(await count('floodgate_permits')).toBe(3);
      expect(await count('floodgate_permits__fg_keys')).toBe(1);
      for (const d of held) await d.permit?.release();
      expect(await count('floodgate_permits')).toBe(0);
      expect(await count('floodgate_permits__fg_keys')).toBe(1);
    });

    it('prunes idle keys a minute after their last lease and fence, four per new key, with their leases', async () => {
      // An hour behind the server: the earlier of the two clocks bounds what may be pruned.
      const clock = manualClock({ startMs: Date.now() - 3_600_000 });
      const prefix = uniquePrefix('prune');
      const permits = createPermits({ store, policy: concurrency({ limit: 2, leaseMs: 1000 }), clock, prefix });
      const first = await permits.limit('idle-0');
      for (let i = 1; i < 10; i++) expect((await permits.limit(`idle-${i}`)).allowed).toBe(true);
      const count = async (table: string) =>
        Number(
          (
            await connection.sql(`SELECT count(*) AS n FROM "${schema}"."${table}" WHERE key LIKE $1`, [`${prefix}:%`])
          )[0]?.n,
        );
      expect([await count('floodgate_permits__fg_keys'), await count('floodgate_permits')]).toEqual([10, 10]);
      // Expiries are kept in whole minutes: three minutes on, every idle key is a minute past its own.
      clock.advance(180_000);
      await permits.limit('new-1');
      expect([await count('floodgate_permits__fg_keys'), await count('floodgate_permits')]).toEqual([7, 7]);
      await permits.limit('new-2');
      expect([await count('floodgate_permits__fg_keys'), await count('floodgate_permits')]).toEqual([4, 4]);
      // A pruned key starts again with a fence above every earlier one.
      const again = await permits.limit('idle-0');
      expect(again.permit?.fence).toBeGreaterThan(first.permit?.fence as number);
    });

    it('a store not migrated says so; a table of another kind is refused, never used', async () => {
      const other = postgresPermitStore({ client: connection.client, schema, table: 'never_migrated' });
      const permits = createPermits({ store: other, policy: concurrency({ limit: 1, leaseMs: 1000 }) });
      await expect(permits.limit('k')).rejects.toMatchObject({
        code: 'ERR_STORE_UNAVAILABLE',
        message: expect.stringContaining('call store.migrate() first'),
      });
      await connection.sql(`CREATE TABLE "${schema}".not_permits (key text PRIMARY KEY, state float8[])`);
      const wrong = postgresPermitStore({ client: connection.client, schema, table: 'not_permits' });
      await expect(wrong.migrate()).rejects.toMatchObject({ code: '42809' });
    });
  });
}

describe('sqlite', () => {
  const directory = mkdtempSync(join(tmpdir(), 'floodgate-permits-'));
  const database = new Database(join(directory, 'permits.db'));
  const store: SqlitePermitStore = sqlitePermitStore({ database });
  store.migrate();
  store.migrate();
  afterAll(() => {
    database.close();
    rmSync(directory, { recursive: true, force: true });
  });
  runPermitConformanceSuite({ describe, it }, { store: () => store });

  it('prunes idle keys a minute after their last lease and fence, with their leases, when a key is created', async () => {
    const pruned = sqlitePermitStore({ database, table: 'pruned' });
    pruned.migrate();
    const clock = manualClock({ startMs: Date.now() - 3_600_000 });
    const permits = createPermits({ store: pruned, policy: concurrency({ limit: 2, leaseMs: 1000 }), clock });
    for (let i = 0; i < 10; i++) expect((await permits.limit(`idle-${i}`)).allowed).toBe(true);
    const count = (table: string) => (database.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    expect([count('pruned__fg_keys'), count('pruned')]).toEqual([10, 10]);
    clock.advance(60_000);
    await permits.limit('new-1');
    // A minute on, the idle keys' rows (kept to the next whole minute, then a minute more) stay.
    expect([count('pruned__fg_keys'), count('pruned')]).toEqual([11, 11]);
    clock.advance(180_000);
    await permits.limit('new-2');
    // The sweep looks at the next 16 rows in key order: every idle one (and new-1) goes, new-2 stays.
    expect([count('pruned__fg_keys'), count('pruned')]).toEqual([1, 1]);
  });

  it('inside a transaction of the caller, a call is a savepoint of it: undone when the caller rolls back', () => {
    const args = { limit: 1, leaseUs: 60_000_000, cost: 1, leaseId: 'BBBBBBBBBBBBBBBBBBBBBB', nowUs: 1_000_000 };
    expect(() =>
      database.transaction(() => {
        expect(store.acquire('nested', args).granted).toBe(true);
        throw new Error('the caller rolls back');
      })(),
    ).toThrow('the caller rolls back');
    // Rolled back with the caller's transaction: the permit is free, and the fence starts over.
    const again = store.acquire('nested', { ...args, leaseId: 'CCCCCCCCCCCCCCCCCCCCCC' });
    expect([again.granted, again.fence]).toEqual([true, 1_000_000]);
    database.transaction(() => store.release('nested', { leaseId: 'CCCCCCCCCCCCCCCCCCCCCC', nowUs: 1_000_001 }))();
    expect(store.acquire('nested', { ...args, nowUs: 1_000_002 }).granted).toBe(true);
  });

  it('a store not migrated says so; a rate store table is refused', () => {
    const other = sqlitePermitStore({ database, table: 'never_migrated' });
    try {
      other.release('k', { leaseId: 'AAAAAAAAAAAAAAAAAAAAAA' });
      expect.unreachable();
    } catch (error) {
      expect(isFloodgateError(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
    }
    database.exec('CREATE TABLE rates (key TEXT PRIMARY KEY, state BLOB)');
    expect(() => sqlitePermitStore({ database, table: 'rates' }).migrate()).toThrow(
      /not a table of concurrency permits/,
    );
  });
});
