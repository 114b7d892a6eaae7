import pg from 'pg';
import postgres from 'postgres';
import { fromPg, fromPostgres, type PostgresClient } from '../../../src/stores/postgres/index.js';

/** The test server: PostgreSQL on 127.0.0.1:5432, database `test`, user postgres (trust auth). */
export const PG_CONFIG = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' } as const;

/** A schema no other test run uses; dropped with everything in it when the run ends. */
export function uniqueSchema(label: string): string {
  return `fg_${label}_${process.pid}_${Date.now().toString(36)}`;
}

/** True when the server answers; under CI=true an unreachable server fails the run instead. */
export async function requirePostgres(): Promise<boolean> {
  const pool = new pg.Pool({ ...PG_CONFIG, max: 1, connectionTimeoutMillis: 3000 });
  try {
    await pool.query('SELECT 1');
    return true;
  } catch (error) {
    if (process.env.CI === 'true') {
      throw new Error(
        `PostgreSQL at 127.0.0.1:5432 is not reachable, and CI=true: its tests cannot be skipped (${String(error)})`,
      );
    }
    console.warn(
      `\n!!! PostgreSQL at 127.0.0.1:5432 is not reachable: SKIPPING the PostgreSQL tests (they fail under CI=true) !!!\n`,
    );
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
