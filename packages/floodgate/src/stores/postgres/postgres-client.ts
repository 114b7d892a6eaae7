import { invalid } from '../../errors.js';

/**
 * What the PostgreSQL store needs of a driver: run one statement with text parameters, on any pooled
 * connection, outside any transaction of the caller, and resolve to its rows. `name` identifies a
 * statement the store runs again and again, so the driver may prepare it once per connection.
 */
export interface PostgresClient {
  query(text: string, params: readonly string[], name?: string): Promise<readonly Record<string, unknown>[]>;
}

/** The part of a `pg` `Pool` (or `Client`) the adapter uses. */
export interface PgQueryable {
  query(config: { text: string; values?: unknown[]; name?: string }): Promise<{ rows: Record<string, unknown>[] }>;
}

/**
 * Adapts a `pg` `Pool` (node-postgres). Repeated statements are named, so each pooled connection
 * prepares them once. Pass a Pool rather than a single Client: several statements run at once.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * const store = postgresStore({ client: fromPg(new pg.Pool({ connectionString })) });
 * ```
 */
export function fromPg(pool: PgQueryable): PostgresClient {
  if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'fromPg(pool)', pool, 'a pg Pool');
  }
  return {
    async query(text, params, name) {
      const config: { text: string; values: unknown[]; name?: string } = { text, values: params as string[] };
      if (name !== undefined) config.name = name;
      const result = await pool.query(config);
      return result.rows;
    },
  };
}

/** The part of a `postgres` (Postgres.js) `sql` instance the adapter uses. */
export interface PostgresJsSql {
  unsafe(query: string, parameters?: unknown[], options?: { prepare?: boolean }): PromiseLike<unknown>;
}

/**
 * Adapts a `postgres` (Postgres.js) `sql` instance. Repeated statements are prepared.
 *
 * @example
 * ```ts
 * import postgres from 'postgres';
 * const store = postgresStore({ client: fromPostgres(postgres(connectionString)) });
 * ```
 */
export function fromPostgres(sql: PostgresJsSql): PostgresClient {
  if ((typeof sql !== 'object' && typeof sql !== 'function') || sql === null || typeof sql.unsafe !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'fromPostgres(sql)', sql, 'a postgres (Postgres.js) sql instance');
  }
  return {
    async query(text, params, name) {
      const rows = await sql.unsafe(text, params as string[], { prepare: name !== undefined });
      return rows as readonly Record<string, unknown>[];
    },
  };
}
