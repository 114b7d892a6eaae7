import { FloodgateError } from '../errors.js';
import type { AlgorithmDescriptor, Quota } from './algorithm.js';
import { duration, type FieldReader, fail, nameDuration } from './fields.js';
import { FIXED_WINDOW, type FixedWindowOptions, type FixedWindowPolicy } from './fixed-window.js';
import { GCRA, type GcraOptions, type GcraPolicy } from './gcra.js';
import { LEAKY_BUCKET, type LeakyBucketOptions, type LeakyBucketPolicy } from './leaky-bucket.js';
import { SLIDING_LOG, type SlidingLogOptions, type SlidingLogPolicy } from './sliding-log.js';
import { SLIDING_WINDOW, type SlidingWindowOptions, type SlidingWindowPolicy } from './sliding-window.js';
import { TOKEN_BUCKET, type TokenBucketOptions, type TokenBucketPolicy } from './token-bucket.js';

/**
 * Every algorithm's policy and options types, by name: the one list of algorithms. Each is described
 * once, in its own module, by an {@link AlgorithmDescriptor} (`ALGORITHMS` below).
 */
export interface Algorithms {
  gcra: { policy: GcraPolicy; options: GcraOptions };
  'token-bucket': { policy: TokenBucketPolicy; options: TokenBucketOptions };
  'leaky-bucket': { policy: LeakyBucketPolicy; options: LeakyBucketOptions };
  'fixed-window': { policy: FixedWindowPolicy; options: FixedWindowOptions };
  'sliding-window': { policy: SlidingWindowPolicy; options: SlidingWindowOptions };
  'sliding-log': { policy: SlidingLogPolicy; options: SlidingLogOptions };
}

/** An algorithm's name: `gcra`, `token-bucket`, … */
export type Algorithm = keyof Algorithms;

/**
 * A validated policy: plain, frozen data that config files, Lua and SQL read alike. Durations are in
 * milliseconds at the surface and compiled to integer microseconds.
 */
export type Policy = Algorithms[Algorithm]['policy'];

/** Any policy as data, e.g. parsed from a config file: `{ algorithm: 'gcra', limit: 10, periodMs: 1000 }`. */
export type PolicyInput = { [A in Algorithm]: { algorithm: A } & Algorithms[A]['options'] }[Algorithm];

/** The descriptor of each algorithm. */
export const ALGORITHMS: { readonly [A in Algorithm]: AlgorithmDescriptor<Algorithms[A]['policy']> } = {
  gcra: GCRA,
  'token-bucket': TOKEN_BUCKET,
  'leaky-bucket': LEAKY_BUCKET,
  'fixed-window': FIXED_WINDOW,
  'sliding-window': SLIDING_WINDOW,
  'sliding-log': SLIDING_LOG,
};

const NAMES = Object.keys(ALGORITHMS) as Algorithm[];
const NAME_PATTERN = /^[a-z][a-z0-9_.-]{0,63}$/;
const blockMsField = duration({ optional: true });

/** The descriptor of a policy's algorithm. */
export function algorithmOf<P extends Policy>(policy: P): AlgorithmDescriptor<P> {
  return ALGORITHMS[policy.algorithm] as unknown as AlgorithmDescriptor<P>;
}

/** What a policy admits: its burst, sustained rate and window, from its algorithm's descriptor. */
export function quotaOf(policy: Policy): Quota {
  return algorithmOf(policy).quota(policy);
}

/**
 * Validates any policy data and returns the frozen, normalized {@link Policy}: unknown options are
 * refused, then `blockMs`, then the algorithm's options in order, then its checks across options, then
 * the name (derived when omitted). Throws `ERR_INVALID_POLICY` naming the option and the value.
 */
