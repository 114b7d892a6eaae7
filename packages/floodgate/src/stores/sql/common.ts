import { invalid } from '../../errors.js';
import { expiryOf as expiryOnGrain } from '../kit/time.js';

export { stateKey, stateKeys } from '../kit/keys.js';

/**
 * SQL identifiers this project creates or accepts: lower-case letters, digits and `_`, starting with a
 * letter or `_`, at most 40 characters so that derived names (`<table>_expires_at`, `<table>_decide`)
 * stay within PostgreSQL's 63-byte limit. Identifiers are also always quoted where they are used.
 */
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,39}$/;

/** Checks a table or schema name, refusing anything but a plain identifier with `ERR_INVALID_OPTION`. */
export function validateIdentifier(option: string, value: unknown): string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw invalid('ERR_INVALID_OPTION', option, value, 'an identifier of 1 to 40 characters of a-z 0-9 _');
  }
  return value;
}

/** `"name"`: an identifier already checked by {@link validateIdentifier}, quoted for SQL. */
export function quoteIdentifier(name: string): string {
  return `"${name}"`;
}

/**
 * Expiries are kept in whole minutes, rounded up: a row lives at most a minute longer (an expired state
 * decides exactly like no state), and a busy key updated many times within a minute keeps the same
 * expiry, so PostgreSQL updates it in place without touching its indexes (a HOT update).
 */
export const EXPIRY_GRAIN_US = 60_000_000;

/** When a row may be deleted: the moment its state is back to untouched, rounded up to EXPIRY_GRAIN_US. */
export function expiryOf(nowUs: number, resetAfterUs: number): number {
  return expiryOnGrain(nowUs, resetAfterUs, EXPIRY_GRAIN_US);
}

/**
 * How long after its expiry a row is deleted, µs. A key that comes back within this time is updated in
 * place instead of deleted and created again (cheaper for both databases), and processes whose injected
 * clocks lag a little never see a live row of theirs pruned. Expired on whose clock: the earlier of the
 * deciding call's and the database server's, so a clock running ahead never deletes a live row.
 */
export const PRUNE_GRACE_US = 60_000_000;
