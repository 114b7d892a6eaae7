import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, isFloodgateError, memoryPermitStore } from '../../src/index.js';
import { type PostgresPermitStore, postgresPermitStore } from '../../src/stores/postgres/index.js';
import { redisPermitStore } from '../../src/stores/redis/index.js';
import { type SqlitePermitStore, sqlitePermitStore } from '../../src/stores/sqlite/index.js';
import { runPermitConformanceSuite } from '../../src/testing/index.js';
import { connectSingle, type DriverClient, DRIVERS as REDIS_DRIVERS } from './redis/clients.js';
import { redisAvailable, requireServer } from './redis/servers.js';
import { type Connection, connect, DRIVERS as PG_DRIVERS, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

// One permit store contract (src/testing/permit-conformance.ts) on every permit store; Redis Cluster runs
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
