import type { Clock } from '../clock.js';
import { invalid } from '../errors.js';
import { HASH_KEYS_LONGER_THAN } from '../keys.js';
import { countResolution, MIN_COST, type Resolved } from '../model/cost.js';
import type { Decision, PolicyDecision } from '../model/decision.js';
import { quotaOf } from '../model/policy.js';
import type { Limiter } from './limiter.js';
import { localBounds, localCallCost, localPolicies } from './local-limiter.js';

/** Options of {@link syncedLimiter}. */
export interface SyncedOptions {
  /** How often each key's local count is pushed to the store and the store's count read back, ms. @default 100 */
  syncMs?: number;
  /**
   * Units of one key this process may admit between two syncs without asking the store: the bound on
   * over-admission is (processes) × `localBudget`. Calls that do not fit in it are decided by the store.
   * @default what the tightest policy refills in `syncMs` (its limit at most)
   */
  localBudget?: number;
  /**
   * Most keys counted locally at once. When that many are held, the oldest key with nothing pending makes
   * room; when the oldest few all have units pending, a new key is decided by the store. @default 10_000
   */
  maxKeys?: number;
  /** The clock sync times are measured on. @default systemClock */
  clock?: Clock;
  /** Sync on a timer every `syncMs`. `false` leaves it to calls of `sync()` (tests, custom schedulers). @default true */
  autoSync?: boolean;
}

/** Counters of a {@link SyncedLimiter}, for metrics and benchmarks. */
export interface SyncedStats {
  /** Calls admitted locally, without the store. */
  localDecisions: number;
  /** Denials answered from memory until the store said the call could pass. */
  cachedDenials: number;
  /** Calls decided by the store (no local count yet, outside the budget, or a check). */
  storeDecisions: number;
  /** Pushes of a key's local count (each one store call, two when the store could take only part of it). */
  pushes: number;
  /** Reads of a key's count when nothing was pending. */
  refreshes: number;
  /** Units admitted locally that the store could not take when pushed: the fleet had over-admitted. Paid back later. */
  unitsOwed: number;
  /** Syncs of a key that failed (the store threw, or the failure policy answered); the units stay pending and are pushed again. */
  syncErrors: number;
}

interface Entry {
  /** The store's last answer for this key, and when it arrived (local ms). */
  snapshot: Decision;
  snapshotAtMs: number;
  /** `localTotal` when the snapshot's call was sent: admissions after it are not in the snapshot. */
  snapshotMark: number;
  /** Units the snapshot says are left, minus what was admitted locally since. */
  room: number;
  /** Units admitted locally and not yet counted by the store (in flight included); never above the budget. */
  unsynced: number;
  /** Units ever admitted locally on this key, in this process. */
  localTotal: number;
  /** The last push could not be taken whole: this process admits nothing locally until it is. */
  owed: boolean;
  /** Used (a call on the key) since the last sync. */
  used: boolean;
  /** A store call for this key is running; callers that need the store wait for it. */
  busy: Promise<void> | undefined;
  /** A denial from the store, answered locally until it may pass (for this cost or more). */
  denied: Decision | undefined;
  deniedUntilMs: number;
  deniedCost: number;
  /**
   * When the store last said the key is over the limit (a denial, units owed, or a count with no room
   * left), local ms; -Infinity when it has room. For `syncMs` after it, every call on the key is denied
   * locally: at most one store call per key per sync interval while it is over.
   */
  overAtMs: number;
}

/** Oldest entries looked at for one to drop when `maxKeys` are held. */
const DROP_SCAN = 16;

/**
 * Decides every call of hot keys in this process and settles with the store every `syncMs`. See
 * {@link syncedLimiter}.
 */
export class SyncedLimiter {
  readonly limiter: Limiter;
  readonly syncMs: number;
  readonly localBudget: number;
  readonly maxKeys: number;
  readonly stats: SyncedStats = {
    localDecisions: 0,
    cachedDenials: 0,
    storeDecisions: 0,
    pushes: 0,
    refreshes: 0,
    unitsOwed: 0,
    syncErrors: 0,
  };
  private readonly clock: Clock;
  private readonly entries = new Map<string, Entry>();
  private readonly autoSync: boolean;
  private timer: ReturnType<typeof setInterval> | undefined;
  private syncing: Promise<void> | undefined;
  private closed = false;
  private readonly resolved: readonly Resolved[];

