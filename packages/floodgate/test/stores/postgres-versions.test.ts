import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, gcra, isFloodgateError } from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { encodeKey } from '../../src/stores/index.js';
import { migrationStatement } from '../../src/stores/postgres/migration.js';
import { decideStatement, PORT_VERSION, portFunctionNames } from '../../src/stores/postgres/port.js';
import { postgresStore } from '../../src/stores/postgres/postgres-store.js';
import { functionName, type SqlNames, sqlNames } from '../../src/stores/postgres/sql.js';
import { stateKey } from '../../src/stores/sql/common.js';
import { manualClock, SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * The PL/pgSQL port carries a version in its functions' names (a digest of its code, like a Lua script's
 * SHA). A store refuses a database that holds other versions only, with advice; `migrate()` installs its
 * own beside them, so processes of both versions run side by side during a rolling deploy, on one table.
 */
const available = await requirePostgres();
const schema = uniqueSchema('versions');
/** Another release's version (its functions are this port's code under another name: only names matter here). */
const OTHER = 'v00c0ffee';

describe.skipIf(!available)('postgres store: versions of the port', () => {
  let connection: Connection;
  beforeAll(() => {
    connection = connect('pg', 4);
  });
  afterAll(async () => {
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  /** What a process of another version runs: its migration, then its decide function on a row. */
  async function otherProcess(names: SqlNames, row: string, nowUs: number): Promise<boolean> {
    const c = compilePolicy(policy);
    const rows = await connection.sql(decideStatement(names), [
      `{"${row}"}`,
      1,
      `{1,1,${nowUs},0,1}`,
      `{1,${c.kind},${c.limit},${c.blockUs},${c.a},${c.b},${c.c}}`,
    ]);
    return String(rows[0]?.r).startsWith('1,');
  }

  async function installed(table: string): Promise<string[]> {
    const rows = await connection.sql(
      `SELECT p.proname AS name FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
        WHERE s.nspname = $1 AND p.proname LIKE $2 ORDER BY 1`,
      [schema, `${table}\\_%`],
    );
    return rows.map((r) => String(r.name));
  }

  const policy = gcra({ limit: 3, periodMs: 60_000, name: 'api' });

  it('a store refuses a table migrated by another version only: ERR_STORE_VERSION, saying to run migrate()', async () => {
    const table = 'old_only';
    await connection.sql(migrationStatement(sqlNames(schema, table, OTHER), false));
    const store = postgresStore({ client: connection.client, schema, table });
    const limiter = createLimiter({ store, policies: [policy], clock: manualClock({ startMs: SCENARIO_START_MS }) });
    const error = await limiter.limit('k').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isFloodgateError(error) && error.code).toBe('ERR_STORE_VERSION');
    expect((error as Error).message).toBe(
      `the postgres store runs version ${PORT_VERSION} of its functions, but "${schema}"."old_only" has only version ${OTHER}: run store.migrate() to install ${PORT_VERSION} beside them`,
    );
    await store.close();
  });

  it('the port from before versions is another version too', async () => {
    const table = 'unversioned';
    await connection.sql(migrationStatement(sqlNames(schema, table, ''), false));
    const store = postgresStore({ client: connection.client, schema, table });
    const error = await store
      .decide({
        prefix: 'p',
        key: 'k',
        policies: [compilePolicy(policy)],
        cost: 1,
        commit: true,
        nowUs: 1,
        maxDelayUs: 0,
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(isFloodgateError(error) && [error.code, error.message.includes('the one from before versions')]).toEqual([
      'ERR_STORE_VERSION',
      true,
    ]);
    await store.close();
  });

  it('a table never migrated is missing, not of another version', async () => {
    const store = postgresStore({ client: connection.client, schema, table: 'never' });
    const error = await store
      .decide({
        prefix: 'p',
        key: 'k',
        policies: [compilePolicy(policy)],
        cost: 1,
        commit: true,
        nowUs: 1,
        maxDelayUs: 0,
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(isFloodgateError(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
    expect((error as Error).message).toContain('call store.migrate() first');
  });

  it('during a rolling deploy both versions decide on one table, sharing state; then the old one is dropped', async () => {
    const table = 'rolling';
    const old = sqlNames(schema, table, OTHER);
    await connection.sql(migrationStatement(old, false));
    const store = postgresStore({ client: connection.client, schema, table });
    await store.migrate();
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const prefix = uniquePrefix('rolling');
    const limiter = createLimiter({ store, policies: [policy], clock, prefix });
    const row = stateKey(prefix, encodeKey('k'), compilePolicy(policy));
    // 3 per minute, shared: the new process takes two, the old one the third, and then both are refused.
    expect((await limiter.limit('k')).allowed).toBe(true);
    expect(await otherProcess(old, row, clock.nowUs())).toBe(true);
    expect((await limiter.limit('k')).remaining).toBe(0);
    expect(await otherProcess(old, row, clock.nowUs())).toBe(false);
    expect((await limiter.limit('k')).allowed).toBe(false);

    const names = portFunctionNames();
    expect(await installed(table)).toEqual(
      [
        ...names.map((n) => functionName(table, n, OTHER)),
        ...names.map((n) => functionName(table, n, PORT_VERSION)),
      ].sort(),
    );
    expect(await store.dropOtherVersions()).toEqual([OTHER]);
    expect(await installed(table)).toEqual(names.map((n) => functionName(table, n, PORT_VERSION)).sort());
    expect(await store.dropOtherVersions()).toEqual([]);
    expect((await limiter.status('k')).remaining).toBe(0);
    await store.close();
  });

  it('dropping other versions of one table leaves every other table alone, whatever its name', async () => {
    // `t` and `t_x`: a function of one can never be taken for one of the other.
    for (const table of ['t', 't_x']) await connection.sql(migrationStatement(sqlNames(schema, table, OTHER), false));
    const store = postgresStore({ client: connection.client, schema, table: 't' });
    await store.migrate();
    const before = await installed('t_x');
    expect(await store.dropOtherVersions()).toEqual([OTHER]);
    expect(await installed('t_x')).toEqual(before);
    expect(before.length).toBe(portFunctionNames().length);
    await store.close();
  });

  it('every name fits PostgreSQL identifiers (63 bytes) for the longest table name', async () => {
    const table = 'x'.repeat(40);
    const store = postgresStore({ client: connection.client, schema, table });
    await store.migrate();
    expect(await installed(table)).toEqual(
      portFunctionNames()
        .map((n) => functionName(table, n, PORT_VERSION))
        .sort(),
    );
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const limiter = createLimiter({ store, policies: [policy], clock });
    expect((await limiter.limit('k')).remaining).toBe(2);
    await store.close();
  });
});
