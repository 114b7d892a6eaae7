import type { Clock } from '../clock.js';
import { describeValue, FloodgateError, invalid } from '../errors.js';
import { encodeKey, storageKey, validateKey, validatePrefix } from '../keys.js';
import { checkOptionsObject, hasMethods, wholeOption } from '../stores/kit/options.js';
import { toStoreError } from '../stores/store-errors.js';
import { loadTelemetry, type Telemetry, telemetry, tick } from '../telemetry/otel.js';
import { newLeaseId, validateLeaseId } from './lease-id.js';
import type { AcquireReply } from './model.js';
import { localMs, Permit, type PermitHost } from './permit.js';
import type { ConcurrencyPolicy } from './policy.js';
import type { PermitAcquireArgs, PermitStore } from './store.js';
import { type PermitAcquireOptions, WAITER_POLLS, type WaitingStore, waitInQueue, waitOptions } from './waiting.js';

/** Options of {@link createPermits}. */
export interface PermitsOptions {
  /**
   * Where the leases live: `memoryPermitStore()`, `redisPermitStore({ client })` (floodgate/redis),
   * `postgresPermitStore({ client })` (floodgate/postgres) or `sqlitePermitStore({ database })` (floodgate/sqlite).
   */
  store: PermitStore;
  /** The concurrency policy: `concurrency({ limit, leaseMs })`. */
  policy: ConcurrencyPolicy;
  /** Prefix of every storage key. @default 'floodgate' */
  prefix?: string;
  /**
   * The caller's clock instead of the store's (tests, simulations). Leases then expire on this clock,
   * so every process sharing a key must share it too. @default the store's clock (Redis `TIME`, PostgreSQL
   * `clock_timestamp()`, SQLite's `julianday('now')`)
   */
  clock?: Clock;
  /**
   * How often a waiting `acquire` asks the store again if no notification came, ms: the most a lost
   * notification (or a lease that ran out, which notifies nobody) delays a waiter. A waiter's place in
   * the queue lasts 3 × `pollMs` past its last ask, so a waiter that crashed leaves the queue within it.
   * @default 1000
   */
  pollMs?: number;
}

/** Options of one permit call. */
export interface PermitCallOptions {
  /** The cost the permit holds: a whole number. @default 1 */
  cost?: number;
  /**
   * The lease's id, for a caller that must name it before the grant (a proxy that releases by request
   * id): 22 characters of A-Z a-z 0-9 - _, unguessable by anyone who must not release it. A grant under
   * the id of a live lease replaces that lease (one permit, not two). @default 128 random bits
   */
  leaseId?: string;
}

/**
 * The outcome of asking for a permit: denial is data. When `allowed`, `permit` holds the grant until
 * released (or until its lease runs out).
 */
export interface PermitDecision {
  allowed: boolean;
  /** The policy's limit: the most cost in flight at once. */
  limit: number;
  /** Cost in flight after the call (this permit included when allowed). */
  inFlight: number;
  /** How many permits of cost 1 would be granted right now, after this call. */
  remaining: number;
  /**
   * 0 when allowed; otherwise ceil ms until enough leases run out for this cost if none is released
   * first (an upper bound: a release frees a permit sooner); Infinity when the cost exceeds the limit.
   */
  retryAfterMs: number;
  /** ceil ms until every lease now live has run out. */
  resetAfterMs: number;
  /** The policy's name. */
  policy: string;
  reason?: 'limit' | 'exceeds-capacity';
  /** The permit, when allowed. */
  permit?: Permit;
}

/** What {@link Permits.withPermit} resolves to: the function's value when it ran, the decision always. */
export type WithPermitResult<T> =
  | { allowed: true; value: T; decision: PermitDecision }
  | { allowed: false; decision: PermitDecision };

/**
 * Concurrency permits under one policy: at most `policy.limit` (summed costs) in flight per key.
 *
 * @example
 * ```ts
 * const permits = createPermits({ store: memoryPermitStore(), policy: concurrency({ limit: 2, leaseMs: 30_000 }) });
 * const d = await permits.limit('user-1');
 * if (d.permit) {
 *   try { … } finally { await d.permit.release(); }
 * }
 * ```
 */
