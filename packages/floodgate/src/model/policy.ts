import { describeValue, FloodgateError, invalid } from '../errors.js';

/**
 * Policies are plain, serializable data: config files, Lua and SQL read the same fields.
 * Durations are in milliseconds at the surface and compiled to integer microseconds.
 */
export type Policy =
  | GcraPolicy
  | TokenBucketPolicy
  | LeakyBucketPolicy
  | FixedWindowPolicy
  | SlidingWindowPolicy
  | SlidingLogPolicy;

export type Algorithm = Policy['algorithm'];

interface PolicyBase {
  /** Name used in storage keys, headers and metrics. Lower case `[a-z][a-z0-9_.-]*`; derived when omitted. */
  readonly name: string;
  /** Once this policy denies, the key stays denied for this long (penalty box). `0` turns it off. @default 0 */
  readonly blockMs: number;
}

/** Generic cell rate algorithm: `limit` per `periodMs`, up to `burst` at once; one timestamp per key. */
export interface GcraPolicy extends PolicyBase {
  readonly algorithm: 'gcra';
  readonly limit: number;
  readonly periodMs: number;
  readonly burst: number;
}

/** Token bucket that starts full and refills `refillAmount` every `refillIntervalMs`. */
export interface TokenBucketPolicy extends PolicyBase {
  readonly algorithm: 'token-bucket';
  readonly capacity: number;
  readonly refillAmount: number;
  readonly refillIntervalMs: number;
  /** `continuous` refills smoothly; `interval` adds `refillAmount` at each interval boundary. */
  readonly refill: 'continuous' | 'interval';
}

/** Drip-free leaky bucket: a level that leaks `leakPerSecond`; `queue` mode shapes calls with `delayMs`. */
export interface LeakyBucketPolicy extends PolicyBase {
  readonly algorithm: 'leaky-bucket';
  readonly capacity: number;
  readonly leakPerSecond: number;
  readonly mode: 'meter' | 'queue';
}

/** At most `limit` per window; windows aligned to the clock or to a key's first request. */
export interface FixedWindowPolicy extends PolicyBase {
  readonly algorithm: 'fixed-window';
  readonly limit: number;
  readonly windowMs: number;
  readonly align: 'clock' | 'first-request';
  /**
   * Every committed call counts, admitted or denied (as Envoy's reference rate limit service counts each
   * hit), so a client that keeps calling over the limit stays denied until the window ends. @default false
   */
  readonly countDenied: boolean;
}

/** Sliding-window counter: the current window's count plus the previous one's, weighted by overlap. */
export interface SlidingWindowPolicy extends PolicyBase {
  readonly algorithm: 'sliding-window';
  readonly limit: number;
  readonly windowMs: number;
}

/** Log of events in the last `windowMs`: at most `ceil(limit) + 1` entries, coalesced only ever more strictly. */
export interface SlidingLogPolicy extends PolicyBase {
  readonly algorithm: 'sliding-log';
  readonly limit: number;
  readonly windowMs: number;
  /** Minimum time between two events. `0` turns it off. @default 0 */
  readonly minGapMs: number;
  /** Denied attempts are logged too, so a client that keeps trying stays denied. @default false */
  readonly countDenied: boolean;
}

/** Options of {@link gcra}. */
export interface GcraOptions {
  limit: number;
  periodMs: number;
  /** @default limit */
  burst?: number;
  name?: string;
  blockMs?: number;
}
/** Options of {@link tokenBucket}. */
export interface TokenBucketOptions {
  capacity: number;
  refillAmount: number;
  refillIntervalMs: number;
  /** @default 'continuous' */
  refill?: 'continuous' | 'interval';
  name?: string;
  blockMs?: number;
}
/** Options of {@link leakyBucket}. */
export interface LeakyBucketOptions {
  capacity: number;
  leakPerSecond: number;
  /** @default 'meter' */
  mode?: 'meter' | 'queue';
  name?: string;
  blockMs?: number;
}
/** Options of {@link fixedWindow}. */
export interface FixedWindowOptions {
  limit: number;
  windowMs: number;
  /** @default 'clock' */
  align?: 'clock' | 'first-request';
  /** Count denied calls too (see {@link FixedWindowPolicy.countDenied}). @default false */
  countDenied?: boolean;
  name?: string;
  blockMs?: number;
}
/** Options of {@link slidingWindow}. */
export interface SlidingWindowOptions {
  limit: number;
  windowMs: number;
  name?: string;
  blockMs?: number;
}
/** Options of {@link slidingLog}. */
export interface SlidingLogOptions {
  limit: number;
  windowMs: number;
  minGapMs?: number;
  countDenied?: boolean;
  name?: string;
  blockMs?: number;
}

