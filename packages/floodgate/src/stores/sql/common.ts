import { invalid } from '../../errors.js';
import { encodeKey, storageKey } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';

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
 * The row key of one policy's state for one user key. The algorithm is part of it, like in the
 * reference store, so two limiters that give one name to different algorithms never read each other's
 * state layout.
 */
export function stateKey(prefix: string, encodedKey: string, c: CompiledPolicy): string {
  return storageKey(prefix, encodedKey, `${c.name}:${c.kind}`);
}

/** The row keys of a call, in policy order. */
export function stateKeys(prefix: string, key: string, policies: readonly CompiledPolicy[]): string[] {
  const encoded = encodeKey(key);
  return policies.map((c) => stateKey(prefix, encoded, c));
}

/**
 * Expiries are kept in whole minutes, rounded up: a row lives at most a minute longer (an expired state
 * decides exactly like no state), and a busy key updated many times within a minute keeps the same
 * expiry, so PostgreSQL updates it in place without touching its indexes (a HOT update).
 */
export const EXPIRY_GRAIN_US = 60_000_000;

/** When a row may be deleted: the moment its state is back to untouched, rounded up to EXPIRY_GRAIN_US. */
export function expiryOf(nowUs: number, resetAfterUs: number): number {
  return Math.ceil((nowUs + resetAfterUs) / EXPIRY_GRAIN_US) * EXPIRY_GRAIN_US;
}

/**
 * How long after its expiry a row is deleted, µs. A key that comes back within this time is updated in
 * place instead of deleted and created again (cheaper for both databases), and processes whose injected
 * clocks lag a little never see a live row of theirs pruned.
 */
export const PRUNE_GRACE_US = 60_000_000;
