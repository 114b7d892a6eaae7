import { FloodgateError } from 'floodgate';
import { type CasStore, casStore } from 'floodgate/store';

/** What the store needs of a PostgreSQL client: node-postgres's `Pool` has it. */
export interface Queryable {
  query(text: string, values: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** Options of {@link pgCasStore}. */
export interface PgCasStoreOptions {
  /** A node-postgres pool; the store never closes it. */
  pool: Queryable;
  /** The table of records, created by `migrate()`: a plain lower-case identifier. @default 'floodgate_records' */
  table?: string;
}

/** A compare-and-swap store on a PostgreSQL table of versioned records. */
export interface PgCasStore extends CasStore {
  /** Creates the table and its expiry index when missing. Idempotent. */
  migrate(): Promise<void>;
  /** Deletes at most `limit` records that expired before `nowMs`; resolves to how many it deleted. */
  prune(nowMs?: number, limit?: number): Promise<number>;
}

/**
 * The kit's compare-and-swap store (`casStore`) on a table of versioned records: a record is read with its
 * version, and written back only `WHERE version` is still the one read, as DynamoDB's conditional writes,
 * etcd's transactions or Consul's `?cas=` do. The kit runs the model on the record, batches the calls on
 * one key into one write, and runs the calls again when another process wrote first.
 *
 * Use: `const store = pgCasStore({ pool: new pg.Pool() }); await store.migrate();`, then
 * `createLimiter({ store, policies })` as with any store.
 */
export function pgCasStore(options: PgCasStoreOptions): PgCasStore {
  const { pool } = options;
  const table = options.table ?? 'floodgate_records';
  if (!/^[a-z_][a-z0-9_]{0,40}$/.test(table)) {
    throw new FloodgateError('ERR_INVALID_OPTION', `table must be a plain identifier, got ${table}`, {
      option: 'table',
    });
  }
  const t = `"${table}"`;
  // The version is a bigint, which node-postgres hands over as a string: compared as it came.
  const store = casStore<string>({
    name: 'pg-cas',
    client: {
      async get(key) {
        const { rows } = await pool.query(`SELECT value, version FROM ${t} WHERE key = $1`, [key]);
        const row = rows[0];
        return row === undefined ? undefined : { value: String(row.value), version: String(row.version) };
      },
      async compareAndSet(key, expected, value, expiresAtMs) {
        const { rowCount } =
          expected === undefined
            ? await pool.query(
                `INSERT INTO ${t} (key, value, version, expires_at) VALUES ($1, $2, 1, $3)
                 ON CONFLICT (key) DO NOTHING`,
                [key, value, expiresAtMs],
              )
            : await pool.query(
                `UPDATE ${t} SET value = $2, version = version + 1, expires_at = $3
                 WHERE key = $1 AND version = $4`,
                [key, value, expiresAtMs, expected],
              );
        return rowCount === 1;
      },
      async compareAndDelete(key, expected) {
        const { rowCount } = await pool.query(`DELETE FROM ${t} WHERE key = $1 AND version = $2`, [key, expected]);
        return rowCount === 1;
      },
    },
  });
  return {
    ...store,
    async migrate() {
      await pool.query(
        `CREATE TABLE IF NOT EXISTS ${t} (
           key text PRIMARY KEY, value text NOT NULL, version bigint NOT NULL, expires_at bigint NOT NULL)`,
        [],
      );
      await pool.query(`CREATE INDEX IF NOT EXISTS "${table}_expires_at" ON ${t} (expires_at)`, []);
    },
    // Expiry is on the callers' clock (plus the kit's grace): a record left past it decides like none.
    async prune(nowMs = Date.now(), limit = 1000) {
      const { rowCount } = await pool.query(
        `DELETE FROM ${t} WHERE key IN (SELECT key FROM ${t} WHERE expires_at < $1 LIMIT $2)`,
        [nowMs, limit],
      );
      return rowCount ?? 0;
    },
  };
}