/** Any policy as data, e.g. parsed from a config file: `{ algorithm: 'gcra', limit: 10, periodMs: 1000 }`. */
export type PolicyInput =
  | ({ algorithm: 'gcra' } & GcraOptions)
  | ({ algorithm: 'token-bucket' } & TokenBucketOptions)
  | ({ algorithm: 'leaky-bucket' } & LeakyBucketOptions)
  | ({ algorithm: 'fixed-window' } & FixedWindowOptions)
  | ({ algorithm: 'sliding-window' } & SlidingWindowOptions)
  | ({ algorithm: 'sliding-log' } & SlidingLogOptions);

/** Longest duration a policy may describe (2^47 µs, about 4.4 years): keeps every sum below 2^53. */
export const MAX_DURATION_US = 2 ** 47;
/** Largest count a policy may allow; keeps µs arithmetic exact. */
export const MAX_LIMIT = 1e12;
/**
 * Largest `limit` of a sliding log. The log keeps an entry per event, up to `ceil(limit) + 1`, and one
 * decision reads, sums and rewrites all of them: at this size up to 36 kB per key in Redis and 1.3 to
 * 2.6 ms of Redis script time per decision on a loaded 2-core machine (docs/algorithms.md, "Bounds per
 * key"). `slidingWindow` keeps four numbers whatever the limit.
 */
export const MAX_SLIDING_LOG_LIMIT = 1000;

const NAME_PATTERN = /^[a-z][a-z0-9_.-]{0,63}$/;
const ALGORITHMS: readonly Algorithm[] = [
  'gcra',
  'token-bucket',
  'leaky-bucket',
  'fixed-window',
  'sliding-window',
  'sliding-log',
];

const KNOWN_FIELDS: Record<Algorithm, readonly string[]> = {
  gcra: ['limit', 'periodMs', 'burst'],
  'token-bucket': ['capacity', 'refillAmount', 'refillIntervalMs', 'refill'],
  'leaky-bucket': ['capacity', 'leakPerSecond', 'mode'],
  'fixed-window': ['limit', 'windowMs', 'align', 'countDenied'],
  'sliding-window': ['limit', 'windowMs'],
  'sliding-log': ['limit', 'windowMs', 'minGapMs', 'countDenied'],
};

function fail(path: string, value: unknown, expected: string): never {
  throw invalid('ERR_INVALID_POLICY', path, value, expected);
}

function count(o: Record<string, unknown>, field: string, path: string, fallback?: number): number {
  const value = o[field] === undefined ? fallback : o[field];
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1 || value > MAX_LIMIT) {
    fail(`${path}.${field}`, o[field], `a finite number from 1 to ${MAX_LIMIT}`);
  }
  return value;
}

function positive(o: Record<string, unknown>, field: string, path: string): number {
  const value = o[field];
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_LIMIT) {
    fail(`${path}.${field}`, value, `a finite number above 0 and at most ${MAX_LIMIT}`);
  }
  return value;
}

/** A duration in ms, at least 1 µs, at most MAX_DURATION_US; `optional` allows 0 (off). */
function duration(o: Record<string, unknown>, field: string, path: string, optional: boolean): number {
  const value = o[field] === undefined && optional ? 0 : o[field];
  const maxMs = MAX_DURATION_US / 1000;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > maxMs) {
    fail(`${path}.${field}`, o[field], `a finite number of milliseconds from 0.001 to ${maxMs}`);
  }
  if (value === 0 && optional) return 0;
  if (Math.round(value * 1000) < 1) {
    fail(`${path}.${field}`, value, 'at least 0.001 (one microsecond)');
  }
  return value;
}

