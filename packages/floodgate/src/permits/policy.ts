import { describeValue, FloodgateError } from '../errors.js';

/**
 * The most permits a concurrency policy may hold out at once. Each live lease costs at least 1, so a key
 * holds at most this many leases, and one store operation reads at most this many: the bound on a key's
 * state and on the work of one call, whatever the traffic.
 */
export const MAX_PERMIT_LIMIT = 10_000;

/** The longest lease, ms: about 24.8 days, the longest delay a Node timer holds. */
export const MAX_LEASE_MS = 2 ** 31 - 1;

/**
 * The most waiters a key's queue may hold. The queue is bounded per key (a bound over all keys would let
 * one hot key fill it and starve the rest); a grant reads at most `limit` + 1 waiters whatever its length.
 */
export const MAX_QUEUE = 10_000;

const NAME_PATTERN = /^[a-z][a-z0-9_.-]{0,63}$/;

/** Options of {@link concurrency}. */
export interface ConcurrencyOptions {
  /** The most cost in flight at once per key: the sum of the costs of the live leases. A whole number. */
  limit: number;
  /**
   * How long a permit stays out without a `refresh`, ms, on the store's clock. A holder that dies
   * without releasing its permit frees it after this long, never sooner.
   */
  leaseMs: number;
  /**
   * Most callers waiting in `permits.acquire` at once per key, across the fleet; one more is refused at
   * once with `ERR_QUEUE_FULL`. 0: `acquire` never waits. A whole number from 0 to 10 000. @default 1000
   */
  maxQueue?: number;
  /** The policy's name, part of its storage keys. @default 'concurrency' */
  name?: string;
}

/** A concurrency policy: plain data, frozen. */
export interface ConcurrencyPolicy {
  readonly algorithm: 'concurrency';
  readonly name: string;
  readonly limit: number;
  readonly leaseMs: number;
  readonly maxQueue: number;
}

function fail(option: string, value: unknown, expected: string): never {
  throw new FloodgateError('ERR_INVALID_POLICY', `${option} must be ${expected}, got ${describeValue(value)}`, {
    option,
  });
}

/**
 * A concurrency limit: at most `limit` (summed costs) in flight at once per key, each permit held on a
 * lease of `leaseMs` until released. Throws `ERR_INVALID_POLICY` naming the option and the value.
 *
 * @example
 * ```ts
 * const policy = concurrency({ limit: 2, leaseMs: 30_000 }); // at most 2 in flight per key
 * ```
 */
export function concurrency(options: ConcurrencyOptions): ConcurrencyPolicy {
  if (typeof options !== 'object' || options === null) fail('concurrency options', options, 'an object');
  for (const field of Object.keys(options)) {
    if (field !== 'limit' && field !== 'leaseMs' && field !== 'maxQueue' && field !== 'name') {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `${field} is not an option of a concurrency policy (options: limit, leaseMs, maxQueue, name)`,
        { option: field, unknownOption: true },
      );
    }
  }
  const { limit, leaseMs } = options;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PERMIT_LIMIT) {
    fail('limit', limit, `a whole number from 1 to ${MAX_PERMIT_LIMIT}`);
  }
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 1 || leaseMs > MAX_LEASE_MS) {
    fail('leaseMs', leaseMs, `a whole number of milliseconds from 1 to ${MAX_LEASE_MS}`);
  }
  const maxQueue = options.maxQueue === undefined ? 1000 : options.maxQueue;
  if (!Number.isSafeInteger(maxQueue) || maxQueue < 0 || maxQueue > MAX_QUEUE) {
    fail('maxQueue', options.maxQueue, `a whole number from 0 to ${MAX_QUEUE}`);
  }
  const name = options.name ?? 'concurrency';
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    fail('name', options.name, 'a lower-case name matching [a-z][a-z0-9_.-]* of at most 64 characters');
  }
  return Object.freeze({ algorithm: 'concurrency', name, limit, leaseMs, maxQueue });
}
