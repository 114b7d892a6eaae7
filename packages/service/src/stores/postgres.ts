import { postgresOverrides } from 'floodgate/overrides';
import { fromPg, postgresPermitStore, postgresStore } from 'floodgate/postgres';
import pg from 'pg';
import { type OpenedStore, redact, StoreUrlError } from './opened.js';

/** Parameters of a `postgres://` URL that configure the store rather than the connection. */
const STORE_PARAMETERS = ['table', 'schema', 'unlogged'];

/**
 * Opens `postgres://user:password@host:port/db[?table=…&schema=…&unlogged=true]` with a `pg` pool. The
 * table and its functions are created by `migrate()` in {@link OpenedStore.prepare}, retried until the
 * server answers, so the service starts (unready) while PostgreSQL is down.
 */
export function openPostgres(url: string): OpenedStore {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new StoreUrlError(`invalid PostgreSQL URL ${JSON.stringify(redact(url))}`);
  }
  const options: { table?: string; schema?: string; unlogged?: boolean } = {};
  for (const name of STORE_PARAMETERS) {
    const value = parsed.searchParams.get(name);
    if (value === null) continue;
    parsed.searchParams.delete(name);
    if (name === 'unlogged') {
      if (value !== 'true' && value !== 'false')
        throw new StoreUrlError('postgres store: unlogged must be true or false');
      options.unlogged = value === 'true';
    } else {
      options[name as 'table' | 'schema'] = value;
    }
  }
  const pool = new pg.Pool({ connectionString: parsed.toString(), max: 8, connectionTimeoutMillis: 2000 });
  pool.on('error', () => {});
  let store: ReturnType<typeof postgresStore>;
  let permits: ReturnType<typeof postgresPermitStore>;
  try {
    store = postgresStore({ client: fromPg(pool), ...options });
    // The permits of concurrency rules: tables of their own in the same schema.
    permits = postgresPermitStore({
      client: fromPg(pool),
      ...(options.schema === undefined ? {} : { schema: options.schema }),
      ...(options.table === undefined ? {} : { table: `${options.table}_permits` }),
    });
  } catch (error) {
    void pool.end();
    throw new StoreUrlError(`postgres store: ${error instanceof Error ? error.message : String(error)}`);
  }
  let migrated: Promise<void> | undefined;
  const overrides = postgresOverrides({
    client: fromPg(pool),
    ...(options.schema === undefined ? {} : { schema: options.schema }),
  });
  return {
    store,
    overrides,
    permits,
    description: redact(url),
    prepare: () => {
      migrated ??= Promise.all([store.migrate(), overrides.migrate(), permits.migrate()]).then(
        () => undefined,
        (error: unknown) => {
          migrated = undefined;
          throw error;
        },
      );
      return migrated;
    },
    close: async () => {
      await store.close();
      await pool.end();
    },
  };
}