function oneOf<T extends string>(
  o: Record<string, unknown>,
  field: string,
  path: string,
  allowed: readonly T[],
  fallback: T,
): T {
  const value = o[field] === undefined ? fallback : o[field];
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    fail(`${path}.${field}`, o[field], `one of ${allowed.map((a) => `'${a}'`).join(', ')}`);
  }
  return value as T;
}

function flag(o: Record<string, unknown>, field: string, path: string): boolean {
  const value = o[field] ?? false;
  if (typeof value !== 'boolean') fail(`${path}.${field}`, value, 'a boolean');
  return value;
}

function trimNumber(n: number): string {
  return String(n).replace('e+', 'e');
}

/**
 * Validates any policy data and returns the frozen, normalized {@link Policy}.
 * Throws `ERR_INVALID_POLICY` naming the field and the value.
 */
export function definePolicy(input: unknown, path = 'policy'): Policy {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    fail(path, input, 'a policy object');
  }
  if (isPolicy(input)) return input;
  const o = input as Record<string, unknown>;
  const algorithm = o.algorithm;
  if (typeof algorithm !== 'string' || !(ALGORITHMS as readonly string[]).includes(algorithm)) {
    fail(`${path}.algorithm`, algorithm, `one of ${ALGORITHMS.map((a) => `'${a}'`).join(', ')}`);
  }
  const known = KNOWN_FIELDS[algorithm as Algorithm];
  for (const field of Object.keys(o)) {
    if (field !== 'algorithm' && field !== 'name' && field !== 'blockMs' && !known.includes(field)) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `${path}.${field} is not an option of a ${algorithm} policy (options: ${['name', 'blockMs', ...known].join(', ')})`,
        { option: `${path}.${field}` },
      );
    }
  }
  const blockMs = duration(o, 'blockMs', path, true);
  let policy: Policy;
  let derived: string;
  switch (algorithm as Algorithm) {
    case 'gcra': {
      const limit = count(o, 'limit', path);
      const periodMs = duration(o, 'periodMs', path, false);
      const burst = count(o, 'burst', path, limit);
      derived = `gcra-${trimNumber(limit)}-per-${trimNumber(periodMs)}ms${burst === limit ? '' : `-burst-${trimNumber(burst)}`}`;
      policy = { algorithm: 'gcra', name: derived, blockMs, limit, periodMs, burst };
      checkMeter(path, (periodMs * 1000) / limit, burst, `${path}.periodMs / ${path}.limit`);
      break;
    }
    case 'token-bucket': {
      const capacity = count(o, 'capacity', path);
      const refillAmount = positive(o, 'refillAmount', path);
      const refillIntervalMs = duration(o, 'refillIntervalMs', path, false);
      const refill = oneOf(o, 'refill', path, ['continuous', 'interval'] as const, 'continuous');
      derived = `token-bucket-${trimNumber(capacity)}-refill-${trimNumber(refillAmount)}-per-${trimNumber(refillIntervalMs)}ms${refill === 'interval' ? '-interval' : ''}`;
      policy = { algorithm: 'token-bucket', name: derived, blockMs, capacity, refillAmount, refillIntervalMs, refill };
      if (refill === 'continuous') {
        checkMeter(
          path,
          (refillIntervalMs * 1000) / refillAmount,
          capacity,
          `${path}.refillIntervalMs / ${path}.refillAmount`,
        );
      } else {
        checkRefill(path, capacity, refillAmount, refillIntervalMs);
      }
      break;
    }
    case 'leaky-bucket': {
      const capacity = count(o, 'capacity', path);
      const leakPerSecond = positive(o, 'leakPerSecond', path);
      const mode = oneOf(o, 'mode', path, ['meter', 'queue'] as const, 'meter');
      derived = `leaky-bucket-${trimNumber(capacity)}-leak-${trimNumber(leakPerSecond)}ps${mode === 'queue' ? '-queue' : ''}`;
      policy = { algorithm: 'leaky-bucket', name: derived, blockMs, capacity, leakPerSecond, mode };
      checkMeter(path, 1e6 / leakPerSecond, capacity, `1 s / ${path}.leakPerSecond`);
      break;
    }
    case 'fixed-window': {
      const limit = count(o, 'limit', path);
      const windowMs = duration(o, 'windowMs', path, false);
      const align = oneOf(o, 'align', path, ['clock', 'first-request'] as const, 'clock');
      const countDenied = flag(o, 'countDenied', path);
      derived = `fixed-window-${trimNumber(limit)}-per-${trimNumber(windowMs)}ms${align === 'clock' ? '' : '-first-request'}${countDenied ? '-count-denied' : ''}`;
      policy = { algorithm: 'fixed-window', name: derived, blockMs, limit, windowMs, align, countDenied };
      break;
    }
    case 'sliding-window': {
      const limit = count(o, 'limit', path);
      const windowMs = duration(o, 'windowMs', path, false);
      derived = `sliding-window-${trimNumber(limit)}-per-${trimNumber(windowMs)}ms`;
      policy = { algorithm: 'sliding-window', name: derived, blockMs, limit, windowMs };
      break;
    }
    case 'sliding-log': {
      const limit = count(o, 'limit', path);
      if (limit > MAX_SLIDING_LOG_LIMIT) {
        fail(
          `${path}.limit`,
          limit,
          `at most ${MAX_SLIDING_LOG_LIMIT} for a sliding log, which keeps an entry per event (use slidingWindow for larger limits)`,
        );
      }
      const windowMs = duration(o, 'windowMs', path, false);
      const minGapMs = duration(o, 'minGapMs', path, true);
      const countDenied = flag(o, 'countDenied', path);
      derived = `sliding-log-${trimNumber(limit)}-per-${trimNumber(windowMs)}ms${minGapMs ? `-gap-${trimNumber(minGapMs)}ms` : ''}${countDenied ? '-count-denied' : ''}`;
      policy = { algorithm: 'sliding-log', name: derived, blockMs, limit, windowMs, minGapMs, countDenied };
      break;
    }
  }
  if (blockMs) derived += `-block-${trimNumber(blockMs)}ms`;
  const name = o.name === undefined ? shorten(derived) : o.name;
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    fail(`${path}.name`, o.name, 'a lower-case name matching [a-z][a-z0-9_.-]* of at most 64 characters');
  }
  policy = Object.freeze({ ...policy, name });
  POLICIES.add(policy);
  return policy;
}