  constructor(limiter: Limiter, options: SyncedOptions = {}) {
    const compiled = localPolicies(limiter, options, 'synced');
    // Local counts hold up to the smallest limit whatever the kind (a meter's too): the same resolution.
    this.resolved = compiled.map((c) => ({ name: c.name, limit: c.limit, resolution: countResolution(c.limit) }));
    const syncMs = options.syncMs ?? 100;
    if (typeof syncMs !== 'number' || !Number.isFinite(syncMs) || !(syncMs >= 1) || syncMs > 2 ** 31 - 1) {
      throw invalid('ERR_INVALID_OPTION', 'syncMs', options.syncMs, 'a number of milliseconds from 1');
    }
    const smallest = Math.min(...compiled.map((c) => c.limit));
    const fallback = Math.min(smallest, ...limiter.policies.map((p) => quotaOf(p).ratePerMs * syncMs));
    const localBudget = options.localBudget ?? fallback;
    if (typeof localBudget !== 'number' || !Number.isFinite(localBudget) || localBudget < 0 || localBudget > smallest) {
      throw invalid(
        'ERR_INVALID_OPTION',
        'localBudget',
        options.localBudget,
        `a number from 0 to ${smallest} (the smallest limit)`,
      );
    }
    const { maxKeys, clock } = localBounds(options);
    const autoSync = options.autoSync ?? true;
    if (typeof autoSync !== 'boolean') throw invalid('ERR_INVALID_OPTION', 'autoSync', autoSync, 'a boolean');
    this.limiter = limiter;
    this.syncMs = syncMs;
    this.localBudget = localBudget;
    this.maxKeys = maxKeys;
    this.clock = clock;
    this.autoSync = autoSync;
  }

  /** Keys counted locally now. */
  get keys(): number {
    return this.entries.size;
  }

  /**
   * Decides a call and consumes its cost: locally when the key's last count from the store and this
   * process's budget leave room, else with one store call (after pushing what is pending on the key).
   */
  async limit(key: string, options?: { cost?: number }): Promise<Decision> {
    const cost = localCallCost('synced', key, options, this.resolved, this.closed);
    if (cost === 0 || key.length > HASH_KEYS_LONGER_THAN) {
      // A check changes nothing: the store answers it. A long key is not kept (its count would hold the
      // key), so it is decided at the store like any call without local room.
      this.stats.storeDecisions++;
      return this.limiter.limit(key, { cost });
    }
    for (;;) {
      const entry = this.entries.get(key);
      if (entry === undefined) {
        const added = this.add(key);
        if (added === undefined) {
          this.stats.storeDecisions++;
          return this.limiter.limit(key, { cost });
        }
        return this.exact(key, added, cost);
      }
      entry.used = true;
      if (!entry.owed && entry.room >= cost && entry.unsynced + cost <= this.localBudget) {
        entry.room -= cost;
        entry.unsynced += cost;
        entry.localTotal += cost;
        this.stats.localDecisions++;
        return this.localAdmission(entry);
      }
      const nowMs = this.nowMs();
      if (entry.denied !== undefined && entry.deniedUntilMs > nowMs && cost >= entry.deniedCost) {
        this.stats.cachedDenials++;
        return { ...entry.denied, retryAfterMs: Math.max(1, Math.ceil(entry.deniedUntilMs - nowMs)) };
      }
      if (nowMs - entry.overAtMs < this.syncMs) return this.overDenial(entry, nowMs);
      if (entry.busy !== undefined) {
        await entry.busy;
        continue;
      }
      return this.exact(key, entry, cost);
    }
  }

  /**
   * Pushes every key's pending count to the store and reads back the store's count of every key used since
   * the last sync; keys unused for a whole cycle are dropped. Runs every `syncMs` unless `autoSync` is off.
   */
  sync(): Promise<void> {
    if (this.syncing === undefined) {
      this.syncing = this.cycle().finally(() => {
        this.syncing = undefined;
      });
    }
    return this.syncing;
  }

  /**
   * Pushes every pending count now and waits for every push to finish. When the store fails a push, what
   * is pending stays so (counted in `syncErrors`, pushed again by later syncs) and the flush ends.
   */
  async flush(): Promise<void> {
    for (;;) {
      const errors = this.stats.syncErrors;
      const work: Promise<void>[] = [];
      for (const [key, entry] of this.entries) {
        if (entry.busy !== undefined) work.push(entry.busy);
        else if (entry.unsynced >= MIN_COST) {
          work.push(
            this.locked(entry, () => this.push(key, entry)).catch(() => {
              this.stats.syncErrors++;
            }),
          );
        }
      }
      if (work.length === 0) return;
      await Promise.all(work);
      if (this.stats.syncErrors !== errors) return;
      if (![...this.entries.values()].some((e) => e.unsynced >= MIN_COST && !e.owed)) return;
    }
  }