/** A permit call whose permit also tells `onEnd` how it ended (a limiter tracking the permits it granted). */
export let limitTracked: (
  permits: Permits,
  key: string,
  options: PermitCallOptions | undefined,
  onEnd: (end: 'released' | 'lost') => void,
) => Promise<PermitDecision>;

/**
 * What asks for a permit in place of the permit store's `acquire` (the rate store deciding the rate
 * policies in the same call): the acquire's reply, and `kept` false when the grant was given back in that
 * same call (the decision then says granted, with no permit held).
 */
export type PermitSend = (
  storageKey: string,
  args: PermitAcquireArgs,
) => Promise<{ reply: AcquireReply; kept: boolean }>;

/** {@link limitTracked} with the store call made by `send`. */
export let limitThrough: (
  permits: Permits,
  key: string,
  options: PermitCallOptions | undefined,
  onEnd: (end: 'released' | 'lost') => void,
  send: PermitSend,
) => Promise<PermitDecision>;

export class Permits {
  static {
    limitTracked = (permits, key, options, onEnd) => permits.#limit(key, options, telemetry, onEnd);
    limitThrough = (permits, key, options, onEnd, send) => permits.#limit(key, options, telemetry, onEnd, send);
  }

  readonly policy: ConcurrencyPolicy;
  readonly prefix: string;
  readonly #host: PermitHost;
  readonly #pollMs: number;

  constructor(options: PermitsOptions) {
    checkOptionsObject(options, 'createPermits options');
    const { store, policy, clock } = options;
    if (!hasMethods(store, 'acquire', 'refresh', 'release')) {
      throw invalid(
        'ERR_INVALID_OPTION',
        'store',
        store,
        'a permit store: memoryPermitStore(), redisPermitStore(), postgresPermitStore() or sqlitePermitStore()',
      );
    }
    if (typeof policy !== 'object' || policy === null || policy.algorithm !== 'concurrency') {
      throw invalid('ERR_INVALID_POLICY', 'policy', policy, 'a concurrency policy: concurrency({ limit, leaseMs })');
    }
    if (clock !== undefined && (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function')) {
      throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a Clock');
    }
    this.policy = policy;
    this.prefix = validatePrefix(options.prefix ?? 'floodgate');
    this.#pollMs = wholeOption(
      'pollMs',
      options.pollMs ?? 1000,
      1,
      3_600_000,
      'a whole number of ms from 1 to 3600000',
    );
    this.#host = { store, leaseUs: policy.leaseMs * 1000, limit: policy.limit, clock };
    void loadTelemetry();
  }

  /** Asks for a permit of `cost` on `key`, without waiting: the decision says whether it was granted. */
  async limit(key: string, options?: PermitCallOptions): Promise<PermitDecision> {
    const t = telemetry;
    if (t === undefined) {
      tick();
      return this.#limit(key, options, undefined);
    }
    const span = t.startSpan('permit');
    const startedMs = t.now();
    let decision: PermitDecision;
    try {
      decision = await this.#limit(key, options, t);
    } catch (error) {
      t.failed(span, error);
      throw error;
    }
    t.decided(this.prefix, 'permit', key, decision, startedMs, span);
    return decision;
  }

