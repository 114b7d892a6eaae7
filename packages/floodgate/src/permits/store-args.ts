import { describeValue, FloodgateError, invalid } from '../errors.js';
import { checkNowUs } from '../stores/kit/time.js';
import { validateLeaseId } from './lease-id.js';
import { MAX_LEASE_MS, MAX_PERMIT_LIMIT } from './policy.js';
import type { PermitAcquireArgs, PermitRefreshArgs, PermitReleaseArgs } from './store.js';

/**
 * The longest storage key a permit store takes: a prefix (128), an encoded key (at most 200, longer ones
 * are hashed), a policy name (64) and the separators fit well within it.
 */
const MAX_STORAGE_KEY_LENGTH = 1024;

/**
 * The checks a database permit store runs on a call before it sends anything: `createPermits` only ever
 * passes values that pass them, but a store may be called directly, and what reaches SQL must be what
 * the model expects (a whole limit within {@link MAX_PERMIT_LIMIT}, which bounds a key's rows). Each
 * refusal is a `FloodgateError` naming the argument and the value.
 */
export function checkStorageKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_STORAGE_KEY_LENGTH || key.includes('\0')) {
    throw invalid(
      'ERR_INVALID_KEY',
      'key',
      key,
      `a storage key of 1 to ${MAX_STORAGE_KEY_LENGTH} characters without NUL`,
    );
  }
  return key;
}

function checkLeaseUs(leaseUs: unknown): void {
  if (!Number.isSafeInteger(leaseUs) || (leaseUs as number) < 1 || (leaseUs as number) > MAX_LEASE_MS * 1000) {
    throw invalid('ERR_INVALID_POLICY', 'leaseUs', leaseUs, `a whole number of µs from 1 to ${MAX_LEASE_MS * 1000}`);
  }
}

function checkArgs(args: unknown): asserts args is Record<string, unknown> {
  if (typeof args !== 'object' || args === null) throw invalid('ERR_INVALID_OPTION', 'args', args, 'an object');
}

export function checkAcquireArgs(key: unknown, args: PermitAcquireArgs): void {
  checkStorageKey(key);
  checkArgs(args);
  const { limit, cost } = args;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PERMIT_LIMIT) {
    throw invalid('ERR_INVALID_POLICY', 'limit', limit, `a whole number from 1 to ${MAX_PERMIT_LIMIT}`);
  }
  checkLeaseUs(args.leaseUs);
  if (!Number.isSafeInteger(cost) || cost < 1) {
    throw new FloodgateError(
      'ERR_INVALID_COST',
      `cost must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER}, got ${describeValue(cost)}`,
      { option: 'cost' },
    );
  }
  validateLeaseId(args.leaseId);
  checkNowUs(args.nowUs);
}

export function checkRefreshArgs(key: unknown, args: PermitRefreshArgs): void {
  checkStorageKey(key);
  checkArgs(args);
  checkLeaseUs(args.leaseUs);
  validateLeaseId(args.leaseId);
  checkNowUs(args.nowUs);
}

export function checkReleaseArgs(key: unknown, args: PermitReleaseArgs): void {
  checkStorageKey(key);
  checkArgs(args);
  validateLeaseId(args.leaseId);
  checkNowUs(args.nowUs);
}
