import { type Clock, systemClock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import type { Policy } from '../model/policy.js';
import { toStoreError } from '../stores/store-errors.js';
import type { OverrideBackend } from './backend.js';
import { mergePolicies } from './merge.js';
import {
  decodeRecord,
  encodeRecord,
  MAX_OVERRIDE_PAGE,
  type OverrideInput,
  type OverrideScope,
  type OverrideTarget,
  recordId,
  type StoredOverride,
  validateInput,
  validateOverrideId,
  validateTarget,
} from './record.js';

/** Options of {@link createOverrides}. */
export interface OverridesOptions {
  /** Where overrides are kept: `memoryOverrides()`, `redisOverrides(…)`, `postgresOverrides(…)`, `sqliteOverrides(…)`. */
  backend: OverrideBackend;
  /** The clock of `expiresAt`, `updatedAt`, the cache's TTL and its refresh. @default systemClock */
  clock?: Clock;
  /** Most targets the local cache holds, overrides found and targets without one alike. @default 10_000 */
  cacheSize?: number;
  /**
   * How often the cache reads the store's change counter, ms: a change made anywhere is used by every
   * lookup that starts this long after it (plus one round trip to the store). @default 500
   */
  refreshMs?: number;
  /** Longest one cached answer is used before it is read again, whatever the counter says, ms. @default 60_000 */
  ttlMs?: number;
}

/** The targets of one call: its key, and its tenant and plan when it has them. */
export interface OverrideLookup {
  key: string;
  tenant?: string | undefined;
  plan?: string | undefined;
}

/** Options of {@link Overrides.list}. */
export interface ListOverridesOptions {
  /** Only this scope. */
  scope?: OverrideScope;
  /** Where the previous page ended (its `cursor`). */
  cursor?: string;
  /** Most overrides on the page, 1 to 1000. @default 100 */
  limit?: number;
}

/** A page of {@link Overrides.list}. */
export interface OverridesPage {
  overrides: StoredOverride[];
  /** Pass it to get the next page; absent on the last page. */
  cursor?: string;
}

/** What the cache did: for tests, metrics and tuning `cacheSize`. */
export interface OverridesCacheStats {
  entries: number;
  hits: number;
  /** Targets read from the store (each read asks for a call's key, tenant and plan together). */
  misses: number;
  /** Times a changed counter emptied the cache. */
  invalidations: number;
}

interface Entry {
  value: StoredOverride | null;
  readAtMs: number;
}

const MAX_CURSOR_LENGTH = 512;

/**
 * Creates the overrides of a store: set, read, list and delete them, and look a call's up through a
 * bounded local cache. Pass it to {@link withOverrides} to apply them to a limiter.
 *
 * @example
 * ```ts
 * const overrides = createOverrides({ backend: memoryOverrides() });
 * await overrides.set({ scope: 'tenant', id: 'acme' }, { policies: gcra({ limit: 1000, periodMs: 60_000 }) });
 * ```
 */
export function createOverrides(options: OverridesOptions): Overrides {
  return new Overrides(options);
}

export class Overrides {
  readonly backend: OverrideBackend;
  private readonly clock: Clock;
  private readonly cacheSize: number;
  private readonly refreshMs: number;
  private readonly ttlMs: number;
  private readonly cache = new Map<string, Entry>();
  private readonly pending = new Map<string, Promise<StoredOverride | null>>();
  /** Moves when the cache is emptied: a read that started before is not cached. */
  private generation = 0;
  private knownVersion: string | undefined;
  private polledAtMs = Number.NEGATIVE_INFINITY;
  private polling: Promise<void> | undefined;
  private readonly counts = { hits: 0, misses: 0, invalidations: 0 };
  /** Merged policies per record and base list: stable arrays, so a limiter's compiled-policy memo hits. */
  private readonly merged = new WeakMap<StoredOverride, WeakMap<readonly Policy[], readonly Policy[]>>();

  constructor(options: OverridesOptions) {
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'createOverrides(options)', options, 'an options object');
    }
    const b = options.backend;
    if (typeof b !== 'object' || b === null || typeof b.read !== 'function' || typeof b.version !== 'function') {
      throw invalid(
        'ERR_INVALID_OPTION',
        'backend',
        b,
        'an override backend (memoryOverrides(), redisOverrides(…), …)',
      );
    }
    this.backend = b;
    this.clock = options.clock ?? systemClock;
    this.cacheSize = whole('cacheSize', options.cacheSize ?? 10_000, 1, 10_000_000);
    this.refreshMs = whole('refreshMs', options.refreshMs ?? 500, 0, 3_600_000);
    this.ttlMs = whole('ttlMs', options.ttlMs ?? 60_000, 0, 86_400_000);
  }

  private nowMs(): number {
    return Math.floor(this.clock.nowUs() / 1000);
  }

  /** Sets (or replaces) the override of a target; resolves to what is stored. */
  async set(target: OverrideTarget, input: OverrideInput): Promise<StoredOverride> {
    const t = validateTarget(target);
    const now = this.nowMs();
    const body = validateInput(input, now);
    const id = recordId(t);
    await this.call(() => this.backend.write(id, encodeRecord(t, body), body.expiresAt));
    this.forget(id);
    // Expired records leave the store a few at a time, with each change.
    await this.call(() => this.backend.prune(now, 100));
    return { ...t, ...body, policies: [...body.policies] };
  }

  /** The override of a target, read from the store (not the cache); `undefined` when none, or expired. */
  async get(target: OverrideTarget): Promise<StoredOverride | undefined> {
    const id = recordId(validateTarget(target));
    const [text] = await this.call(() => this.backend.read([id]));
    return text === undefined ? undefined : decodeRecord(text, this.nowMs());
  }

  /** Deletes the override of a target; resolves to true when there was one. */
  async delete(target: OverrideTarget): Promise<boolean> {
    const id = recordId(validateTarget(target));
    const removed = await this.call(() => this.backend.remove(id));
    this.forget(id);
    return removed;
  }

  /** One page of overrides in a stable order (by scope, then by encoded id); expired ones are left out. */
  async list(options: ListOverridesOptions = {}): Promise<OverridesPage> {
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'list(options)', options, 'an options object');
    }
    const limit = whole('limit', options.limit ?? 100, 1, MAX_OVERRIDE_PAGE);
    const cursor = options.cursor ?? '';
    if (typeof cursor !== 'string' || cursor.length > MAX_CURSOR_LENGTH) {
      throw invalid('ERR_INVALID_OPTION', 'cursor', cursor, `a cursor from a previous page`);
    }
    const startsWith = options.scope === undefined ? '' : `${validateTarget({ scope: options.scope, id: '-' }).scope}:`;
    const rows = await this.call(() => this.backend.page(cursor, limit, startsWith));
    const now = this.nowMs();
    const overrides: StoredOverride[] = [];
    for (const row of rows) {
      const o = decodeRecord(row.record, now);
      if (o !== undefined) overrides.push(o);
    }
    const page: OverridesPage = { overrides };
    if (rows.length === limit) page.cursor = (rows[rows.length - 1] as { id: string }).id;
    return page;
  }

  /**
   * The override that applies to a call, through the cache: the key's, else the tenant's, else the
   * plan's; `undefined` when none does. At most one store read per call, for its uncached targets together.
   */
  async lookup(call: OverrideLookup): Promise<StoredOverride | undefined> {
    const targets: OverrideTarget[] = [{ scope: 'key', id: validateOverrideId(call.key, 'key') }];
    if (call.tenant !== undefined) targets.push({ scope: 'tenant', id: validateOverrideId(call.tenant, 'tenant') });
    if (call.plan !== undefined) targets.push({ scope: 'plan', id: validateOverrideId(call.plan, 'plan') });
    const now = this.nowMs();
    if (now - this.polledAtMs >= this.refreshMs) await this.poll(now);
    const values = await this.values(targets.map(recordId), now);
    for (const v of values) {
      if (v !== null && (v.expiresAt === undefined || v.expiresAt > now)) return v;
    }
    return undefined;
  }

  /**
   * The policies a call is decided under: `base` merged with the override that applies to it (see
   * {@link mergePolicies}), or `base` itself when none does. The same arrays while nothing changes.
   */
  async resolve(call: OverrideLookup, base: readonly Policy[]): Promise<readonly Policy[]> {
    const override = await this.lookup(call);
    return override === undefined ? base : this.policiesOf(override, base);
  }

  /** `base` merged with an override's policies, memoized per record and base list. */
  policiesOf(override: StoredOverride, base: readonly Policy[]): readonly Policy[] {
    let byBase = this.merged.get(override);
    if (byBase === undefined) {
      byBase = new WeakMap();
      this.merged.set(override, byBase);
    }
    let merged = byBase.get(base);
    if (merged === undefined) {
      merged = Object.freeze(mergePolicies(base, override.policies));
      byBase.set(base, merged);
    }
    return merged;
  }

  /** Reads the store's change counter now, emptying the cache when it moved. */
  refresh(): Promise<void> {
    return this.poll(this.nowMs());
  }

  /** Empties the cache (for a change notification: Redis pub/sub, PostgreSQL LISTEN). */
  invalidate(): void {
    this.cache.clear();
    this.generation++;
    this.counts.invalidations++;
  }

  /** What the cache holds and did. */
  get stats(): OverridesCacheStats {
    return { entries: this.cache.size, ...this.counts };
  }

  private forget(id: string): void {
    this.cache.delete(id);
    this.generation++;
  }

  private poll(now: number): Promise<void> {
    if (this.polling !== undefined) return this.polling;
    this.polledAtMs = now;
    this.polling = this.call(() => this.backend.version())
      .then((version) => {
        if (this.knownVersion !== undefined && version !== this.knownVersion) this.invalidate();
        this.knownVersion = version;
      })
      .finally(() => {
        this.polling = undefined;
      });
    return this.polling;
  }

  private async values(ids: readonly string[], now: number): Promise<(StoredOverride | null)[]> {
    const out: (StoredOverride | null)[] = [];
    const waits: Promise<void>[] = [];
    const missing: string[] = [];
    for (const [at, id] of ids.entries()) {
      out.push(null);
      const entry = this.cache.get(id);
      if (entry !== undefined && now - entry.readAtMs < this.ttlMs) {
        // Least recently used first: a hit moves to the end of the map's order.
        this.cache.delete(id);
        this.cache.set(id, entry);
        this.counts.hits++;
        out[at] = entry.value;
        continue;
      }
      const inFlight = this.pending.get(id);
      if (inFlight === undefined) missing.push(id);
      else
        waits.push(
          inFlight.then((v) => {
            out[at] = v;
          }),
        );
    }
    if (missing.length > 0) {
      const read = this.read(missing, now);
      for (const [i, id] of missing.entries()) {
        const one = read.then((values) => values[i] as StoredOverride | null);
        this.pending.set(id, one);
        const at = ids.indexOf(id);
        waits.push(
          one.then((v) => {
            out[at] = v;
          }),
        );
      }
      const clear = () => this.clearPending(missing);
      read.then(clear, clear);
    }
    if (waits.length > 0) await Promise.all(waits);
    return out;
  }

  private clearPending(ids: readonly string[]): void {
    for (const id of ids) this.pending.delete(id);
  }

  private async read(ids: readonly string[], now: number): Promise<(StoredOverride | null)[]> {
    const generation = this.generation;
    this.counts.misses += ids.length;
    const texts = await this.call(() => this.backend.read(ids));
    const values = texts.map((text) => (text === undefined ? null : (decodeRecord(text, now) ?? null)));
    if (generation === this.generation) {
      for (const [i, id] of ids.entries()) {
        this.cache.set(id, { value: values[i] as StoredOverride | null, readAtMs: now });
        if (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
      }
    }
    return values;
  }

  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (error instanceof FloodgateError) throw error;
      throw toStoreError(this.backend.name, error);
    }
  }
}

function whole(option: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalid('ERR_INVALID_OPTION', option, value, `an integer from ${min} to ${max}`);
  }
  return value;
}
