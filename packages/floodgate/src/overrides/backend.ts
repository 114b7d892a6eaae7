/**
 * Where overrides are kept: plain records (JSON text) under string ids, in their own key space or
 * table, never in the decision scripts. Every change moves a version, which caches poll to notice
 * changes made elsewhere. Each store offers one (`memoryOverrides`, `redisOverrides`,
 * `postgresOverrides`, `sqliteOverrides`); the validation, expiry and cache around it are shared.
 */
export interface OverrideBackend {
  /** `memory`, `redis`, `postgres`, `sqlite`. */
  readonly name: string;
  /** The records of these ids, in order; `undefined` for an id without one. */
  read(ids: readonly string[]): Promise<(string | undefined)[]>;
  /** Stores a record (replacing any), moves the version; `expiresAtMs` lets the store drop it later. */
  write(id: string, record: string, expiresAtMs: number | undefined): Promise<void>;
  /** Removes a record, moves the version; true when there was one. */
  remove(id: string): Promise<boolean>;
  /** Up to `limit` records with ids after `after` (`''`: from the start) starting with `startsWith`, by id. */
  page(after: string, limit: number, startsWith: string): Promise<{ id: string; record: string }[]>;
  /** The change counter: any write or removal anywhere changes it. */
  version(): Promise<string>;
  /** Removes up to `limit` records that expired before `nowMs`; resolves to how many. */
  prune(nowMs: number, limit: number): Promise<number>;
}

/**
 * The least string above every string that starts with `prefix` (an exclusive bound for range scans):
 * the prefix with its last character incremented. Prefixes here end in `:` (ASCII), so the bound is the
 * same in UTF-16 (JavaScript), UTF-8 byte order (Redis, SQLite) and PostgreSQL's "C" collation.
 */
export function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

/** Compares ids in UTF-8 byte order, the order of Redis, SQLite and PostgreSQL's "C" collation. */
export function compareIds(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}
