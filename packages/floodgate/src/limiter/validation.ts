import type { Clock } from '../clock.js';
import { describeValue, FloodgateError, invalid } from '../errors.js';
import { validatePrefix } from '../keys.js';
import type { CompiledPolicy } from '../model/compile.js';
import { definePolicy, type Policy } from '../model/policy.js';
import { refuseUnknownOptions } from '../options-check.js';
import { memoryStore } from '../stores/memory/memory-store.js';
import { isSyncStore, type Store } from '../stores/store.js';
import type { BlockedCacheOptions } from './blocked-cache.js';
import type { BreakerOptions } from './breaker.js';
import type { CallOptions, FailurePolicy, KeyOptions, Limiter, LimiterOptions } from './limiter.js';

/**
 * Everything a limiter and its calls accept from their callers, checked before anything is asked of a
 * store: each refusal is a `FloodgateError` naming the option and the value.
 */

/** A limiter's options, validated and with their defaults. */
export interface LimiterConfig {
  readonly store: Store;
  readonly prefix: string;
  readonly clock: Clock | undefined;
  readonly timeoutMs: number | undefined;
  readonly failure: FailurePolicy;
  readonly breaker: BreakerOptions | false;
  readonly blockedCache: BlockedCacheOptions | false;
  readonly policies: readonly Policy[];
  readonly settleWithinMs: number;
  readonly settleSecret: string | undefined;
  readonly settleOnce: 'limiter' | 'store';
}

/** The options of `createLimiter`. */
const LIMITER_OPTIONS: readonly (keyof LimiterOptions)[] = [
  'store',
  'policies',
  'prefix',
  'clock',
  'timeoutMs',
  'failure',
  'breaker',
  'blockedCache',
  'settleWithinMs',
  'settleSecret',
  'settleOnce',
  'permits',
];

/** express-rate-limit's limit and window, which are a policy here. */
export const POLICY_HINTS: Readonly<Record<string, string>> = {
  windowMs: 'a window is a policy: policies: fixedWindow({ limit, windowMs })',
  limit: 'a limit is a policy: policies: fixedWindow({ limit, windowMs })',
  max: 'a limit is a policy: policies: fixedWindow({ limit: max, windowMs })',
};

/** Validates `createLimiter`'s options; `isLimiter` tells a fallback limiter (this module does not import the class). */
export function validateLimiterOptions(options: LimiterOptions, isLimiter: (value: unknown) => boolean): LimiterConfig {
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'createLimiter options', options, 'an object');
  }
  refuseUnknownOptions(options, 'createLimiter', LIMITER_OPTIONS, POLICY_HINTS);
  const store = options.store ?? memoryStore();
  if (typeof store !== 'object' || store === null || typeof store.decide !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'store', store, 'a floodgate store');
  }
  const prefix = validatePrefix(options.prefix ?? 'floodgate');
  const clock = options.clock;
  if (clock !== undefined && (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function')) {
    throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs()');
  }
  const timeoutMs = validateTimeout(options.timeoutMs, store);
  const failure = validateFailure(options.failure, isLimiter);
  const breaker = options.breaker ?? {};
  if (breaker !== false && (typeof breaker !== 'object' || breaker === null)) {
    throw invalid('ERR_INVALID_OPTION', 'breaker', breaker, 'breaker options or false');
  }
  const cache = options.blockedCache ?? false;
  if (typeof cache !== 'boolean' && (typeof cache !== 'object' || cache === null)) {
    throw invalid('ERR_INVALID_OPTION', 'blockedCache', cache, 'a boolean or blocked-cache options');
  }
  // A concurrency policy was taken out by the limiter (limiter/concurrent.ts); one left here is refused as unknown.
  const policies =
    options.policies === undefined ? [] : normalizePolicies(options.policies as Policy | readonly Policy[], 'policies');
  const settleWithinMs = options.settleWithinMs ?? DEFAULT_SETTLE_WITHIN_MS;
  if (
    typeof settleWithinMs !== 'number' ||
    !Number.isSafeInteger(settleWithinMs) ||
    settleWithinMs < 1 ||
    settleWithinMs > 2 ** 31
  ) {
    throw invalid(
      'ERR_INVALID_OPTION',
      'settleWithinMs',
      settleWithinMs,
      'a whole number of milliseconds from 1 to 2^31',
    );
  }
  const settleSecret = options.settleSecret;
  if (
    settleSecret !== undefined &&
    !(typeof settleSecret === 'string' && settleSecret.length >= 32 && settleSecret.length <= 1024)
  ) {
    // Never the value itself: it is a secret.
    const got = typeof settleSecret === 'string' ? `${settleSecret.length} characters` : describeValue(settleSecret);
    throw new FloodgateError('ERR_INVALID_OPTION', `settleSecret must be 32 to 1024 characters, got ${got}`, {
      option: 'settleSecret',
    });
  }
  const settleOnce = options.settleOnce ?? 'limiter';
  if (settleOnce !== 'limiter' && settleOnce !== 'store') {
    throw invalid('ERR_INVALID_OPTION', 'settleOnce', settleOnce, "'limiter' or 'store'");
  }
  return {
    store,
    prefix,
    clock,
    timeoutMs,
    failure,
    breaker,
    blockedCache: cache === true ? {} : cache,
    policies,
    settleWithinMs,
    settleSecret,
    settleOnce,
  };
}

