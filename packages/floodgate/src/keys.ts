import { describeValue, FloodgateError, invalid } from './errors.js';
import { sha256Base64url } from './sha256.js';

/** Keys longer than this are refused: `ERR_INVALID_KEY`. */
export const MAX_KEY_LENGTH = 65_536;
/** Encoded keys longer than this are replaced by a SHA-256 digest in storage layouts. */
export const HASH_KEYS_LONGER_THAN = 200;

const PREFIX_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;
const NEEDS_ESCAPE = /[%{}#\0]/;

/** Checks a user key: a non-empty string of at most {@link MAX_KEY_LENGTH} characters. */
export function validateKey(key: unknown): string {
  if (typeof key !== 'string') throw invalid('ERR_INVALID_KEY', 'key', key, 'a string');
  if (key.length === 0 || key.length > MAX_KEY_LENGTH) {
    throw new FloodgateError(
      'ERR_INVALID_KEY',
      `key must be a string of 1 to ${MAX_KEY_LENGTH} characters, got ${describeValue(key)}`,
      { option: 'key' },
    );
  }
  return key;
}

/** Checks a key prefix: 1 to 128 of `A-Z a-z 0-9 _ . : -` (no braces, which would break the layout). */
export function validatePrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || !PREFIX_PATTERN.test(prefix)) {
    throw invalid('ERR_INVALID_OPTION', 'prefix', prefix, '1 to 128 characters of A-Z a-z 0-9 _ . : -');
  }
  return prefix;
}

/**
 * Makes any user key safe inside `{…}`: `%`, `{`, `}`, `#` and NUL are percent-encoded, lone surrogates
 * (which UTF-8 drivers would all turn into U+FFFD, making distinct keys collide) become `%uXXXX`, and an
 * encoding longer than {@link HASH_KEYS_LONGER_THAN} is replaced by `#` and its SHA-256 (only hashed keys
 * start with `#`). The result is injective on keys: two keys never share storage.
 */
export function encodeKey(key: string): string {
  let encoded = key;
  if (NEEDS_ESCAPE.test(key) || !key.isWellFormed()) {
    encoded = '';
    for (let i = 0; i < key.length; i++) {
      const code = key.charCodeAt(i);
      if (code === 0x25 || code === 0x7b || code === 0x7d || code === 0x23 || code === 0) {
        encoded += `%${code.toString(16).toUpperCase().padStart(2, '0')}`;
      } else if (code >= 0xd800 && code <= 0xdfff) {
        const next = key.charCodeAt(i + 1);
        if (code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          encoded += key[i] + (key[i + 1] as string);
          i++;
        } else {
          encoded += `%u${code.toString(16).toUpperCase()}`;
        }
      } else {
        encoded += key[i];
      }
    }
  }
  return encoded.length > HASH_KEYS_LONGER_THAN ? `#${sha256Base64url(encoded)}` : encoded;
}

/** The char code of the mark that starts every key `localKey` rewrites. */
export const LONG_KEY_MARK = 1;
const MARK = String.fromCharCode(LONG_KEY_MARK);

/**
 * Whether `key` is a valid key that `localKey` leaves as it is: a string of 1 to
 * {@link HASH_KEYS_LONGER_THAN} characters that does not start with the mark.
 */
export function isPlainKey(key: unknown): key is string {
  return (
    typeof key === 'string' &&
    key.length > 0 &&
    key.length <= HASH_KEYS_LONGER_THAN &&
    key.charCodeAt(0) !== LONG_KEY_MARK
  );
}

/**
 * The key an in-process map holds for a user key: the key itself up to {@link HASH_KEYS_LONGER_THAN}
 * characters, else a mark and its SHA-256, so that a map of `n` keys holds at most about `n × 200`
 * characters of keys whatever length clients send (up to {@link MAX_KEY_LENGTH} each). A short key that
 * starts with the mark gets a second one, so no short key can ever equal a long key's digest.
 */
export function localKey(key: string): string {
  if (key.length > HASH_KEYS_LONGER_THAN) {
    return MARK + sha256Base64url(key);
  }
  return key.charCodeAt(0) === LONG_KEY_MARK ? MARK + key : key;
}

/**
 * The storage key of one policy's state: `<prefix>:{<encoded key>}:<policy>`. The hash tag keeps all
 * policies of a user key in one Redis Cluster slot, so a multi-policy decision stays one atomic script.
 */
export function storageKey(prefix: string, encodedKey: string, policyName: string): string {
  return `${prefix}:{${encodedKey}}:${policyName}`;
}
