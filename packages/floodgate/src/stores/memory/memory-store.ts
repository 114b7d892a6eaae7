import { FloodgateError, invalid } from '../../errors.js';
import { type CompiledPolicy, KIND_SLIDING_LOG } from '../../model/compile.js';
import { decide, evaluatePolicy, inspect, settleDenied } from '../../model/decide.js';
import { refundPolicy } from '../../model/refund.js';
import { cancelReservation } from '../../model/reservation.js';
import { type Evaluation, emptyEvaluation, type State } from '../../model/types.js';
import type { CancelRequest, RefundRequest, StoreRequest, StoreResult, SyncStore } from '../store.js';

/** Options of {@link memoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most keys held at once, over all policies. When full, expired keys are swept out; if that frees too
   * little, the keys closest to expiry are evicted (counted in `forcedEvictions`). @default 1_000_000
   */
  maxKeys?: number;
}

/** The in-process store: a bounded map per policy, decided synchronously. */
export interface MemoryStore extends SyncStore {
  readonly name: 'memory';
  /** Keys held now, expired ones not yet swept included. */
  readonly size: number;
  /** Live keys dropped before their expiry because the store was full. */
  readonly forcedEvictions: number;
  /** Expired keys removed by sweeps. */
  readonly expiredRemoved: number;
  /** Sweeps run so far (one each time the store fills up). */
  readonly sweeps: number;
  /** Forgets every key. */
  clear(): void;
  /** Forgets every key; the store stays usable. */
  close(): Promise<void>;
  /** Gives back a lease's unused units (see the model's `refundPolicy`). */
  refund(request: RefundRequest): Promise<void>;
  /** `refund` without a promise. */
  refundSync(request: RefundRequest): void;
}

/** Length of the fixed-size states, by kind (the sliding log varies and lives in a LogTable). */
const STATE_LENGTH: Record<number, number> = { 1: 2, 2: 3, 3: 3, 4: 4 };

/**
 * Fixed-size states packed in one Float64Array: slot `i` holds `[expiresAt, ...state]`. A key costs a
 * Map entry with a small-integer value plus a few doubles, and no object of its own.
 */
class SlabTable {
  readonly index = new Map<string, number>();
  private slab: Float64Array;
  private readonly free: number[] = [];
  private top = 0;
  readonly stride: number;
  private readonly scratch: number[];

  constructor(readonly stateLength: number) {
    this.stride = stateLength + 1;
    this.slab = new Float64Array(1024 * this.stride);
    this.scratch = new Array<number>(stateLength).fill(0);
  }

  get size(): number {
    return this.index.size;
  }

  /** The slot of the last key read, so the write that usually follows needs no second lookup. */
  private lastKey: string | undefined;
  private lastSlot: number | undefined;

  has(key: string): boolean {
    return this.index.has(key);
  }

  /** The key's state, copied into a reused array (valid until the next read of this table). */
  read(key: string): State | undefined {
    const slot = this.index.get(key);
    this.lastKey = key;
    this.lastSlot = slot;
    if (slot === undefined) return undefined;
    const base = slot * this.stride + 1;
    const scratch = this.scratch;
    for (let i = 0; i < this.stateLength; i++) scratch[i] = this.slab[base + i] as number;
    return scratch;
  }

  /** Stores a state; returns true when the key is new. */
  write(key: string, state: State, expiresAt: number): boolean {
    let slot = key === this.lastKey && this.lastSlot !== undefined ? this.lastSlot : this.index.get(key);
    const isNew = slot === undefined;
    if (slot === undefined) {
      slot = this.free.length > 0 ? (this.free.pop() as number) : this.top++;
      if ((slot + 1) * this.stride > this.slab.length) this.grow();
      this.index.set(key, slot);
    }
    const base = slot * this.stride;
    this.slab[base] = expiresAt;
    for (let i = 0; i < this.stateLength; i++) this.slab[base + 1 + i] = state[i] as number;
    return isNew;
  }

  delete(key: string): boolean {
    const slot = this.index.get(key);
    if (slot === undefined) return false;
    this.index.delete(key);
    this.free.push(slot);
    this.lastKey = undefined;
    return true;
  }

  /** Calls `visit(key, expiresAt)` for every key; deletes the key when it returns true. */
  sweep(visit: (expiresAt: number) => boolean): number {
    let removed = 0;
    this.lastKey = undefined;
    for (const [key, slot] of this.index) {
      if (visit(this.slab[slot * this.stride] as number)) {
        this.index.delete(key);
        this.free.push(slot);
        removed++;
      }
    }
    return removed;
  }

  clear(): void {
    this.index.clear();
    this.lastKey = undefined;
    this.free.length = 0;
    this.top = 0;
    this.slab = new Float64Array(1024 * this.stride);
  }

  private grow(): void {
    const next = new Float64Array(this.slab.length * 2);
    next.set(this.slab);
    this.slab = next;
  }
}

interface LogEntry {
  expiresAt: number;
  state: State;
}

