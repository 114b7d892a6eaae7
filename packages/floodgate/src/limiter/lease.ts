import type { Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { HASH_KEYS_LONGER_THAN } from '../keys.js';
import { countResolution, MIN_COST, type Resolved } from '../model/cost.js';
import type { Decision } from '../model/decision.js';
import { kindOf } from '../model/kinds.js';
import { giveBack, takeLease } from './leasing.js';
import type { Limiter } from './limiter.js';
import { localBounds, localCallCost, localPolicies } from './local-limiter.js';

/** Options of {@link leasedLimiter}. */
export interface LeaseOptions {
  /** Units one lease takes from the store in one call; at most the smallest `limit` of the policies. */
  size: number;
  /**
   * How long a process spends a lease before giving back what is left, ms (never past the end of a fixed
   * window the lease was counted in). Admissions happen at most this long after the store counted them.
   * @default 100
   */
  ttlMs?: number;
  /** Most keys holding a lease at once; the oldest lease is given back first. @default 10_000 */
  maxKeys?: number;
  /** The clock lease lifetimes are measured on. @default systemClock */
  clock?: Clock;
}

/** Counters of a {@link LeasedLimiter}, for metrics and benchmarks. */
export interface LeaseStats {
  /** Leases taken. */
  leases: number;
  /** Calls made to the store: leases (whole or smaller), calls decided one by one, refunds. */
  storeCalls: number;
  /** Calls admitted from a lease, without the store. */
  localDecisions: number;
  /** Denials answered from memory until the store said the call could pass. */
  cachedDenials: number;
  /** Refunds made, and the units they gave back. */
  refunds: number;
  unitsReturned: number;
}

interface Lease {
  readonly leased: number;
  left: number;
  /** When the store counted it, µs on the store's clock (undefined: the store did not say, no refund). */
  readonly atUs: number | undefined;
  /** Local time (ms) after which it is not spent any more. */
  readonly expiresAtMs: number;
  readonly decision: Decision;
}

interface Entry {
  lease: Lease | undefined;
  pending: Promise<void> | undefined;
  /** A denial from the store, answered locally until it may pass (for this cost or more). */
  deniedUntilMs: number;
  deniedCost: number;
  denied: Decision | undefined;
}

/**
 * Takes part of the global quota of hot keys in one store call and spends it in this process. See
 * {@link leasedLimiter}.
 */
export class LeasedLimiter {
  readonly limiter: Limiter;
  readonly size: number;
  readonly ttlMs: number;
  readonly maxKeys: number;
  readonly stats: LeaseStats = {
    leases: 0,
    storeCalls: 0,
    localDecisions: 0,
    cachedDenials: 0,
    refunds: 0,
    unitsReturned: 0,
  };
  private readonly clock: Clock;
  private readonly resettingWindows: readonly number[];
  private readonly entries = new Map<string, Entry>();
  private readonly returning = new Set<Promise<void>>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;
  private readonly resolved: readonly Resolved[];

  constructor(limiter: Limiter, options: LeaseOptions) {
    const compiled = localPolicies(limiter, options, 'leased');
    // Local counts hold up to the smallest limit whatever the kind (a meter's too): the same resolution.
    this.resolved = compiled.map((c) => ({ name: c.name, limit: c.limit, resolution: countResolution(c.limit) }));
    if (typeof limiter.store.refund !== 'function') {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `the ${limiter.store.name} store cannot give units back (it has no refund()), so it cannot lease`,
        { option: 'store' },
      );
    }
    const smallest = Math.min(...compiled.map((c) => c.limit));
    const size = options.size;
    if (typeof size !== 'number' || !Number.isFinite(size) || !(size >= MIN_COST) || size > smallest) {
      throw invalid(
        'ERR_INVALID_OPTION',
        'size',
        size,
        `a number from ${MIN_COST} (the smallest cost) to ${smallest} (the smallest limit)`,
      );
    }
    const ttlMs = options.ttlMs ?? 100;
    if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs) || !(ttlMs > 0) || ttlMs > 2 ** 31 - 1) {
      throw invalid('ERR_INVALID_OPTION', 'ttlMs', options.ttlMs, 'a number of milliseconds above 0');
    }
    const { maxKeys, clock } = localBounds(options);
    this.limiter = limiter;
    this.size = size;
    this.ttlMs = ttlMs;
    this.maxKeys = maxKeys;
    this.clock = clock;
    this.resettingWindows = compiled.flatMap((c, i) => (kindOf(c).leaseEndsAtReset ? [i] : []));
  }

  /** Keys holding a lease or a remembered denial now. */
  get keys(): number {
    return this.entries.size;
  }

  /**
   * Decides a call and consumes its cost, from this process's lease of the key when it holds enough,
   * else with one store call that takes a new lease (or decides the call alone when a lease does not fit).
   */
  async limit(key: string, options?: { cost?: number }): Promise<Decision> {
    const cost = localCallCost('leased', key, options, this.resolved, this.closed);
    if (cost === 0 || cost > this.size || key.length > HASH_KEYS_LONGER_THAN) {
      // A check, or more than a lease holds: the store decides it alone. So does a long key: a lease
      // keeps its key to give units back, and hot keys are short, so leases never hold more than
      // `maxKeys` × 200 characters of keys, whatever length clients send.
      this.stats.storeCalls++;
      return this.limiter.limit(key, { cost });
    }
    for (;;) {
      const entry = this.entries.get(key);
      if (entry?.pending !== undefined) {
        await entry.pending;
        continue;
      }
      const nowMs = this.nowMs();
      const lease = entry?.lease;
      if (lease !== undefined) {
        if (lease.expiresAtMs > nowMs && lease.left >= cost) {
          lease.left -= cost;
          this.stats.localDecisions++;
          return { ...lease.decision, remaining: Math.floor(lease.left) };
        }
        this.retire(key, entry as Entry);
      }
      if (entry?.denied !== undefined && entry.deniedUntilMs > nowMs && cost >= entry.deniedCost) {
        this.stats.cachedDenials++;
        return { ...entry.denied, retryAfterMs: Math.max(1, Math.ceil(entry.deniedUntilMs - nowMs)) };
      }
      const current = entry ?? this.add(key);
      let done: () => void = () => {};
      current.pending = new Promise((resolve) => {
        done = resolve;
      });
      try {
        return await this.take(key, current, cost, nowMs);
      } finally {
        current.pending = undefined;
        done();
      }
    }
  }

  /** Gives back the unused units of every lease now, and waits for every refund to finish. */
  async flush(): Promise<void> {
    for (const [key, entry] of this.entries) {
      if (entry.lease !== undefined) this.retire(key, entry);
    }
    while (this.returning.size > 0) await Promise.all([...this.returning]);
  }

  /** Gives every lease back and stops taking calls; the limiter and its store stay open. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    while (this.entries.size > 0 || this.returning.size > 0) {
      const pending: Promise<void>[] = [];
      for (const entry of this.entries.values()) if (entry.pending !== undefined) pending.push(entry.pending);
      await Promise.all(pending);
      await this.flush();
      this.entries.clear();
    }
  }

  private nowMs(): number {
    return this.clock.nowUs() / 1000;
  }

  /** One store call for a lease; a smaller one when the whole does not fit; else the call alone. */
  private async take(key: string, entry: Entry, cost: number, sentMs: number): Promise<Decision> {
    let size = this.size;
    for (let attempt = 0; attempt < 2; attempt++) {
      this.stats.storeCalls++;
      const grant = await takeLease(this.limiter, key, size, cost);
      const decision = grant.decision;
      // Decided without the store (the failure policy), for this call alone: no lease.
      if (grant.resetAfterUs === undefined) return decision;
      if (decision.allowed) {
        // Spent until ttlMs after the call was sent (the store counted the lease later than that), and
        // never past the end of a window the lease was counted in (a kind whose `leaseEndsAtReset`).
        let lifetimeMs = this.ttlMs;
        for (const i of this.resettingWindows) {
          lifetimeMs = Math.min(lifetimeMs, (grant.resetAfterUs[i] ?? 0) / 1000);
        }
        entry.lease = { leased: size, left: size - cost, atUs: grant.atUs, expiresAtMs: sentMs + lifetimeMs, decision };
        entry.denied = undefined;
        this.stats.leases++;
        this.schedule();
        return { ...decision, remaining: Math.floor(size - cost) };
      }
      // What every policy still has: a smaller lease of that, if the call fits in it.
      const left = Math.min(...decision.policies.map((p) => p.remaining));
      if (attempt > 0 || decision.reason !== 'limit' || left < cost || left >= size) break;
      size = left;
    }
    this.stats.storeCalls++;
    const decision = await this.limiter.limit(key, { cost });
    if (!decision.allowed && decision.reason !== 'degraded' && Number.isFinite(decision.retryAfterMs)) {
      // Exact like the blocked-key cache: a denial consumes nothing, so only time (or a refund, which
      // only makes this err towards denying) lets the call pass; asked again once it may.
      entry.denied = decision;
      entry.deniedCost = cost;
      entry.deniedUntilMs = sentMs + decision.retryAfterMs;
    }
    return decision;
  }

  private add(key: string): Entry {
    if (this.entries.size >= this.maxKeys) {
      for (const [oldKey, old] of this.entries) {
        if (old.pending !== undefined) continue;
        if (old.lease !== undefined) this.retire(oldKey, old);
        this.entries.delete(oldKey);
        break;
      }
    }
    const entry: Entry = { lease: undefined, pending: undefined, deniedUntilMs: 0, deniedCost: 0, denied: undefined };
    this.entries.set(key, entry);
    return entry;
  }

  /** Ends a lease: its unused units go back to the store in the background. */
  private retire(key: string, entry: Entry): void {
    const lease = entry.lease;
    entry.lease = undefined;
    // Float dust from fractional costs is not worth a store call.
    if (lease === undefined || !(lease.left > 1e-9) || lease.atUs === undefined) return;
    this.stats.storeCalls++;
    const giving = giveBack(this.limiter, key, lease.leased, lease.atUs, lease.left).then((done) => {
      if (done) {
        this.stats.refunds++;
        this.stats.unitsReturned += lease.left;
      }
      this.returning.delete(giving);
    });
    this.returning.add(giving);
  }

  /** Retires expired leases in the background, so idle keys give their units back too. */
  private schedule(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => {
      const nowMs = this.nowMs();
      for (const [key, entry] of this.entries) {
        if (entry.pending !== undefined) continue;
        if (entry.lease !== undefined && entry.lease.expiresAtMs <= nowMs) this.retire(key, entry);
        if (entry.lease === undefined && entry.deniedUntilMs <= nowMs) this.entries.delete(key);
      }
      if (this.entries.size === 0 && this.timer !== undefined) {
        clearInterval(this.timer);
        this.timer = undefined;
      }
    }, this.ttlMs);
    this.timer.unref?.();
  }
}

