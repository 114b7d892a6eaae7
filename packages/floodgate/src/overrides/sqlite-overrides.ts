import { invalid } from '../errors.js';
import { checkOptionsObject, hasMethods } from '../stores/kit/options.js';
import { promised } from '../stores/kit/promised.js';
import { quoteIdentifier, validateIdentifier } from '../stores/sql/common.js';
import type { SqliteDatabase } from '../stores/sqlite/sqlite-store.js';
import { type OverrideBackend, prefixEnd } from './backend.js';

/** Options of {@link sqliteOverrides}. */
export interface SqliteOverridesOptions {
  /** A better-sqlite3 `Database` (or any object of the same shape). */
  database: SqliteDatabase;
  /** The records' table; the version lives in `<table>_version`. @default 'floodgate_overrides' */
  table?: string;
}

/** Overrides in SQLite: {@link OverrideBackend} plus its explicit, idempotent migration. */
export interface SqliteOverrides extends OverrideBackend {
  /** Creates the two tables and the expiry index when missing. */
  migrate(): Promise<void>;
}

/**
 * Overrides in SQLite, in a table of their own and a one-row version table; processes sharing the
 * database file see each other's changes through the version.
 */
export function sqliteOverrides(options: SqliteOverridesOptions): SqliteOverrides {
  checkOptionsObject(options, 'sqliteOverrides(options)', 'an options object');
  const db = options.database;
  if (!hasMethods(db, 'prepare')) {
    throw invalid('ERR_INVALID_OPTION', 'database', db, 'a better-sqlite3 Database');
  }
  const table = validateIdentifier('table', options.table ?? 'floodgate_overrides');
  const t = quoteIdentifier(table);
  const v = quoteIdentifier(`${table}_version`);
  const bump = `UPDATE ${v} SET version = version + 1 WHERE id = 1`;
  const inTransaction = <T>(fn: () => T): T => {
    db.exec('BEGIN IMMEDIATE');
    try {
      const out = fn();
      db.exec('COMMIT');
      return out;
    } catch (error) {
      db.exec('ROLLBACK');
      throw error;
    }
  };
  return {
    name: 'sqlite',
    migrate: () =>
      promised(() => {
        db.exec(`CREATE TABLE IF NOT EXISTS ${t} (id TEXT PRIMARY KEY, record TEXT NOT NULL, expires_at INTEGER)`);
        db.exec(`CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_expires_at`)} ON ${t} (expires_at)`);
        db.exec(`CREATE TABLE IF NOT EXISTS ${v} (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)`);
        db.exec(`INSERT OR IGNORE INTO ${v} (id, version) VALUES (1, 0)`);
      }),
    read: (ids) =>
      promised(() => {
        const get = db.prepare(`SELECT record FROM ${t} WHERE id = ?`);
        return ids.map((id) => (get.get(id) as { record: string } | undefined)?.record);
      }),
    write: (id, record, expiresAtMs) =>
      promised(() =>
        inTransaction(() => {
          db.prepare(
            `INSERT INTO ${t} (id, record, expires_at) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET record = excluded.record, expires_at = excluded.expires_at`,
          ).run(id, record, expiresAtMs ?? null);
          db.prepare(bump).run();
        }),
      ),
    remove: (id) =>
      promised(() =>
        inTransaction(() => {
          const changed = (db.prepare(`DELETE FROM ${t} WHERE id = ?`).run(id) as { changes: number }).changes;
          if (changed > 0) db.prepare(bump).run();
          return changed > 0;
        }),
      ),
    page: (after, limit, startsWith) =>
      promised(() => {
        const end = startsWith === '' ? null : prefixEnd(startsWith);
        const rows = db
          .prepare(`SELECT id, record FROM ${t} WHERE id > ? AND id >= ? AND (? IS NULL OR id < ?) ORDER BY id LIMIT ?`)
          .all(after, startsWith, end, end, limit) as { id: string; record: string }[];
        return rows.map((r) => ({ id: r.id, record: r.record }));
      }),
    version: () =>
      promised(() =>
        String((db.prepare(`SELECT version FROM ${v} WHERE id = 1`).get() as { version: number }).version),
      ),
    prune: (nowMs, limit) =>
      promised(() =>
        inTransaction(() => {
          const changed = (
            db
              .prepare(`DELETE FROM ${t} WHERE id IN (SELECT id FROM ${t} WHERE expires_at <= ? LIMIT ?)`)
              .run(nowMs, limit) as { changes: number }
          ).changes;
          if (changed > 0) db.prepare(bump).run();
          return changed;
        }),
      ),
  };
}