/** How long a settlement may give anything back by default: ten minutes, longer than most calls run. */
export const DEFAULT_SETTLE_WITHIN_MS = 600_000;

/** `settle` of a call: a boolean. */
export function validateSettle(settle: unknown): boolean {
  if (settle === undefined) return false;
  if (typeof settle !== 'boolean') throw invalid('ERR_INVALID_OPTION', 'settle', settle, 'a boolean');
  return settle;
}

/**
 * The default `timeoutMs` of a store that answers asynchronously (Redis, PostgreSQL, any network store):
 * no call waits on it longer, whatever its client's own retries. Stores that decide synchronously
 * (memory, SQLite) never wait, so they get no timer.
 */
export const DEFAULT_STORE_TIMEOUT_MS = 1000;

/** `timeoutMs`: a finite number of ms above 0, or `false` for no timer; by default 1000 ms on an asynchronous store. */
function validateTimeout(timeoutMs: unknown, store: Store): number | undefined {
  if (timeoutMs === false) return undefined;
  if (timeoutMs === undefined) return isSyncStore(store) ? undefined : DEFAULT_STORE_TIMEOUT_MS;
  if (typeof timeoutMs !== 'number' || !(timeoutMs > 0) || !Number.isFinite(timeoutMs)) {
    throw invalid('ERR_INVALID_OPTION', 'timeoutMs', timeoutMs, 'a finite number of milliseconds above 0, or false');
  }
  return timeoutMs;
}

function validateFailure(failure: unknown, isLimiter: (value: unknown) => boolean): FailurePolicy {
  if (failure === undefined) return 'throw';
  if (failure === 'throw' || failure === 'open' || failure === 'closed') return failure;
  if (typeof failure === 'object' && failure !== null && isLimiter((failure as { fallback?: unknown }).fallback)) {
    return failure as { fallback: Limiter };
  }
  throw invalid('ERR_INVALID_OPTION', 'failure', failure, "'throw', 'open', 'closed' or { fallback: <limiter> }");
}

/** Checks that a call's options are an object (or absent); their fields are checked where they are read. */
export function validateCallOptions(options: CallOptions | undefined): void {
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
  }
}

/** The options of `status`: a cost-0 check under the limiter's or the given policies. */
export function statusOptions(options: KeyOptions | undefined): CallOptions {
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
  }
  return options?.policies === undefined ? { cost: 0 } : { cost: 0, policies: options.policies };
}

/** Validates a policy or a list of policies (objects from the factories, or plain data). */
export function normalizePolicies(input: Policy | readonly Policy[], path: string): readonly Policy[] {
  const list = Array.isArray(input) ? (input as readonly unknown[]) : [input];
  if (list.length > 32) throw invalid('ERR_INVALID_POLICY', path, input, 'at most 32 policies');
  // Array.from visits the holes of a sparse array (as undefined), so each is refused by its index.
  const policies = Array.from(list, (p, i) => definePolicy(p, Array.isArray(input) ? `${path}[${i}]` : path));
  const names = new Set<string>();
  for (const p of policies) {
    if (names.has(p.name)) {
      throw new FloodgateError('ERR_INVALID_POLICY', `${path} has two policies named ${JSON.stringify(p.name)}`, {
        option: path,
      });
    }
    names.add(p.name);
  }
  return Object.freeze(policies);
}

/**
 * Refuses to settle or cancel under other policies than the ones `what` (the call, the reservation) was
 * made under: `names` are those policies' names, in order.
 */
export function requireSamePolicies(what: string, names: readonly string[], policies: readonly CompiledPolicy[]): void {
  if (names.length !== policies.length || policies.some((c, i) => c.name !== names[i])) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `${what} was made under policies ${names.join(', ')}, not ${policies.map((c) => c.name).join(', ')}: pass the same policies`,
      { option: 'policies' },
    );
  }
}

/** `maxDelayMs` in whole µs: a finite number of ms from 0 to 2^40. */
export function validateDelay(ms: unknown): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > 2 ** 40) {
    throw invalid('ERR_INVALID_OPTION', 'maxDelayMs', ms, 'a finite number of milliseconds ≥ 0');
  }
  return Math.round(ms * 1000);
}
