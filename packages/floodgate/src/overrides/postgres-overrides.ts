import { invalid } from '../errors.js';
import { checkOptionsObject, hasMethods } from '../stores/kit/options.js';
import type { PostgresClient } from '../stores/postgres/postgres-client.js';
import { quoteIdentifier, validateIdentifier } from '../stores/sql/common.js';
import { type OverrideBackend, prefixEnd } from './backend.js';

/** Options of {@link postgresOverrides}. */
export interface PostgresOverridesOptions {
  /** An adapted driver: `fromPg(pool)` or `fromPostgres(sql)`. */
  client: PostgresClient;
  /** Schema of the tables, created by `migrate()` when missing. @default 'public' */
  schema?: string;
  /** The records' table; the version lives in `<table>_version`. @default 'floodgate_overrides' */
  table?: string;
}

/** Overrides in PostgreSQL: {@link OverrideBackend} plus its explicit, idempotent migration. */
export interface PostgresOverrides extends OverrideBackend {
  /** The channel each change is notified on (`pg_notify`), for caches that `LISTEN`. */
  readonly channel: string;
  /** Creates the schema, the two tables and the expiry index when missing. */
  migrate(): Promise<void>;
}

/**
 * Overrides in PostgreSQL, in a table of their own (`id text COLLATE "C"`, `record text`, `expires_at
 * bigint`) and a one-row version table. Every change is one statement that also moves the version and
 * notifies `channel`.
 *
 * @example
 * ```ts
 * const backend = postgresOverrides({ client: fromPg(pool) });
 * await backend.migrate();
 * ```
 */
export function postgresOverrides(options: PostgresOverridesOptions): PostgresOverrides {
  checkOptionsObject(options, 'postgresOverrides(options)', 'an options object');
  const client = options.client;
  if (!hasMethods(client, 'query')) {
    throw invalid('ERR_INVALID_OPTION', 'client', client, 'an adapted driver (fromPg or fromPostgres)');
  }
  const schema = validateIdentifier('schema', options.schema ?? 'public');
  const table = validateIdentifier('table', options.table ?? 'floodgate_overrides');
  const s = quoteIdentifier(schema);
  const t = `${s}.${quoteIdentifier(table)}`;
  const v = `${s}.${quoteIdentifier(`${table}_version`)}`;
  const channel = `${schema}_${table}`;
  const bump = `UPDATE ${v} SET version = version + 1 WHERE id = 1 RETURNING version, pg_notify('${channel}', $1)`;
  const name = (what: string) => `fg_ov_${what}_${schema}_${table}`.slice(0, 63);
  return {
    name: 'postgres',
    channel,
    async migrate() {
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`, []);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${t} (id text COLLATE "C" PRIMARY KEY, record text NOT NULL, expires_at bigint)`,
        [],
      );
      await client.query(
        `CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_expires_at`)} ON ${t} (expires_at) WHERE expires_at IS NOT NULL`,
        [],
      );
      await client.query(`CREATE TABLE IF NOT EXISTS ${v} (id int PRIMARY KEY, version bigint NOT NULL)`, []);
      await client.query(`INSERT INTO ${v} (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING`, []);
    },
    async read(ids) {
      if (ids.length === 0) return [];
      const list = ids.map((_, i) => `$${i + 1}`).join(', ');
      const rows = await client.query(
        `SELECT id, record FROM ${t} WHERE id IN (${list})`,
        ids,
        name(`read${ids.length}`),
      );
      const found = new Map(rows.map((r) => [String(r.id), String(r.record)]));
      return ids.map((id) => found.get(id));
    },
    async write(id, record, expiresAtMs) {
      await client.query(
        `WITH w AS (INSERT INTO ${t} (id, record, expires_at) VALUES ($1, $2, NULLIF($3, '')::bigint)
           ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, expires_at = EXCLUDED.expires_at RETURNING 1)
         ${bump.replace('WHERE id = 1', 'WHERE id = 1 AND EXISTS (SELECT 1 FROM w)')}`,
        [id, record, expiresAtMs === undefined ? '' : String(expiresAtMs)],
        name('write'),
      );
    },
    async remove(id) {
      const rows = await client.query(
        `WITH d AS (DELETE FROM ${t} WHERE id = $1 RETURNING id)
         ${bump.replace('WHERE id = 1', 'WHERE id = 1 AND EXISTS (SELECT 1 FROM d)')}`,
        [id],
        name('remove'),
      );
      return rows.length > 0;
    },
    async page(after, limit, startsWith) {
      const rows = await client.query(
        `SELECT id, record FROM ${t} WHERE id > $1 AND id >= $2 AND ($3 = '' OR id < $3) ORDER BY id LIMIT $4::int`,
        [after, startsWith, startsWith === '' ? '' : prefixEnd(startsWith), String(limit)],
        name('page'),
      );
      return rows.map((r) => ({ id: String(r.id), record: String(r.record) }));
    },
    async version() {
      const rows = await client.query(`SELECT version FROM ${v} WHERE id = 1`, [], name('version'));
      return String(rows[0]?.version ?? '0');
    },
    async prune(nowMs, limit) {
      const rows = await client.query(
        `WITH d AS (DELETE FROM ${t} WHERE id IN (SELECT id FROM ${t} WHERE expires_at <= $2::bigint LIMIT $3::int) RETURNING id)
         UPDATE ${v} SET version = version + 1 WHERE id = 1 AND EXISTS (SELECT 1 FROM d)
         RETURNING (SELECT count(*) FROM d) AS n, pg_notify('${channel}', $1)`,
        ['*', String(nowMs), String(limit)],
        name('prune'),
      );
      return Number(rows[0]?.n ?? 0);
    },
  };
}