/** Keeps derived names within 64 characters; a hash of the full name keeps them distinct. */
function shorten(name: string): string {
  if (name.length <= 64) return name;
  let hash = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) hash = Math.imul(hash ^ name.charCodeAt(i), 0x01000193);
  return `${name.slice(0, 55)}-${(hash >>> 0).toString(16).padStart(8, '0')}`;
}

/** A meter's interval per unit must be a µs or more, and its burst must drain within MAX_DURATION_US. */
function checkMeter(path: string, intervalUs: number, burst: number, what: string): void {
  if (intervalUs < 1) {
    throw new FloodgateError(
      'ERR_INVALID_POLICY',
      `${path} admits more than one unit of cost per microsecond (${what} = ${describeValue(intervalUs)} µs); count cost in larger units`,
      { option: path },
    );
  }
  const toleranceUs = intervalUs * burst;
  if (!(toleranceUs <= MAX_DURATION_US)) {
    throw new FloodgateError(
      'ERR_INVALID_POLICY',
      `${path} describes a burst that takes ${describeValue(toleranceUs / 1000)} ms to drain; at most ${MAX_DURATION_US / 1000} ms is supported`,
      { option: path },
    );
  }
}

/**
 * The longest an interval token bucket may take to refill from empty, µs: 2^52 (about 142 years), so
 * that a wait added to today's time (about 2^50.7 µs since 1970) stays below 2^53, exact in every store.
 */
const MAX_REFILL_US = 2 ** 52;

