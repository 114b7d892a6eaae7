import pg from 'pg';
import postgres from 'postgres';
import { fromPg, fromPostgres, type PostgresClient } from '../../../src/stores/postgres/index.js';

/** The test server: PostgreSQL on 127.0.0.1:5432, database `test`, user postgres (trust auth). */
export const PG_CONFIG = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' } as const;

/** A schema no other test run uses; dropped with everything in it when the run ends. */
export function uniqueSchema(label: string): string {
  return `fg_${label}_${process.pid}_${Date.now().toString(36)}`;
}

/**
 * What is wrong when the test database cannot be used, in the words a newcomer needs: the server is not
 * running, the `test` database is missing, or the login is refused, each with its fix. Reads the
 * driver's `code` (a PostgreSQL SQLSTATE or a Node.js system error code), never its message.
 */
export function describePostgresProblem(
  error: unknown,
  config: { host: string; port: number; user: string; database: string } = PG_CONFIG,
): string {
  const where = `PostgreSQL at ${config.host}:${config.port}`;
  const code = (error as { code?: unknown } | null)?.code;
  const setup = 'scripts/setup-debian.sh sets it all up';
  switch (code) {
    case 'ECONNREFUSED':
      return `${where} refuses connections: no server is running there (start it: pg_ctlcluster --skip-systemctl-redirect <version> main start; ${setup})`;
    case '3D000':
      return `${where} answers, but its database "${config.database}" does not exist (create it: createdb -h ${config.host} -U ${config.user} ${config.database}; ${setup})`;
    case '28000':
    case '28P01':
      return `${where} refuses the login of user "${config.user}" without a password (the tests expect trust authentication for 127.0.0.1 in pg_hba.conf; ${setup})`;
    case 'ETIMEDOUT':
      return `${where} does not answer within 3 s (a firewall, or a server too busy to accept)`;
    default:
      return `${where} cannot be used: ${error instanceof Error ? error.message : String(error)}${typeof code === 'string' ? ` (${code})` : ''}`;
  }
}

/** True when the server answers; under CI=true an unusable server fails the run instead. */
export async function requirePostgres(): Promise<boolean> {
  const pool = new pg.Pool({ ...PG_CONFIG, max: 1, connectionTimeoutMillis: 3000 });
  try {
    await pool.query('SELECT 1');
    return true;
  } catch (error) {
    const problem = describePostgresProblem(error);
    if (process.env.CI === 'true') throw new Error(`${problem}, and CI=true: the PostgreSQL tests cannot be skipped`);
    console.warn(`\n!!! ${problem}: SKIPPING the PostgreSQL tests (they fail under CI=true) !!!\n`);
    return false;
  } finally {
    await pool.end();
  }
}

export type Driver = 'pg' | 'postgres';
export const DRIVERS: readonly Driver[] = ['pg', 'postgres'];

/** A pooled connection through one driver, adapted for the store. */
export interface Connection {
  client: PostgresClient;
  /** Runs a statement for the test itself. */
  sql(text: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

export function connect(driver: Driver, max = 8): Connection {
  if (driver === 'pg') {
    const pool = new pg.Pool({ ...PG_CONFIG, max });
    return {
      client: fromPg(pool),
      sql: async (text, params) => (await pool.query(text, params)).rows,
      close: () => pool.end(),
    };
  }
  const sql = postgres({ ...PG_CONFIG, max, onnotice: () => {} });
  return {
    client: fromPostgres(sql),
    sql: async (text, params) => [...(await sql.unsafe(text, (params ?? []) as string[]))],
    close: () => sql.end(),
  };
}