  /** Pushes every pending count and stops taking calls; the limiter and its store stay open. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    await this.syncing;
    await this.flush();
    this.entries.clear();
  }

  private nowMs(): number {
    return this.clock.nowUs() / 1000;
  }

  /**
   * A new entry for `key`, or undefined when `maxKeys` are held and none of the oldest few can be dropped
   * (each has units the store has not counted yet): the call then goes to the store without a local count,
   * so a flood of new keys neither drops what is pending nor costs more than a few steps per call.
   */
  private add(key: string): Entry | undefined {
    if (this.entries.size >= this.maxKeys) {
      let looked = 0;
      let dropped = false;
      for (const [oldKey, old] of this.entries) {
        if (++looked > DROP_SCAN) break;
        if (old.busy !== undefined || old.unsynced >= MIN_COST) continue;
        this.entries.delete(oldKey);
        dropped = true;
        break;
      }
      if (!dropped) return undefined;
    }
    const entry: Entry = {
      snapshot: undefined as unknown as Decision,
      snapshotAtMs: 0,
      snapshotMark: 0,
      room: 0,
      unsynced: 0,
      localTotal: 0,
      owed: false,
      used: true,
      busy: undefined,
      denied: undefined,
      deniedUntilMs: 0,
      deniedCost: 0,
      overAtMs: Number.NEGATIVE_INFINITY,
    };
    this.entries.set(key, entry);
    if (this.autoSync && this.timer === undefined) {
      this.timer = setInterval(() => void this.sync(), this.syncMs);
      this.timer.unref?.();
    }
    return entry;
  }

  /** Runs `work` as the key's only store call; callers that need the store meanwhile wait for it. */
  private async locked<T>(entry: Entry, work: () => Promise<T>): Promise<T> {
    let done: () => void = () => {};
    entry.busy = new Promise((resolve) => {
      done = resolve;
    });
    try {
      return await work();
    } finally {
      entry.busy = undefined;
      done();
    }
  }

  /** The store decides the call, after what this process admitted on the key is pushed. */
  private exact(key: string, entry: Entry, cost: number): Promise<Decision> {
    return this.locked(entry, async () => {
      if (entry.unsynced >= MIN_COST) await this.push(key, entry);
      if (entry.owed) {
        // The store could not take all this process admitted: nothing more until it has.
        this.stats.cachedDenials++;
        return { ...entry.snapshot, allowed: false, reason: 'limit', retryAfterMs: Math.max(1, this.syncMs) };
      }
      const mark = entry.localTotal;
      const sentMs = this.nowMs();
      this.stats.storeDecisions++;
      const decision = await this.limiter.limit(key, { cost });
      this.observe(entry, decision, mark, sentMs);
      entry.overAtMs = decision.allowed || decision.reason !== 'limit' ? Number.NEGATIVE_INFINITY : sentMs;
      if (!decision.allowed && decision.reason === 'limit' && Number.isFinite(decision.retryAfterMs)) {
        // A denial consumes nothing: only time lets the call pass (others' calls only make it wait longer).
        entry.denied = decision;
        entry.deniedCost = cost;
        entry.deniedUntilMs = sentMs + decision.retryAfterMs;
      }
      return decision;
    });
  }

  /** Takes a store answer as the key's count; what was admitted locally while it was asked is kept off. */
  private observe(entry: Entry, decision: Decision, mark: number, sentMs: number): void {
    entry.snapshot = decision;
    entry.snapshotAtMs = sentMs;
    entry.snapshotMark = mark;
    // A decision of the failure policy says nothing of the count: no local room until the store answers.
    entry.room = decision.reason === 'degraded' ? 0 : decision.remaining - (entry.localTotal - mark);
  }

  /**
   * Charges the key's pending units to the store in one call. When the store cannot take them whole (other
   * processes admitted in the meantime), it takes what fits, and the rest is owed: pushed again at the next
   * sync, and this process admits nothing locally on the key until it is.
   */
  private async push(key: string, entry: Entry): Promise<void> {
    const units = entry.unsynced;
    const mark = entry.localTotal;
    const sentMs = this.nowMs();
    this.stats.pushes++;
    let decision = await this.limiter.limit(key, { cost: units });
    if (decision.reason === 'degraded') {
      // The failure policy answered, admitting or not: the store counted nothing, the units stay pending.
      this.stats.syncErrors++;
      entry.denied = undefined;
      this.observe(entry, decision, mark, sentMs);
      return;
    }
    if (decision.allowed) {
      entry.unsynced -= units;
      entry.owed = false;
    } else {
      const fit = Math.min(units, decision.remaining);
      if (fit >= MIN_COST) {
        const part = await this.limiter.limit(key, { cost: fit });
        if (part.allowed && part.reason !== 'degraded') {
          entry.unsynced -= fit;
          decision = part;
        }
      }
      if (!entry.owed) this.stats.unitsOwed += entry.unsynced;
      entry.owed = entry.unsynced >= MIN_COST;
    }
    if (!(entry.unsynced >= MIN_COST)) entry.unsynced = 0;
    entry.denied = undefined;
    this.observe(entry, decision, mark, sentMs);
    if (entry.owed) {
      entry.room = 0;
      entry.overAtMs = sentMs;
    }
  }

