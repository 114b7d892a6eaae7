import { invalid } from '../errors.js';

const LEASE_ID = /^[A-Za-z0-9_-]{22}$/;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/**
 * A new lease id: 22 base64url characters of 128 random bits, so that nobody can name another holder's
 * lease (a guess hits a live one with odds of about limit / 2^128).
 */
export function newLeaseId(): string {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(22));
  let id = '';
  // 22 characters of 6 bits = 132 bits, of which the first 128 are the random ones that matter.
  for (const byte of bytes) id += ALPHABET[byte & 63];
  return id;
}

/** Checks a lease id handed back by a caller (a release or refresh from another process). */
export function validateLeaseId(leaseId: unknown): string {
  if (typeof leaseId !== 'string' || !LEASE_ID.test(leaseId)) {
    throw invalid('ERR_INVALID_OPTION', 'leaseId', leaseId, '22 characters of A-Z a-z 0-9 - _');
  }
  return leaseId;
}
