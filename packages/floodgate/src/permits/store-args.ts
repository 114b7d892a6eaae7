import { invalid } from '../errors.js';
import { checkNowUs } from '../stores/kit/time.js';
import { validateLeaseId } from './lease-id.js';
import { MAX_LEASE_MS, MAX_PERMIT_LIMIT, MAX_QUEUE } from './policy.js';

// The checks a database permit store runs on a call before it sends anything. `createPermits` only ever
// passes values that pass them, but a store may be called directly, and what reaches SQL must be what the
// model expects (a whole limit within MAX_PERMIT_LIMIT, which bounds a key's rows). Each refusal is a
// FloodgateError naming the argument and the value. A storage key is a prefix (≤ 128), an encoded key
// (≤ 200: longer ones are hashed) and a policy name (≤ 64): 1024 characters hold it with room to spare.

const whole = (x: unknown, min: number, max: number) =>
  Number.isSafeInteger(x) && (x as number) >= min && (x as number) <= max;

// `args` of acquire and wait (`limit`, `cost`, `leaseUs`; wait: `maxQueue`, `waiterUs`), refresh
// (`leaseUs`), release (refresh and release: `limit` when given) or leave (`limit`): what each carries.
export function checkPermitCall(
  key: unknown,
  args: {
    limit?: unknown;
    cost?: unknown;
    leaseUs?: unknown;
    leaseId: unknown;
    nowUs?: unknown;
    maxQueue?: unknown;
    waiterUs?: unknown;
  },
  op: 'acquire' | 'refresh' | 'release' | 'wait' | 'leave',
): void {
  if (typeof key !== 'string' || key.length === 0 || key.length > 1024 || key.includes('\0')) {
    throw invalid('ERR_INVALID_KEY', 'key', key, 'a storage key of 1 to 1024 characters without NUL');
  }
  if (typeof args !== 'object' || args === null) throw invalid('ERR_INVALID_OPTION', 'args', args, 'an object');
  const claims = op === 'acquire' || op === 'wait';
  // Refresh and release tell the waiters only when given the limit (0: tell nobody).
  const optional = (op === 'refresh' || op === 'release') && (args.limit === undefined || args.limit === 0);
  if (!optional && !whole(args.limit, 1, MAX_PERMIT_LIMIT)) {
    throw invalid('ERR_INVALID_POLICY', 'limit', args.limit, `a whole number from 1 to ${MAX_PERMIT_LIMIT}`);
  }
  if (op === 'wait' && !whole(args.maxQueue, 0, MAX_QUEUE)) {
    throw invalid('ERR_INVALID_POLICY', 'maxQueue', args.maxQueue, `a whole number from 0 to ${MAX_QUEUE}`);
  }
  if (op === 'wait' && !whole(args.waiterUs, 1, MAX_LEASE_MS * 1000)) {
    throw invalid(
      'ERR_INVALID_OPTION',
      'waiterUs',
      args.waiterUs,
      `a whole number of µs from 1 to ${MAX_LEASE_MS * 1000}`,
    );
  }
  if ((claims || op === 'refresh') && !whole(args.leaseUs, 1, MAX_LEASE_MS * 1000)) {
    throw invalid(
      'ERR_INVALID_POLICY',
      'leaseUs',
      args.leaseUs,
      `a whole number of µs from 1 to ${MAX_LEASE_MS * 1000}`,
    );
  }
  if (claims && !whole(args.cost, 1, Number.MAX_SAFE_INTEGER)) {
    throw invalid('ERR_INVALID_COST', 'cost', args.cost, 'a whole number ≥ 1');
  }
  validateLeaseId(args.leaseId);
  checkNowUs(args.nowUs as number | undefined);
}