/** Variable-size states (the sliding log): one small object per key. */
class LogTable {
  readonly index = new Map<string, LogEntry>();

  get size(): number {
    return this.index.size;
  }

  has(key: string): boolean {
    return this.index.has(key);
  }

  read(key: string): State | undefined {
    return this.index.get(key)?.state;
  }

  write(key: string, state: State, expiresAt: number): boolean {
    const entry = this.index.get(key);
    if (entry === undefined) {
      this.index.set(key, { expiresAt, state });
      return true;
    }
    entry.expiresAt = expiresAt;
    entry.state = state;
    return false;
  }

  delete(key: string): boolean {
    return this.index.delete(key);
  }

  sweep(visit: (expiresAt: number) => boolean): number {
    let removed = 0;
    for (const [key, entry] of this.index) {
      if (visit(entry.expiresAt)) {
        this.index.delete(key);
        removed++;
      }
    }
    return removed;
  }

  clear(): void {
    this.index.clear();
  }
}

type Table = SlabTable | LogTable;

/**
 * The default store: state in this process, decided synchronously and exactly like every other store.
 * Bounded by `maxKeys`; no timer per key: expired keys are swept out in one pass when the store fills up
 * (amortized O(1) per new key, since a pass always leaves a tenth of the room free).
 *
 * @example
 * ```ts
 * const limiter = createLimiter({ store: memoryStore({ maxKeys: 100_000 }), policies: [gcra({ limit: 10, periodMs: 1000 })] });
 * const decision = limiter.limitSync('client-1');
 * ```
 */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'memoryStore options', options, 'an object');
  }
  const maxKeys = options.maxKeys ?? 1_000_000;
  if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) {
    throw invalid('ERR_INVALID_OPTION', 'maxKeys', options.maxKeys, 'a positive integer');
  }
  return new MemoryStoreImpl(maxKeys);
}

class MemoryStoreImpl implements MemoryStore {
  readonly name = 'memory' as const;
  readonly hasOwnClock = false;
  forcedEvictions = 0;
  expiredRemoved = 0;
  sweeps = 0;
  private count = 0;
  private readonly tables = new Map<string, Table>();
  private readonly byPolicy = new Map<CompiledPolicy, { prefix: string; table: Table }>();
  private readonly states: (State | undefined)[] = [];
  private readonly scratch: Evaluation[] = [];
  private readonly result: { allowed: boolean; evaluations: Evaluation[] } = { allowed: true, evaluations: [] };

  constructor(private readonly maxKeys: number) {}

  get size(): number {
    return this.count;
  }

