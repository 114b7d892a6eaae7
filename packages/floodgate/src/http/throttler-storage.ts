import type { Clock } from '../clock.js';
import { FloodgateError } from '../errors.js';
import type { BreakerOptions } from '../limiter/breaker.js';
import type { FailurePolicy, Limiter } from '../limiter/limiter.js';
import { MAX_SLIDING_LOG_LIMIT, type Policy, slidingLog, slidingWindow } from '../model/policy.js';
import type { Store } from '../stores/store.js';
import { buildLimiter } from './core.js';
import { seconds } from './headers.js';

/** What @nestjs/throttler's `ThrottlerStorage.increment` resolves to (its `ThrottlerStorageRecord`). */
export interface ThrottlerStorageRecord {
  /** Hits counted in the window, this one included (`limit + 1` once blocked). */
  totalHits: number;
  /** Seconds until the key is back to untouched (`X-RateLimit-Reset`). */
  timeToExpire: number;
  /** True when this hit is refused. */
  isBlocked: boolean;
  /** Seconds until a blocked key may pass again (`Retry-After`); 0 when not blocked. */
  timeToBlockExpire: number;
}

/** Options of {@link throttlerStorage}. */
export interface ThrottlerStorageOptions {
  /** A limiter to decide with (its own policies are not used: each throttler brings its own). */
  limiter?: Limiter;
  /** Store of the limiter built here. @default memoryStore() */
  store?: Store;
  /** Key prefix of the limiter built here. @default 'throttler' */
  prefix?: string;
  /** Longest wait for the store, ms; `false` for none. @default 1000 for stores that answer asynchronously */
  timeoutMs?: number | false;
  /** When the store fails: `'open'` admits, `'closed'` blocks, `{ fallback }` asks another limiter. @default 'open' */
  failure?: FailurePolicy;
  /** Circuit breaker of the limiter built here. */
  breaker?: BreakerOptions | false;
  /** Time source of the limiter built here. @default the store's clock (Redis, PostgreSQL), else the system's */
  clock?: Clock;
}

const NAME = /^[a-z][a-z0-9_.-]{0,63}$/;
const POLICIES_CACHED = 1000;

/** A stable policy name for a throttler name (policy names are lower-case and short; throttler names are free). */
function policyName(throttler: string, suffix: string): string {
  const name = `${throttler}${suffix}`;
  if (NAME.test(name)) return name;
  let hash = 0x811c9dc5;
  for (let i = 0; i < throttler.length; i++) hash = Math.imul(hash ^ throttler.charCodeAt(i), 0x01000193);
  return `throttler-${(hash >>> 0).toString(16).padStart(8, '0')}${suffix}`;
}

/**
 * Storage for @nestjs/throttler (its `ThrottlerStorage` interface, version 6): its decorators, guard and
 * options stay as they are, and the hits are counted by a floodgate store, atomically, so every instance
 * of the app shares exact limits on Redis or PostgreSQL.
 *
 * Each throttler is a sliding log of `limit` hits per `ttl` ms, as the throttler's in-memory storage
 * counts them, with `blockDuration` as a penalty box that starts with the first refused hit (`blockMs`).
 * The in-memory storage forgets a key's hits when a block shorter than `ttl` ends; this one keeps
 * counting them until they are `ttl` old, which is stricter. Limits above 1000 (the largest sliding
 * log) use the sliding-window counter, which weighs the previous window instead of logging each hit.
 */
export class FloodgateThrottlerStorage {
  /** The limiter counting the hits. */
  readonly limiter: Limiter;
  private readonly policies = new Map<string, Policy[]>();

  constructor(options: ThrottlerStorageOptions = {}) {
    if (typeof options !== 'object' || options === null) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'throttlerStorage needs an options object', {
        option: 'throttlerStorage',
      });
    }
    // A limiter of the caller's takes no limiter options; one built here is named 'throttler'.
    const limiterOptions =
      options.limiter === undefined ? { ...options, prefix: options.prefix ?? 'throttler' } : options;
    this.limiter = buildLimiter(limiterOptions, undefined);
  }

  /** Counts a hit on `key` under one throttler: `limit` hits per `ttl` ms, blocked for `blockDuration` ms once over. */
  async increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<ThrottlerStorageRecord> {
    const policies = this.policiesOf(ttl, limit, blockDuration, throttlerName);
    const decision = await this.limiter.limit(key, { policies });
    const timeToExpire = seconds(decision.resetAfterMs);
    if (decision.allowed) {
      return {
        totalHits: Math.max(1, limit - decision.remaining),
        timeToExpire,
        isBlocked: false,
        timeToBlockExpire: 0,
      };
    }
    return { totalHits: limit + 1, timeToExpire, isBlocked: true, timeToBlockExpire: seconds(decision.retryAfterMs) };
  }

  private policiesOf(ttl: number, limit: number, blockDuration: number, throttlerName: string): Policy[] {
    const id = `${throttlerName}\n${ttl}\n${limit}\n${blockDuration}`;
    let policies = this.policies.get(id);
    if (policies === undefined) {
      if (typeof throttlerName !== 'string') {
        throw new FloodgateError('ERR_INVALID_OPTION', 'the throttler name must be a string', {
          option: 'throttlerName',
        });
      }
      const block = typeof blockDuration === 'number' && blockDuration > 0 ? { blockMs: blockDuration } : {};
      // Policy validation names the field at fault: `limit`, `windowMs` (the ttl), `blockMs`.
      const policy =
        typeof limit === 'number' && limit > MAX_SLIDING_LOG_LIMIT
          ? slidingWindow({ limit, windowMs: ttl, ...block, name: policyName(throttlerName, '-window') })
          : slidingLog({ limit, windowMs: ttl, ...block, name: policyName(throttlerName, '') });
      policies = [policy];
      if (this.policies.size >= POLICIES_CACHED) this.policies.clear();
      this.policies.set(id, policies);
    }
    return policies;
  }
}

/**
 * A {@link FloodgateThrottlerStorage} for `ThrottlerModule.forRoot({ throttlers, storage })`.
 *
 * @example
 * ```ts
 * ThrottlerModule.forRoot({
 *   throttlers: [{ ttl: 60_000, limit: 100 }],
 *   storage: throttlerStorage({ store: redisStore({ client: fromIoredis(redis) }) }),
 * });
 * ```
 */
export function throttlerStorage(options?: ThrottlerStorageOptions): FloodgateThrottlerStorage {
  return new FloodgateThrottlerStorage(options);
}