  private async cycle(): Promise<void> {
    const work: Promise<void>[] = [];
    for (const [key, entry] of this.entries) {
      if (entry.busy !== undefined) continue;
      if (entry.unsynced >= MIN_COST) {
        work.push(
          this.locked(entry, () => this.push(key, entry)).catch(() => {
            this.stats.syncErrors++;
          }),
        );
      } else if (entry.used) {
        work.push(
          this.locked(entry, async () => {
            const mark = entry.localTotal;
            const sentMs = this.nowMs();
            this.stats.refreshes++;
            this.observe(entry, await this.limiter.limit(key, { cost: 0 }), mark, sentMs);
            // Still no room: the key stays over for another interval, this read its one store call.
            if (entry.overAtMs > Number.NEGATIVE_INFINITY)
              entry.overAtMs = entry.room > 0 ? Number.NEGATIVE_INFINITY : sentMs;
          }).catch(() => {
            this.stats.syncErrors++;
          }),
        );
      } else {
        this.entries.delete(key);
        continue;
      }
      entry.used = false;
    }
    await Promise.all(work);
    if (this.entries.size === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** A call on a key over the limit, within `syncMs` of the store saying so: denied without a store call. */
  private overDenial(entry: Entry, nowMs: number): Decision {
    this.stats.cachedDenials++;
    const retryAfterMs = Math.max(1, Math.ceil(entry.overAtMs + this.syncMs - nowMs));
    const base = entry.denied ?? entry.snapshot;
    return {
      ...base,
      allowed: false,
      reason: 'limit',
      remaining: 0,
      retryAfterMs,
      policies: base.policies.map((p) => ({ ...p, allowed: false, remaining: 0, retryAfterMs })),
    };
  }

  private localAdmission(entry: Entry): Decision {
    const s = entry.snapshot;
    const used = entry.localTotal - entry.snapshotMark;
    const elapsedMs = this.nowMs() - entry.snapshotAtMs;
    const policies = s.policies.map(
      (p): PolicyDecision => ({
        policy: p.policy,
        allowed: true,
        limit: p.limit,
        remaining: Math.max(0, Math.floor(p.remaining - used)),
        retryAfterMs: 0,
        resetAfterMs: Math.max(0, Math.ceil(p.resetAfterMs - elapsedMs)),
      }),
    );
    return {
      allowed: true,
      limit: s.limit,
      remaining: Math.max(0, Math.floor(entry.room)),
      retryAfterMs: 0,
      resetAfterMs: Math.max(0, Math.ceil(s.resetAfterMs - elapsedMs)),
      policy: s.policy,
      policies,
    };
  }
}

/**
 * Eventually consistent limits for hot keys: each process decides calls locally from the store's last
 * count of the key and its own admissions since, and settles with the store every `syncMs` (one call per
 * active key: it charges what was admitted locally and reads back the fleet's count). No store call on the
 * hot path; the price is bounded over-admission: at any moment each process has admitted at most
 * `localBudget` units the store has not counted, so the fleet admits at most
 * processes × `localBudget` more than the policies allow (the default budget is what the tightest policy
 * refills in `syncMs`: processes × rate × syncMs). Units the store cannot take when pushed are owed and
 * pushed again before the process admits locally again, so nothing admitted goes uncounted.
 *
 * Compare {@link leasedLimiter}: leases never over-admit, but quota leased out waits unused. See
 * docs/failure-modes.md.
 *
 * @example
 * ```ts
 * const limiter = createLimiter({ store: redisStore({ client }), policies: [gcra({ limit: 10_000, periodMs: 1000 })] });
 * const synced = syncedLimiter(limiter, { syncMs: 100 }); // at most 1,000 calls per process between syncs
 * const decision = await synced.limit('tenant-42');
 * await synced.close(); // at shutdown: pending counts are pushed
 * ```
 */
export function syncedLimiter(limiter: Limiter, options?: SyncedOptions): SyncedLimiter {
  return new SyncedLimiter(limiter, options);
}