export function definePolicy(input: unknown, path = 'policy'): Policy {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    fail(path, input, 'a policy object');
  }
  if (isPolicy(input)) return input;
  const o = input as Record<string, unknown>;
  const algorithm = o.algorithm;
  if (typeof algorithm !== 'string' || !(NAMES as readonly string[]).includes(algorithm)) {
    fail(`${path}.algorithm`, algorithm, `one of ${NAMES.map((a) => `'${a}'`).join(', ')}`);
  }
  const descriptor = ALGORITHMS[algorithm as Algorithm] as unknown as AlgorithmDescriptor<Policy>;
  const known = Object.keys(descriptor.fields);
  for (const field of Object.keys(o)) {
    if (field !== 'algorithm' && field !== 'name' && field !== 'blockMs' && !known.includes(field)) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `${path}.${field} is not an option of a ${algorithm} policy (options: ${['name', 'blockMs', ...known].join(', ')})`,
        { option: `${path}.${field}`, unknownOption: true },
      );
    }
  }
  const blockMs = blockMsField(o, 'blockMs', path, {});
  const read: Record<string, unknown> = { algorithm, name: '', blockMs };
  const fields = descriptor.fields as unknown as Readonly<Record<string, FieldReader<unknown>>>;
  for (const field of known) {
    const value = (fields[field] as FieldReader<unknown>)(o, field, path, read);
    if (value !== undefined) read[field] = value;
  }
  const policy = read as unknown as Policy;
  descriptor.check?.(policy, path);
  let derived = descriptor.derivedName(policy);
  if (blockMs) derived += `-block-${nameDuration(blockMs)}`;
  const name = o.name === undefined ? shorten(derived) : o.name;
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    fail(`${path}.name`, o.name, 'a lower-case name matching [a-z][a-z0-9_.-]* of at most 64 characters');
  }
  read.name = name;
  const frozen = Object.freeze(read) as unknown as Policy;
  POLICIES.add(frozen);
  return frozen;
}

/** Keeps derived names within 64 characters; a hash of the full name keeps them distinct. */
function shorten(name: string): string {
  if (name.length <= 64) return name;
  let hash = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) hash = Math.imul(hash ^ name.charCodeAt(i), 0x01000193);
  return `${name.slice(0, 55)}-${(hash >>> 0).toString(16).padStart(8, '0')}`;
}

const POLICIES = new WeakSet<object>();

/** True for a policy returned by a policy factory or {@link definePolicy}. */
export function isPolicy(value: unknown): value is Policy {
  return typeof value === 'object' && value !== null && POLICIES.has(value);
}

/**
 * The factory of algorithm `A`: validates its options as a policy of `A` (the factory sets the algorithm
 * itself), with errors naming the factory (`gcra.limit`).
 */
function factory<A extends Algorithm>(algorithm: A): (options: Algorithms[A]['options']) => Algorithms[A]['policy'] {
  const path = ALGORITHMS[algorithm].factory;
  return (options) => {
    if (typeof options !== 'object' || options === null || Array.isArray(options)) {
      fail(path, options, 'an options object');
    }
    if ('algorithm' in options) {
      throw new FloodgateError('ERR_INVALID_POLICY', `${path}.algorithm is set by ${path}() itself; leave it out`, {
        option: `${path}.algorithm`,
      });
    }
    return definePolicy({ ...options, algorithm }, path) as Algorithms[A]['policy'];
  };
}

/** `limit` per `periodMs` with up to `burst` at once. @example gcra({ limit: 100, periodMs: 60_000 }) */
export const gcra = factory('gcra');
/** A token bucket. @example tokenBucket({ capacity: 10, refillAmount: 1, refillIntervalMs: 1000 }) */
export const tokenBucket = factory('token-bucket');
/** A drip-free leaky bucket. @example leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 2_592_000 }) */
export const leakyBucket = factory('leaky-bucket');
/** A fixed window. @example fixedWindow({ limit: 5000, windowMs: 3_600_000 }) */
export const fixedWindow = factory('fixed-window');
/**
 * A sliding window: the weighted two-window counter, or with `precisionMs` the bucketed window.
 * @example slidingWindow({ limit: 100, windowMs: 60_000, precisionMs: 1000 })
 */
export const slidingWindow = factory('sliding-window');
/**
 * A sliding log: never more than `limit` in any `windowMs`. Keeps at most `ceil(limit) + 1` entries per key,
 * coalescing tiny or fractional costs only ever more strictly; `limit` is at most {@link MAX_SLIDING_LOG_LIMIT}.
 * @example slidingLog({ limit: 5, windowMs: 900_000, countDenied: true })
 */
export const slidingLog = factory('sliding-log');

export { MAX_DURATION_US, MAX_LIMIT } from './fields.js';
export { MAX_SLIDING_LOG_LIMIT } from './sliding-log.js';
export { MAX_WINDOW_BUCKETS } from './sliding-window.js';
export type {
  FixedWindowOptions,
  FixedWindowPolicy,
  GcraOptions,
  GcraPolicy,
  LeakyBucketOptions,
  LeakyBucketPolicy,
  SlidingLogOptions,
  SlidingLogPolicy,
  SlidingWindowOptions,
  SlidingWindowPolicy,
  TokenBucketOptions,
  TokenBucketPolicy,
};