  async #limit(
    key: string,
    options: PermitCallOptions | undefined,
    t: Telemetry | undefined,
    tracked?: (end: 'released' | 'lost') => void,
    send?: PermitSend,
  ): Promise<PermitDecision> {
    validateKey(key);
    const cost = permitCost(options);
    const leaseId = options?.leaseId === undefined ? newLeaseId() : validateLeaseId(options.leaseId);
    const { policy } = this;
    if (cost > policy.limit) {
      return {
        allowed: false,
        limit: policy.limit,
        inFlight: 0,
        remaining: 0,
        retryAfterMs: Number.POSITIVE_INFINITY,
        resetAfterMs: 0,
        policy: policy.name,
        reason: 'exceeds-capacity',
      };
    }
    const host = this.#host;
    const where = this.#storageKey(key);
    const sentMs = localMs(host.clock);
    const args: PermitAcquireArgs = {
      limit: policy.limit,
      leaseUs: host.leaseUs,
      cost,
      leaseId,
      nowUs: host.clock?.nowUs(),
    };
    if (send !== undefined) {
      const { reply, kept } = await this.#call(() => send(where, args));
      // Granted and given back in the same store call: the decision of the grant, with no permit held.
      if (!kept) return this.#decision(key, where, leaseId, cost, reply, sentMs, undefined, undefined, false);
      return this.#decision(key, where, leaseId, cost, reply, sentMs, t, tracked);
    }
    const reply = await this.#call(() => host.store.acquire(where, args));
    return this.#decision(key, where, leaseId, cost, reply, sentMs, t, tracked);
  }

  /** The decision of a store's answer; when granted, with its permit (its timer counted from `sentMs`). */
  #decision(
    key: string,
    where: string,
    leaseId: string,
    cost: number,
    reply: AcquireReply,
    sentMs: number,
    t: Telemetry | undefined,
    tracked?: (end: 'released' | 'lost') => void,
    hold = true,
  ): PermitDecision {
    const { policy } = this;
    const host = this.#host;
    const tookMs = localMs(host.clock) - sentMs;
    const decision: PermitDecision = {
      allowed: reply.granted,
      limit: policy.limit,
      inFlight: reply.inFlight,
      remaining: Math.max(0, policy.limit - reply.inFlight),
      retryAfterMs: reply.granted ? 0 : Math.ceil(reply.retryAfterUs / 1000),
      resetAfterMs: Math.ceil(reply.resetAfterUs / 1000),
      policy: policy.name,
    };
    if (!reply.granted) {
      decision.reason = 'limit';
      return decision;
    }
    if (!hold) return decision;
    let onEnd: ((end: 'released' | 'lost') => void) | undefined = tracked;
    if (t !== undefined) {
      const grantedMs = t.now();
      t.permitGranted(policy.name, cost);
      onEnd = (end) => {
        t.permitEnded(policy.name, cost, grantedMs, end);
        tracked?.(end);
      };
    }
    decision.permit = new Permit(
      host,
      { key, storageKey: where, leaseId, cost, fence: reply.fence },
      (reply.expiresAtUs - reply.nowUs) / 1000 - tookMs,
      onEnd,
    );
    return decision;
  }

  /**
   * Waits for a permit of `cost` on `key` in the key's queue, kept in the store: first come, first served
   * across every process sharing the store, a large cost at the head holding back smaller ones behind it.
   * A release (or a waiter leaving) wakes the waiters it lets in by notification (Redis pub/sub with a
   * `subscriber`, PostgreSQL NOTIFY with a `listener`, SQLite within the process), with a poll every
   * `pollMs` in case a notification is lost (across the processes of a SQLite file, only the poll). Resolves to the decision
   * with its permit; rejects with `ERR_QUEUE_FULL` when `maxQueue` callers wait on the key already,
   * `ERR_TIMEOUT` after `timeoutMs`, `ERR_ABORTED` when `signal` aborts, and `ERR_INVALID_COST` for a
   * cost above the limit. A wait that gives up takes its place out of the queue before it rejects.
   *
   * @example
   * ```ts
   * const { permit } = await permits.acquire('tenant-7', { timeoutMs: 5000 });
   * try { … } finally { await permit.release(); }
   * ```
   */
  async acquire(key: string, options?: PermitAcquireOptions): Promise<PermitDecision & { permit: Permit }> {
    validateKey(key);
    const cost = permitCost(options);
    const { timeoutMs, signal } = waitOptions(options);
    const { policy } = this;
    const host = this.#host;
    const store = host.store;
    if (cost > policy.limit) {
      throw new FloodgateError(
        'ERR_INVALID_COST',
        `cost ${cost} exceeds the limit of ${policy.name} (${policy.limit}): it can never be granted`,
        { option: 'cost' },
      );
    }
    if (typeof store.wait !== 'function' || typeof store.leave !== 'function') {
      throw invalid(
        'ERR_INVALID_OPTION',
        'store',
        store.name,
        'a permit store that can wait (memory, redis, postgres or sqlite)',
      );
    }
    const where = this.#storageKey(key);
    const t = telemetry;
    if (t === undefined) tick();
    return waitInQueue(
      {
        store: store as WaitingStore,
        storageKey: where,
        clock: host.clock,
        pollMs: this.#pollMs,
        call: (run) => this.#call(run),
        args: (leaseId) => ({
          limit: policy.limit,
          leaseUs: host.leaseUs,
          cost,
          leaseId,
          maxQueue: policy.maxQueue,
          waiterUs: this.#pollMs * WAITER_POLLS * 1000,
          nowUs: host.clock?.nowUs(),
        }),
        granted: (leaseId, reply, sentMs) =>
          this.#decision(key, where, leaseId, cost, reply, sentMs, t) as PermitDecision & { permit: Permit },
      },
      timeoutMs,
      signal,
    );
  }

  /**
   * Runs `fn` holding a permit and releases it in `finally`. When no permit is granted, `fn` does not
   * run. `fn` gets the permit's `signal`: stop the work when it aborts (the lease was lost).
   */
  async withPermit<T>(
    key: string,
    fn: (signal: AbortSignal, permit: Permit) => T | Promise<T>,
    options?: PermitCallOptions,
  ): Promise<WithPermitResult<T>> {
    if (typeof fn !== 'function') throw invalid('ERR_INVALID_OPTION', 'fn', fn, 'a function');
    const decision = await this.limit(key, options);
    const permit = decision.permit;
    if (permit === undefined) return { allowed: false, decision };
    let value: T;
    try {
      value = await fn(permit.signal, permit);
    } catch (error) {
      // The function's error wins; a failed release leaves the permit to its lease.
      await permit.release().catch(() => {});
      throw error;
    }
    await permit.release();
    return { allowed: true, value, decision };
  }

  /**
   * Releases a lease by id, e.g. one granted in another process. Resolves to whether this call ended
   * a live lease; an unknown or expired id changes nothing.
   */
  async release(key: string, leaseId: string): Promise<boolean> {
    const reply = await this.#byId(key, leaseId, (host, where) =>
      host.store.release(where, { limit: host.limit, leaseId, nowUs: host.clock?.nowUs() }),
    );
    return reply.released;
  }

  /**
   * Extends a live lease by id to `leaseMs` from now. Resolves to false, changing nothing, when the lease
   * is not live: an expired lease is never taken back.
   */
  async refresh(key: string, leaseId: string): Promise<boolean> {
    const reply = await this.#byId(key, leaseId, (host, where) =>
      host.store.refresh(where, { limit: host.limit, leaseUs: host.leaseUs, leaseId, nowUs: host.clock?.nowUs() }),
    );
    return reply.refreshed;
  }

  #storageKey(key: string): string {
    return storageKey(this.prefix, encodeKey(key), this.policy.name);
  }

  /** A store call on one lease named by its id, the key and the id checked first. */
  #byId<R>(key: string, leaseId: string, run: (host: PermitHost, where: string) => R | Promise<R>): Promise<R> {
    validateKey(key);
    validateLeaseId(leaseId);
    const where = this.#storageKey(key);
    return this.#call(() => run(this.#host, where));
  }

  async #call<R>(run: () => R | Promise<R>): Promise<R> {
    try {
      return await run();
    } catch (error) {
      throw toStoreError(this.#host.store.name, error);
    }
  }
}

/** Creates {@link Permits}: concurrency permits under one policy, on one store. */
export function createPermits(options: PermitsOptions): Permits {
  return new Permits(options);
}

function permitCost(options: PermitCallOptions | undefined): number {
  if (options === undefined) return 1;
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
  }
  const cost = options.cost === undefined ? 1 : options.cost;
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 1) {
    throw new FloodgateError(
      'ERR_INVALID_COST',
      `cost must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER}, got ${describeValue(cost)}`,
      { option: 'cost' },
    );
  }
  return cost;
}
