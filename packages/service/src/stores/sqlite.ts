import Database from 'better-sqlite3';
import { sqliteOverrides } from 'floodgate/overrides';
import { sqlitePermitStore, sqliteStore } from 'floodgate/sqlite';
import { type OpenedStore, StoreUrlError } from './opened.js';

/**
 * Opens `sqlite:<path>[?table=name]` with better-sqlite3 and creates the table if missing. Several
 * service processes on one machine may share the file (WAL mode).
 */
export function openSqlite(url: string): OpenedStore {
  let rest = url.slice('sqlite:'.length);
  if (rest.startsWith('//')) rest = rest.slice(2);
  let table: string | undefined;
  const query = rest.indexOf('?');
  if (query !== -1) {
    for (const [name, value] of new URLSearchParams(rest.slice(query + 1))) {
      if (name !== 'table')
        throw new StoreUrlError(`sqlite store: unknown parameter ${JSON.stringify(name)} (known: table)`);
      table = value;
    }
    rest = rest.slice(0, query);
  }
  if (rest === '') throw new StoreUrlError('sqlite store: give a file path, as in sqlite:./floodgate.db');
  let database: Database.Database;
  try {
    database = new Database(rest);
  } catch (error) {
    throw new StoreUrlError(
      `sqlite store: cannot open ${JSON.stringify(rest)}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  try {
    const store = sqliteStore({ database, ...(table === undefined ? {} : { table }) });
    store.migrate();
    // The overrides' tables: created synchronously (better-sqlite3), before the service serves.
    const overrides = sqliteOverrides({ database });
    void overrides.migrate();
    // The permits of concurrency rules, in a table of their own beside the state's.
    const permits = sqlitePermitStore({
      database,
      ...(table === undefined ? {} : { table: `${table}_permits` }),
    });
    permits.migrate();
    return {
      store,
      overrides,
      permits,
      description: `sqlite:${rest}${table === undefined ? '' : ` (table ${table})`}`,
      close: async () => {
        database.close();
      },
    };
  } catch (error) {
    database.close();
    throw new StoreUrlError(`sqlite store: ${error instanceof Error ? error.message : String(error)}`);
  }
}