  decide(request: StoreRequest): Promise<StoreResult> {
    try {
      // decideSync reuses its result and evaluations; the promise form hands out copies.
      const result = this.decideSync(request);
      return Promise.resolve({
        allowed: result.allowed,
        evaluations: result.evaluations.map((e) => ({ ...e, next: e.next && [...e.next] })),
      });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The evaluations returned are reused by the next call: read them before deciding again. */
  decideSync(request: StoreRequest): StoreResult {
    const { policies, nowUs, key, prefix } = request;
    if (nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the memory store needs the caller’s clock (nowUs)');
    }
    const n = policies.length;
    const evaluations = this.scratch;
    while (evaluations.length < n) evaluations.push(emptyEvaluation());
    if (n === 1) {
      // One policy, the common case: no arrays to fill, one table.
      const c = policies[0] as CompiledPolicy;
      const table = this.table(prefix, c);
      const out = evaluations[0] as Evaluation;
      const state = table.read(key);
      evaluatePolicy(c, state, nowUs, request.cost, request.maxDelayUs, out);
      const allowed = out.allowed;
      if (!allowed) settleDenied(c, state, nowUs, request.cost, request.commit, out);
      if (request.commit && out.next !== undefined) this.store(table, key, out.next, nowUs + out.resetAfterUs, nowUs);
      else if (!request.commit) out.next = undefined;
      const result = this.result;
      result.allowed = allowed;
      result.evaluations = n === evaluations.length ? evaluations : evaluations.slice(0, n);
      return result;
    }
    const states = this.states;
    for (let i = 0; i < n; i++) states[i] = this.table(prefix, policies[i] as CompiledPolicy).read(key);
    // A table's read() reuses one array per table; the policies of one call have distinct names, and
    // tables are per name, so no two states of one call share an array.
    const used = n === evaluations.length ? evaluations : evaluations.slice(0, n);
    const allowed = decide(policies, states, nowUs, request.cost, request, used);
    if (request.commit) {
      for (let i = 0; i < n; i++) {
        const out = used[i] as Evaluation;
        if (out.next !== undefined) {
          this.store(this.table(prefix, policies[i] as CompiledPolicy), key, out.next, nowUs + out.resetAfterUs, nowUs);
        }
      }
    }
    return { allowed, evaluations: used };
  }

  reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
    this.resetSync(prefix, key, policies);
    return Promise.resolve();
  }

  resetSync(prefix: string, key: string, policies: readonly CompiledPolicy[]): void {
    for (const c of policies) {
      if (this.table(prefix, c).delete(key)) this.count--;
    }
  }

  clear(): void {
    for (const table of this.tables.values()) table.clear();
    this.count = 0;
  }

  close(): Promise<void> {
    this.clear();
    return Promise.resolve();
  }

  cancel(request: CancelRequest): Promise<boolean> {
    try {
      return Promise.resolve(this.cancelSync(request));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  cancelSync(request: CancelRequest): boolean {
    const { policies, nowUs, key, prefix } = request;
    if (nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the memory store needs the caller’s clock (nowUs)');
    }
    // read() reuses one array per table: copy each state before reading the next.
    const states = policies.map((c) => {
      const state = this.table(prefix, c).read(key);
      return state === undefined ? undefined : [...state];
    });
    const outs = policies.map(() => emptyEvaluation());
    const all = cancelReservation(policies, states, nowUs, request.reservation, outs);
    outs.forEach((out, i) => {
      if (out.next !== undefined) {
        this.store(this.table(prefix, policies[i] as CompiledPolicy), key, out.next, nowUs + out.resetAfterUs, nowUs);
      }
    });
    return all;
  }

  refund(request: RefundRequest): Promise<void> {
    try {
      this.refundSync(request);
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  refundSync(request: RefundRequest): void {
    const { policies, nowUs, key, prefix } = request;
    if (nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the memory store needs the caller’s clock (nowUs)');
    }
    for (const c of policies) {
      const table = this.table(prefix, c);
      const next = refundPolicy(c, table.read(key), nowUs, request.leasedAtUs, request.leased, request.unused);
      // Only a key the store holds changes: a refund never needs room.
      if (next !== undefined) table.write(key, next, nowUs + inspect(c, next, nowUs).resetAfterUs);
    }
  }

  private lastPolicy: CompiledPolicy | undefined;
  private lastPrefix = '';
  private lastTable: Table | undefined;

  private table(prefix: string, c: CompiledPolicy): Table {
    if (c === this.lastPolicy && prefix === this.lastPrefix) return this.lastTable as Table;
    const table = this.findTable(prefix, c);
    this.lastPolicy = c;
    this.lastPrefix = prefix;
    this.lastTable = table;
    return table;
  }

  private findTable(prefix: string, c: CompiledPolicy): Table {
    const hit = this.byPolicy.get(c);
    if (hit !== undefined && hit.prefix === prefix) return hit.table;
    const id = `${prefix}\0${c.name}\0${c.kind}`;
    let table = this.tables.get(id);
    if (table === undefined) {
      table = c.kind === KIND_SLIDING_LOG ? new LogTable() : new SlabTable(STATE_LENGTH[c.kind] as number);
      this.tables.set(id, table);
    }
    this.byPolicy.set(c, { prefix, table });
    return table;
  }

  private store(table: Table, key: string, state: State, expiresAt: number, nowUs: number): void {
    if (this.count >= this.maxKeys && !table.has(key)) this.makeRoom(nowUs);
    if (table.write(key, state, expiresAt)) this.count++;
  }

  /**
   * Runs when the store is full and a new key arrives: drops every expired key; if fewer than a tenth of
   * `maxKeys` became free, evicts the live keys closest to their expiry (they lose the least).
   */
  private makeRoom(nowUs: number): void {
    this.sweeps++;
    let removed = 0;
    for (const table of this.tables.values()) removed += table.sweep((expiresAt) => expiresAt <= nowUs);
    this.count -= removed;
    this.expiredRemoved += removed;
    const target = this.maxKeys - Math.max(1, Math.floor(this.maxKeys / 10));
    if (this.count <= target) return;
    const excess = this.count - target;
    const expiries = new Float64Array(this.count);
    let i = 0;
    for (const table of this.tables.values()) {
      table.sweep((expiresAt) => {
        expiries[i++] = expiresAt;
        return false;
      });
    }
    const threshold = kthSmallest(expiries, excess - 1);
    let evicted = 0;
    // Strictly earlier first, then ties, so exactly `excess` keys go.
    for (const ties of [false, true]) {
      for (const table of this.tables.values()) {
        table.sweep((expiresAt) => {
          if (evicted >= excess || (ties ? expiresAt !== threshold : expiresAt >= threshold)) return false;
          evicted++;
          return true;
        });
      }
    }
    this.count -= evicted;
    this.forcedEvictions += evicted;
  }
}

/** Quickselect: the k-th smallest value (0-based), reordering `values` in place. */
function kthSmallest(values: Float64Array, k: number): number {
  let lo = 0;
  let hi = values.length - 1;
  while (lo < hi) {
    const pivot = values[(lo + hi) >>> 1] as number;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while ((values[i] as number) < pivot) i++;
      while ((values[j] as number) > pivot) j--;
      if (i <= j) {
        const t = values[i] as number;
        values[i] = values[j] as number;
        values[j] = t;
        i++;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return values[k] as number;
  }
  return values[k] as number;
}
