import { FloodgateError, isFloodgateError } from '../errors.js';

/**
 * What a store error says about the store, which decides who hears of it:
 *
 * - `'input'`: the call itself is invalid (`ERR_INVALID_*`). Thrown to the caller; the store is not at fault.
 * - `'fault'`: the store is unreachable, slow or failing (a refused or reset connection, a timeout,
 *   PostgreSQL classes 08, 53, 57, 58, XX, a Redis `LOADING`, `BUSY`, `OOM`, `READONLY`…, and every
 *   error not recognised below). It drives the breaker, the `failure` policy and `storeError` events.
 * - `'full'`: the store holds as many keys as it may and refuses new ones (`ERR_STORE_FULL`). Healthy
 *   for the keys it holds: the `failure` policy answers the call and a `storeError` event reports it,
 *   but it never counts toward the breaker.
 * - `'rejected'`: the store answered and refused this one request (`ERR_STORE_REJECTED`): a PostgreSQL
 *   data exception (class 22), an integrity or syntax error (classes 23, 42), a PL/pgSQL `RAISE` (P0),
 *   a Redis script runtime error or a key of another type (`WRONGTYPE`), an SQLite constraint. Thrown to
 *   the caller; never counted by the breaker, never degraded, no `storeError` event: nothing a caller
 *   sends may turn the limiter off for everyone else.
 */
export type StoreErrorClass = 'input' | 'fault' | 'full' | 'rejected';

/**
 * PostgreSQL SQLSTATE classes in which the server refused one statement for what it carried, the
 * store being healthy: cardinality (21), data exception (22), integrity (23), triggered data change
 * (27), SQL routine (2F), external routine (38, 39), syntax or access rule (42), with check option
 * (44), program limit (54), PL/pgSQL (P0). Missing tables or functions (42P01, 42883, 3F000) are a
 * store not migrated: a fault of configuration that every call shares, so a fault.
 */
const PG_REJECTED_CLASSES = new Set(['21', '22', '23', '27', '2F', '38', '39', '42', '44', '54', 'P0']);
const PG_NOT_MIGRATED = new Set(['42P01', '42883', '3F000']);
/**
 * PostgreSQL SQLSTATEs that no retry mends: the database named does not exist (3D000), the login was
 * refused (28000, 28P01).
 */
const PG_PERMANENT = new Set(['3D000', '28000', '28P01']);
/** Redis replies that no retry mends: a password is wanted, or the one given is wrong. */
const REDIS_PERMANENT = /^(NOAUTH|WRONGPASS) /;

/**
 * Whether a store error says the store cannot work as configured (a missing database, a refused login,
 * a Redis that wants a password), so that retrying will not help: reported as `ERR_STORE_MISCONFIGURED`
 * by {@link toStoreError}. Follows `cause` through floodgate's own errors (a timeout that says why).
 */
export function isPermanentStoreError(error: unknown): boolean {
  for (let e = error, depth = 0; typeof e === 'object' && e !== null && depth < 4; depth++) {
    if (isFloodgateError(e) && e.code === 'ERR_STORE_MISCONFIGURED') return true;
    const code = (e as { code?: unknown }).code;
    if (
      typeof code === 'string' &&
      PG_PERMANENT.has(code) &&
      typeof (e as { severity?: unknown }).severity === 'string'
    ) {
      return true;
    }
    if (e instanceof Error && code === undefined && REDIS_PERMANENT.test(e.message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** SQLite result codes that refuse one statement for its values; every other one (BUSY, IOERR, FULL…) is a fault. */
const SQLITE_REJECTED = /^SQLITE_(CONSTRAINT|MISMATCH|TOOBIG|RANGE)(_|$)/;

/**
 * Sorts an error a store call threw into the classes of {@link StoreErrorClass}. The one place that knows
 * the servers' error codes: the limiter's store-call path and the service both use it. Reads codes and
 * fields, never prose, except for Redis, whose replies carry their code as the first word of the message
 * and whose script runtime errors carry only the message.
 */
export function classifyStoreError(error: unknown): StoreErrorClass {
  if (isFloodgateError(error)) {
    switch (error.code) {
      case 'ERR_INVALID_COST':
      case 'ERR_INVALID_KEY':
      case 'ERR_INVALID_OPTION':
      case 'ERR_INVALID_POLICY':
        return 'input';
      case 'ERR_STORE_FULL':
        return 'full';
      case 'ERR_STORE_REJECTED':
        return 'rejected';
      default:
        return 'fault';
    }
  }
  if (typeof error !== 'object' || error === null) return 'fault';
  const code = (error as { code?: unknown }).code;
  // pg's DatabaseError and Postgres.js's PostgresError both carry the SQLSTATE as `code` and a `severity`.
  if (typeof code === 'string' && typeof (error as { severity?: unknown }).severity === 'string') {
    if (/^[0-9A-Z]{5}$/.test(code)) {
      if (PG_NOT_MIGRATED.has(code)) return 'fault';
      if (code === '40002' || PG_REJECTED_CLASSES.has(code.slice(0, 2))) return 'rejected';
      return 'fault';
    }
  }
  if (typeof code === 'string' && code.startsWith('SQLITE_')) return SQLITE_REJECTED.test(code) ? 'rejected' : 'fault';
  if (error instanceof Error && code === undefined) {
    const message = error.message;
    // A key of another type under the limiter's name, and a script that raised at run time (Redis 7:
    // `ERR user_script:12: …`, Redis 6: `ERR Error running script …`). Busy, loading, out-of-memory,
    // read-only and cluster-state replies are faults, like every reply not listed here.
    if (message.startsWith('WRONGTYPE ')) return 'rejected';
    if (message.startsWith('ERR ') && (message.includes('user_script:') || message.includes('Error running script'))) {
      return 'rejected';
    }
  }
  return 'fault';
}

/**
 * A store call's error as a {@link FloodgateError}: errors already in the family stay as they are; a
 * rejection becomes `ERR_STORE_REJECTED`, anything else `ERR_STORE_UNAVAILABLE`, the original kept as `cause`.
 */
export function toStoreError(storeName: string, error: unknown): FloodgateError {
  if (isFloodgateError(error)) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (isPermanentStoreError(error)) {
    return new FloodgateError(
      'ERR_STORE_MISCONFIGURED',
      `the ${storeName} store cannot work as configured (retrying will not help): ${message}`,
      { cause: error },
    );
  }
  if (classifyStoreError(error) === 'rejected') {
    return new FloodgateError('ERR_STORE_REJECTED', `the ${storeName} store refused the call: ${message}`, {
      cause: error,
    });
  }
  return new FloodgateError('ERR_STORE_UNAVAILABLE', `the ${storeName} store failed: ${message}`, { cause: error });
}