/**
 * Leased local quota for very hot keys: each process takes `size` units of a key's quota in one store
 * call (an ordinary call of cost `size`, so the store counts every leased unit at once, under every
 * policy) and admits calls from it locally until it is spent or `ttlMs` has passed; what is left goes
 * back to the store. Never admits more than the policies allow: every unit admitted was consumed in the
 * store first. The cost is some under-admission: units leased but not yet used are out of everyone
 * else's reach until they are given back. See docs/failure-modes.md for the exact bounds.
 *
 * Works with every algorithm except those whose limit depends on each call reaching the store: a
 * leaky bucket in queue mode, `minGapMs`, `countDenied`, and `blockMs` (typed `ERR_INVALID_POLICY`).
 *
 * @example
 * ```ts
 * const limiter = createLimiter({ store: redisStore({ client }), policies: [gcra({ limit: 10_000, periodMs: 1000 })] });
 * const hot = leasedLimiter(limiter, { size: 50, ttlMs: 100 });
 * const decision = await hot.limit('tenant-42'); // one Redis call per 50 admissions
 * await hot.close(); // at shutdown: unused units go back
 * ```
 */
export function leasedLimiter(limiter: Limiter, options: LeaseOptions): LeasedLimiter {
  return new LeasedLimiter(limiter, options);
}
