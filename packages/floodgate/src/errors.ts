/**
 * Stable codes carried by every {@link FloodgateError}. Match on `code`, never on the message.
 *
 * - `ERR_INVALID_*`: the call or the options are invalid; never a store failure.
 * - `ERR_STORE_UNAVAILABLE`, `ERR_TIMEOUT`, `ERR_STORE_PROTOCOL`: the store is unreachable, slow or failing.
 * - `ERR_STORE_REJECTED`: the store answered and refused this one call (see `classifyStoreError`).
 * - `ERR_STORE_FULL`: the store holds as many keys as it may and refuses new ones.
 * - `ERR_LEASE_LOST`: a concurrency permit's lease ran out (or its refresh was refused) before it was
 *   released: the reason of the permit's `signal`.
 * - `ERR_STORE_VERSION`: the database holds the functions of another version of the store's port only:
 *   run the store's `migrate()`. A fault of the store like `ERR_STORE_UNAVAILABLE`.
 * - `ERR_STORE_MISCONFIGURED`: the store's server answered that it cannot serve this configuration (a
 *   database that does not exist, a failed login, a Redis that wants a password): retrying will not help,
 *   the configuration must change. A fault of the store like `ERR_STORE_UNAVAILABLE` (the breaker and the
 *   `failure` policy treat it alike), told apart so that it is reported as permanent.
 */
export type FloodgateErrorCode =
  | 'ERR_INVALID_POLICY'
  | 'ERR_INVALID_COST'
  | 'ERR_INVALID_KEY'
  | 'ERR_INVALID_OPTION'
  | 'ERR_STORE_UNAVAILABLE'
  | 'ERR_STORE_PROTOCOL'
  | 'ERR_STORE_REJECTED'
  | 'ERR_STORE_FULL'
  | 'ERR_STORE_VERSION'
  | 'ERR_STORE_MISCONFIGURED'
  | 'ERR_TIMEOUT'
  | 'ERR_ABORTED'
  | 'ERR_QUEUE_FULL'
  | 'ERR_LEASE_LOST'
  | 'ERR_CLOSED';

const brand = Symbol.for('floodgate.error');

/**
 * The one error family floodgate throws. Denials are never errors: they are `Decision`s.
 *
 * @example
 * ```ts
 * try { await limiter.limit(key, { cost }) }
 * catch (error) { if (isFloodgateError(error) && error.code === 'ERR_INVALID_COST') … }
 * ```
 */
export class FloodgateError extends Error {
  override readonly name = 'FloodgateError';
  readonly code: FloodgateErrorCode;
  /** The option or argument at fault, when there is one (`'cost'`, `'policies[0].limit'`). */
  readonly option: string | undefined;
  /**
   * What is wrong with `option`, as the words that follow its path in the message (`must be a finite
   * number from 1 to 1000000000000, got 0`): for callers that name the option their own way (a config
   * file's path). The whole message when it does not start with the option.
   */
  readonly problem: string;
  /** True when `option` is not an option at all (an unknown key), rather than one given a wrong value. */
  readonly unknownOption: boolean;

  constructor(
    code: FloodgateErrorCode,
    message: string,
    options?: { cause?: unknown; option?: string; unknownOption?: boolean },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    const option = options?.option;
    this.option = option;
    this.problem =
      option !== undefined && message.startsWith(`${option} `) ? message.slice(option.length + 1) : message;
    this.unknownOption = options?.unknownOption === true;
    Object.defineProperty(this, brand, { value: true });
  }
}

/**
 * True for a {@link FloodgateError}, also when it comes from another loaded copy of floodgate.
 */
export function isFloodgateError(value: unknown): value is FloodgateError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/** Renders a value for an error message: short, unambiguous, never throws. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') {
    return value.length > 60 ? `${JSON.stringify(value.slice(0, 60))}… (${value.length} chars)` : JSON.stringify(value);
  }
  if (typeof value === 'number') return Object.is(value, -0) ? '-0' : String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || value === undefined || typeof value === 'boolean') return String(value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  if (Array.isArray(value)) return 'an array';
  return 'an object';
}

export function invalid(code: FloodgateErrorCode, option: string, value: unknown, expected: string): FloodgateError {
  return new FloodgateError(code, `${option} must be ${expected}, got ${describeValue(value)}`, { option });
}
