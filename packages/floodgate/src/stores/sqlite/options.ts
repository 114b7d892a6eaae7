import { invalid } from '../../errors.js';
import { checkOptionsObject, hasMethods, wholeOption } from '../kit/options.js';
import { validateIdentifier } from '../sql/common.js';

/** The part of a better-sqlite3 statement the store uses. */
export interface SqliteStatement {
  run(...params: unknown[]): unknown;
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/** The part of a better-sqlite3 `Database` the store uses (a structural seam: any compatible object works). */
export interface SqliteDatabase {
  prepare(sql: string): SqliteStatement;
  exec(sql: string): unknown;
  /** True while a transaction is open on this connection; the store then nests in a savepoint. */
  readonly inTransaction?: boolean;
}

/**
 * The options every SQLite store takes, checked: a better-sqlite3 `database`, a `table` name (`fallback`
 * when absent) and `busyTimeoutMs`.
 */
export function sqliteOptions(
  options: { database: unknown; table?: string | undefined; busyTimeoutMs?: number | undefined },
  factory: string,
  fallback: string,
): { database: SqliteDatabase; table: string; busyTimeoutMs: number } {
  checkOptionsObject(options, `${factory} options`);
  const database = options.database;
  if (!hasMethods(database, 'prepare', 'exec')) {
    throw invalid('ERR_INVALID_OPTION', 'database', database, 'a better-sqlite3 Database');
  }
  const table = validateIdentifier('table', options.table ?? fallback);
  const busyTimeoutMs = wholeOption(
    'busyTimeoutMs',
    options.busyTimeoutMs ?? 5000,
    0,
    undefined,
    'an integer number of ms ≥ 0',
  );
  return { database: database as SqliteDatabase, table, busyTimeoutMs };
}