/**
 * An interval token bucket's waits are whole intervals: one that takes longer than `MAX_REFILL_US` to
 * refill is refused, since its waits would no longer be numbers every store carries exactly (Redis
 * replies and PostgreSQL `bigint` overflow: 1e-9 per 2^47 µs would owe 10^23 µs).
 */
function checkRefill(path: string, capacity: number, refillAmount: number, refillIntervalMs: number): void {
  const refillUs = Math.ceil(capacity / refillAmount) * Math.round(refillIntervalMs * 1000);
  if (!(refillUs <= MAX_REFILL_US)) {
    throw new FloodgateError(
      'ERR_INVALID_POLICY',
      `${path}.refillAmount ${describeValue(refillAmount)} per ${describeValue(refillIntervalMs)} ms takes ${describeValue(refillUs / 1000)} ms to refill ${path}.capacity ${describeValue(capacity)}; at most ${MAX_REFILL_US / 1000} ms (about 142 years) is supported`,
      { option: `${path}.refillAmount` },
    );
  }
}

const POLICIES = new WeakSet<object>();

/** True for a policy returned by a policy factory or {@link definePolicy}. */
export function isPolicy(value: unknown): value is Policy {
  return typeof value === 'object' && value !== null && POLICIES.has(value);
}

/** `limit` per `periodMs` with up to `burst` at once. @example gcra({ limit: 100, periodMs: 60_000 }) */
export function gcra(options: GcraOptions): GcraPolicy {
  return definePolicy({ ...asObject(options, 'gcra'), algorithm: 'gcra' }, 'gcra') as GcraPolicy;
}
/** A token bucket. @example tokenBucket({ capacity: 10, refillAmount: 1, refillIntervalMs: 1000 }) */
export function tokenBucket(options: TokenBucketOptions): TokenBucketPolicy {
  return definePolicy(
    { ...asObject(options, 'tokenBucket'), algorithm: 'token-bucket' },
    'tokenBucket',
  ) as TokenBucketPolicy;
}
/** A drip-free leaky bucket. @example leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 2_592_000 }) */
export function leakyBucket(options: LeakyBucketOptions): LeakyBucketPolicy {
  return definePolicy(
    { ...asObject(options, 'leakyBucket'), algorithm: 'leaky-bucket' },
    'leakyBucket',
  ) as LeakyBucketPolicy;
}
/**
 * A fixed window. `countDenied: true` counts every call, denied ones too (Envoy's reference service).
 * @example fixedWindow({ limit: 5000, windowMs: 3_600_000 })
 */
export function fixedWindow(options: FixedWindowOptions): FixedWindowPolicy {
  return definePolicy(
    { ...asObject(options, 'fixedWindow'), algorithm: 'fixed-window' },
    'fixedWindow',
  ) as FixedWindowPolicy;
}
/** A sliding-window counter. @example slidingWindow({ limit: 100, windowMs: 60_000 }) */
export function slidingWindow(options: SlidingWindowOptions): SlidingWindowPolicy {
  return definePolicy(
    { ...asObject(options, 'slidingWindow'), algorithm: 'sliding-window' },
    'slidingWindow',
  ) as SlidingWindowPolicy;
}
/**
 * A sliding log: never more than `limit` in any `windowMs`. Keeps at most `ceil(limit) + 1` entries per key,
 * coalescing tiny or fractional costs only ever more strictly; `limit` is at most {@link MAX_SLIDING_LOG_LIMIT}.
 * @example slidingLog({ limit: 5, windowMs: 900_000, countDenied: true })
 */
export function slidingLog(options: SlidingLogOptions): SlidingLogPolicy {
  return definePolicy(
    { ...asObject(options, 'slidingLog'), algorithm: 'sliding-log' },
    'slidingLog',
  ) as SlidingLogPolicy;
}

function asObject(options: unknown, path: string): Record<string, unknown> {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    fail(path, options, 'an options object');
  }
  if ('algorithm' in options) {
    throw new FloodgateError('ERR_INVALID_POLICY', `${path}.algorithm is set by ${path}() itself; leave it out`, {
      option: `${path}.algorithm`,
    });
  }
  return options as Record<string, unknown>;
}
