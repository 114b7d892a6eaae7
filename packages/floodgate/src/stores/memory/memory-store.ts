import { type Clock, systemClock, wholeClockUs } from '../../clock.js';
import { FloodgateError, invalid } from '../../errors.js';
import { isPlainKey, LONG_KEY_MARK, localKey } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { decide, evaluatePolicy, inspect, settleDenied } from '../../model/decide.js';
import { admittedDecision, type Decision, deniedDecision, wholeUsToMs } from '../../model/decision.js';
import { emptyStateLength, kindOf } from '../../model/kinds.js';
import { refundPolicy } from '../../model/refund.js';
import { cancelReservation } from '../../model/reservation.js';
import { clampRemaining, type Evaluation, emptyEvaluation, type State } from '../../model/types.js';
import type { CancelRequest, RefundRequest, Store, StoreRequest, StoreResult, SyncStore } from '../store.js';

/** Options of {@link memoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most keys held at once, over all policies (one key under two policies is two). When full, expired
   * keys are dropped first; then `whenFull` decides. @default 1_000_000
   */
  maxKeys?: number;
  /**
   * What a call that needs a new key does when the store is full of live keys. `'evict'` forgets the
   * least consumed quota among a random sample (counted in `forcedEvictions`); `'refuse'` keeps every
   * key and throws `ERR_STORE_FULL` (counted in `refusedKeys`), which the limiter answers per its
   * `failure` policy. A call that stores nothing (a check) never needs room. @default 'evict'
   */
  whenFull?: 'evict' | 'refuse';
}

/** The in-process store: a bounded map per policy, decided synchronously. */
export interface MemoryStore extends SyncStore {
  readonly name: 'memory';
  /** The cap on keys held. */
  readonly maxKeys: number;
  /** What a new key does when the store is full. */
  readonly whenFull: 'evict' | 'refuse';
  /** Keys held now, expired ones not yet dropped included. */
  readonly size: number;
  /** Live keys that still held state, dropped before their expiry to make room (`whenFull: 'evict'`). */
  readonly forcedEvictions: number;
  /** New keys refused because the store was full of live keys (`whenFull: 'refuse'`). */
  readonly refusedKeys: number;
  /** Expired keys (and keys back to their untouched state) dropped to make room. */
  readonly expiredRemoved: number;
  /** Full passes over the store that dropped expired keys. */
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

/**
 * Entries looked at per eviction. Each one costs a cost-0 evaluation. The chance that an eviction picks a
 * key at its limit while a fraction f of the held keys are less consumed is at most (1 − f)^5: 1e-10 when
 * f = 0.99 (a flood against a hundred keys in ten thousand), 3% when f = 0.5, where the pool below does
 * better. Redis samples 5 for its approximate LRU, for the same trade.
 */
const SAMPLES = 5;

/**
 * Candidates remembered between evictions (Redis keeps 16 too): each eviction takes the least consumed of
 * the pool and the new sample, so the good candidates that earlier samples found are not lost.
 */
const POOL_SIZE = 16;

/** A remembered eviction candidate: slot `slot` of table `table`, while it still holds `key`. */
interface Candidate {
  table: number;
  slot: number;
  key: string;
  consumed: number;
  expiresAt: number;
}

/**
 * Fixed-size states packed in one Float64Array: slot `i` holds `[expiresAt, ...state]`. A key costs a
 * Map entry with a small-integer value plus a few doubles, and no object of its own. `keys` and `pos`
 * (the slot's place in the store's list of entries) let the store sample slots and drop them.
 */
class SlabTable {
  readonly index = new Map<string, number>();
  readonly keys: (string | undefined)[] = [];
  pos = new Int32Array(1024);
  private slab: Float64Array;
  private readonly free: number[] = [];
  private top = 0;
  readonly stride: number;
  private readonly scratch: number[];
  private readonly sampled: number[];

  constructor(
    readonly id: number,
    public policy: CompiledPolicy,
    readonly stateLength: number,
  ) {
    this.stride = stateLength + 1;
    this.slab = new Float64Array(1024 * this.stride);
    this.scratch = new Array<number>(stateLength).fill(0);
    this.sampled = new Array<number>(stateLength).fill(0);
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

  slotOf(key: string): number | undefined {
    return this.index.get(key);
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

  /** Field `i` of the state in a held slot. */
  field(slot: number, i: number): number {
    return this.slab[slot * this.stride + 1 + i] as number;
  }

  /** Stores a state of two numbers in a held slot. */
  rewrite2(slot: number, a: number, b: number, expiresAt: number): void {
    const base = slot * this.stride;
    this.slab[base] = expiresAt;
    this.slab[base + 1] = a;
    this.slab[base + 2] = b;
  }

  /** Stores a state; returns the new slot when the key is new, else -1. */
  write(key: string, state: State, expiresAt: number): number {
    let slot = key === this.lastKey && this.lastSlot !== undefined ? this.lastSlot : this.index.get(key);
    let added = -1;
    if (slot === undefined) {
      slot = this.insert(key);
      added = slot;
    }
    const base = slot * this.stride;
    this.slab[base] = expiresAt;
    for (let i = 0; i < this.stateLength; i++) this.slab[base + 1 + i] = state[i] as number;
    return added;
  }

  /** A slot for a new key (out of `write`, which mostly rewrites a held key: small code compiles better). */
  private insert(key: string): number {
    const slot = this.free.length > 0 ? (this.free.pop() as number) : this.top++;
    if ((slot + 1) * this.stride > this.slab.length) this.grow();
    this.index.set(key, slot);
    this.keys[slot] = key;
    return slot;
  }

  expiresAt(slot: number): number {
    return this.slab[slot * this.stride] as number;
  }

  /** A slot's state, copied into an array of its own (a sample must not clobber what `read` returned). */
  stateAt(slot: number): State {
    const base = slot * this.stride + 1;
    const sampled = this.sampled;
    for (let i = 0; i < this.stateLength; i++) sampled[i] = this.slab[base + i] as number;
    return sampled;
  }

  removeSlot(slot: number): void {
    this.index.delete(this.keys[slot] as string);
    this.keys[slot] = undefined;
    this.free.push(slot);
    this.lastKey = undefined;
  }

  clear(): void {
    this.index.clear();
    this.keys.length = 0;
    this.lastKey = undefined;
    this.free.length = 0;
    this.top = 0;
    this.slab = new Float64Array(1024 * this.stride);
    this.pos = new Int32Array(1024);
  }

  private grow(): void {
    const next = new Float64Array(this.slab.length * 2);
    next.set(this.slab);
    this.slab = next;
    const pos = new Int32Array(this.pos.length * 2);
    pos.set(this.pos);
    this.pos = pos;
  }
}

/** Variable-size states (lists of pairs, such as the sliding log): one array per key, by slot. */
class LogTable {
  readonly index = new Map<string, number>();
  readonly keys: (string | undefined)[] = [];
  pos = new Int32Array(1024);
  private readonly states: (State | undefined)[] = [];
  private readonly expiries: number[] = [];
  private readonly free: number[] = [];
  private top = 0;

  constructor(
    readonly id: number,
    public policy: CompiledPolicy,
  ) {}

  get size(): number {
    return this.index.size;
  }

  has(key: string): boolean {
    return this.index.has(key);
  }

  slotOf(key: string): number | undefined {
    return this.index.get(key);
  }

  read(key: string): State | undefined {
    const slot = this.index.get(key);
    return slot === undefined ? undefined : this.states[slot];
  }

  write(key: string, state: State, expiresAt: number): number {
    const slot = this.index.get(key);
    if (slot !== undefined) {
      this.states[slot] = state;
      this.expiries[slot] = expiresAt;
      return -1;
    }
    const added = this.free.length > 0 ? (this.free.pop() as number) : this.top++;
    if (added >= this.pos.length) {
      const pos = new Int32Array(this.pos.length * 2);
      pos.set(this.pos);
      this.pos = pos;
    }
    this.index.set(key, added);
    this.keys[added] = key;
    this.states[added] = state;
    this.expiries[added] = expiresAt;
    return added;
  }

  expiresAt(slot: number): number {
    return this.expiries[slot] as number;
  }

  stateAt(slot: number): State {
    return this.states[slot] as State;
  }

  removeSlot(slot: number): void {
    this.index.delete(this.keys[slot] as string);
    this.keys[slot] = undefined;
    this.states[slot] = undefined;
    this.free.push(slot);
  }

  clear(): void {
    this.index.clear();
    this.keys.length = 0;
    this.states.length = 0;
    this.expiries.length = 0;
    this.free.length = 0;
    this.top = 0;
    this.pos = new Int32Array(1024);
  }
}

type Table = SlabTable | LogTable;

/**
 * The default store: state in this process, decided synchronously and exactly like every other store.
 * Bounded by `maxKeys`, with no timer per key. When a new key finds the store full, expired keys go
 * first: a pass over the store drops them all, at most once per tenth of `maxKeys` new keys (amortized
 * O(1) per new key) and only when some key may have expired. If the store is still full, `whenFull`
 * decides: `'evict'` forgets the least consumed of a few keys sampled at random (O(1) per new key, like
 * Redis's approximate LRU), so a flood of fresh keys pushes out other fresh keys rather than the keys at
 * their limit; `'refuse'` throws `ERR_STORE_FULL` instead.
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
  const whenFull = options.whenFull ?? 'evict';
  if (whenFull !== 'evict' && whenFull !== 'refuse') {
    throw invalid('ERR_INVALID_OPTION', 'whenFull', options.whenFull, "'evict' or 'refuse'");
  }
  return new MemoryStoreImpl(maxKeys, whenFull);
}

/**
 * The in-process hot path of one limiter: a cost-1 call with no reservation (`limitSync(key)`,
 * `checkSync(key)`) under its one policy, a meter that `isPlainMeter`.
 *
 * One compiled function: a clock read, one map lookup with the key as given, the meter's evaluation, the
 * key's new state and the decision, with no `Evaluation` or request in between. It is a port of
 * `evaluatePolicy`, `settleDenied` and `toDecision` for that one call, as the Lua and SQL are ports of the
 * model, and a randomized test holds it to them (test/stores/memory-lane.test.ts). The calls it does not
 * cover it leaves to them, having changed nothing: a key that is not held as given (a long one, one that
 * starts with the mark, an invalid value), a new key when the store is full, a key in a penalty box, and a
 * committed denial that starts one. New keys take this path too, so that the code compiled for it is the
 * code of held keys, whichever comes first.
 */
export class MeterLane {
  /** When `decide` leaves a call to the general evaluation: the time it read, µs, if it read the clock. */
  nowUs: number | undefined;
  /** The clock reads whole µs (the system clock does): no need to check each reading. */
  private readonly wholeUs: boolean;

  constructor(
    private readonly store: MemoryStoreImpl,
    private readonly table: SlabTable,
    private readonly c: CompiledPolicy,
    private readonly clock: Clock,
  ) {
    this.wholeUs = clock === systemClock;
  }

  /**
   * Decides a call on `key` now; undefined when the general evaluation must decide it, at `nowUs` when
   * the lane read the clock for the call (`key` is then a valid key), else `nowUs` is undefined.
   */
  decide(key: string, commit: boolean): Decision | undefined {
    const table = this.table;
    const slot = table.slotOf(key);
    // The map holds every key as `localKey` makes it: a held key that does not start with its mark is a
    // valid key held as it is, and so is a new key that `isPlainKey`. Any other value, the general way.
    if (slot === undefined ? !isPlainKey(key) : key.charCodeAt(0) === LONG_KEY_MARK) return this.leave(undefined);
    let nowUs = this.clock.nowUs();
    if (!this.wholeUs && !Number.isInteger(nowUs)) nowUs = wholeClockUs(nowUs);
    const store = this.store;
    let tat = nowUs;
    if (slot !== undefined) {
      // A key in a penalty box is judged as it stands, the general way.
      if (table.field(slot, 0) > nowUs) return this.leave(nowUs);
      tat = table.field(slot, 1);
    } else if (commit && store.size >= store.maxKeys) {
      // A new key, and the store may have to make room for it: the general way.
      return this.leave(nowUs);
    }
    const c = this.c;
    const t = c.a;
    const tau = c.b;
    const limit = c.limit;
    const policy = c.name;
    // `evaluateMeter`, cost 1 (charged T), no slack, in times relative to now: what the key owes before
    // and after the call.
    const owedBefore = Math.max(tat, nowUs) - nowUs;
    const owed = owedBefore + t;
    // As `decideSync` finds the table, it marks the table as used by this policy (eviction reads it).
    if (table.policy !== c) table.policy = c;
    if (owed - tau <= 0) {
      if (commit) {
        // The state `[0, TAT]`, which expires at its TAT.
        if (slot === undefined) store.addMeter(table, key, nowUs + owed);
        else store.rewriteMeter(table, slot, nowUs + owed);
      }
      const remaining = clampRemaining((tau - owed) / t, limit);
      const resetAfterMs = wholeUsToMs(owed);
      return admittedDecision(policy, limit, remaining, resetAfterMs);
    }
    // Denied: `settleDenied` changes nothing for a meter, but for the penalty box it starts.
    if (commit && c.blockUs > 0) return this.leave(nowUs);
    // Since τ − owedBefore < T, not one whole unit is left (below none when calls were booked ahead).
    const remaining = 0;
    const retryAfterMs = wholeUsToMs(owed - tau);
    const resetAfterMs = wholeUsToMs(owedBefore);
    return deniedDecision(policy, limit, remaining, retryAfterMs, resetAfterMs);
  }

  private leave(nowUs: number | undefined): undefined {
    this.nowUs = nowUs;
    return undefined;
  }
}

/**
 * The lane of a limiter's one policy (a meter that `isPlainMeter`) on its store, when the store is this
 * module's memory store; undefined for any other store.
 */
export function meterLane(store: Store, prefix: string, c: CompiledPolicy, clock: Clock): MeterLane | undefined {
  return store instanceof MemoryStoreImpl
    ? new MeterLane(store, store.table(prefix, c) as SlabTable, c, clock)
    : undefined;
}

class MemoryStoreImpl implements MemoryStore {
  readonly name = 'memory' as const;
  readonly hasOwnClock = false;
  forcedEvictions = 0;
  refusedKeys = 0;
  expiredRemoved = 0;
  sweeps = 0;
  private readonly tables = new Map<string, Table>();
  private readonly tableList: Table[] = [];
  private readonly byPolicy = new Map<CompiledPolicy, { prefix: string; table: Table }>();
  private readonly states: (State | undefined)[] = [];
  private readonly scratch: Evaluation[] = [];
  /** The state `addMeter` stores: `[0, tat]`. */
  private readonly meterState = [0, 0];
  private readonly result: { allowed: boolean; evaluations: Evaluation[] } = { allowed: true, evaluations: [] };
  /**
   * Every held key in one list, so that a uniform sample over all tables is one random index: entry `i`
   * is slot `entries[2i + 1]` of table `entries[2i]` (side by side: one cache line per sample), and the
   * table's `pos[slot]` is `i`. A key leaves by swapping the last entry into its place.
   */
  private entries = new Int32Array(2048);
  private count = 0;
  /** No held key expires before this (a lower bound: the least expiry at the last sweep and since). */
  private earliestExpiry = Number.POSITIVE_INFINITY;
  /** New keys (stored or refused) since the last sweep; the first time the store fills, a sweep is due. */
  private newSinceSweep: number;
  private readonly sweepEvery: number;
  private readonly pool: Candidate[] = Array.from({ length: POOL_SIZE }, () => ({
    table: 0,
    slot: 0,
    key: '',
    consumed: 0,
    expiresAt: 0,
  }));
  private poolSize = 0;
  private readonly probe = emptyEvaluation();

  constructor(
    readonly maxKeys: number,
    readonly whenFull: 'evict' | 'refuse',
  ) {
    this.sweepEvery = Math.max(1, Math.floor(maxKeys / 10));
    this.newSinceSweep = this.sweepEvery;
  }

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
    const { policies, nowUs, prefix } = request;
    const key = localKey(request.key);
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
      if (request.commit && out.next !== undefined) {
        const expiresAt = nowUs + out.resetAfterUs;
        // The key is in no other table of this call, so nothing needs protecting from eviction.
        if (this.count >= this.maxKeys && state === undefined) this.makeRoom(1, nowUs, undefined);
        this.write(table, key, out.next, expiresAt);
      } else if (!request.commit) out.next = undefined;
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
    if (request.commit) this.commit(prefix, policies, key, used, nowUs);
    return { allowed, evaluations: used };
  }

  reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
    this.resetSync(prefix, key, policies);
    return Promise.resolve();
  }

  resetSync(prefix: string, userKey: string, policies: readonly CompiledPolicy[]): void {
    const key = localKey(userKey);
    for (const c of policies) {
      const table = this.table(prefix, c);
      const slot = table.slotOf(key);
      if (slot !== undefined) this.removeEntry(table.pos[slot] as number);
    }
  }

  clear(): void {
    for (const table of this.tables.values()) table.clear();
    this.count = 0;
    this.poolSize = 0;
    this.earliestExpiry = Number.POSITIVE_INFINITY;
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
    const { policies, nowUs, prefix } = request;
    const key = localKey(request.key);
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
    this.commit(prefix, policies, key, outs, nowUs);
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
    const { policies, nowUs, prefix } = request;
    const key = localKey(request.key);
    if (nowUs === undefined) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'the memory store needs the caller’s clock (nowUs)');
    }
    for (const c of policies) {
      const table = this.table(prefix, c);
      const next = refundPolicy(c, table.read(key), nowUs, request.leasedAtUs, request.leased, request.unused);
      // Only a key the store holds changes: a refund never needs room.
      if (next !== undefined) this.write(table, key, next, nowUs + inspect(c, next, nowUs).resetAfterUs);
    }
  }

  private lastPolicy: CompiledPolicy | undefined;
  private lastPrefix = '';
  private lastTable: Table | undefined;

  table(prefix: string, c: CompiledPolicy): Table {
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
      const n = this.tableList.length;
      // Fixed-size states go in a slab; lists of pairs (the sliding log) get an array per key.
      const kind = kindOf(c);
      table = 'fields' in kind.layout ? new SlabTable(n, c, emptyStateLength(kind)) : new LogTable(n, c);
      this.tables.set(id, table);
      this.tableList.push(table);
    }
    // Eviction judges a table's keys by the policy that used it last (a name keeps its algorithm).
    table.policy = c;
    this.byPolicy.set(c, { prefix, table });
    return table;
  }

  /**
   * Writes the next states of one call. Room for all of its new keys is made first, so that a refusal
   * leaves every policy as it was: a call is stored whole or not at all.
   */
  private commit(
    prefix: string,
    policies: readonly CompiledPolicy[],
    key: string,
    outs: readonly Evaluation[],
    nowUs: number,
  ): void {
    const n = policies.length;
    if (this.count + n > this.maxKeys) {
      let needed = 0;
      for (let i = 0; i < n; i++) {
        if ((outs[i] as Evaluation).next !== undefined && !this.table(prefix, policies[i] as CompiledPolicy).has(key)) {
          needed++;
        }
      }
      if (needed > 0 && this.count + needed > this.maxKeys) this.makeRoom(needed, nowUs, key);
    }
    for (let i = 0; i < n; i++) {
      const out = outs[i] as Evaluation;
      if (out.next !== undefined) {
        this.write(this.table(prefix, policies[i] as CompiledPolicy), key, out.next, nowUs + out.resetAfterUs);
      }
    }
  }

  /**
   * Stores a meter's state `[0, tat]` in a held slot, expiring at `tat` (an admitted meter call's expiry):
   * the lane's way in, not part of the store's interface.
   */
  rewriteMeter(table: SlabTable, slot: number, tat: number): void {
    if (tat < this.earliestExpiry) this.earliestExpiry = tat;
    table.rewrite2(slot, 0, tat, tat);
  }

  /** `rewriteMeter` for a new key, when the store has room for it. */
  addMeter(table: SlabTable, key: string, tat: number): void {
    const state = this.meterState;
    state[1] = tat;
    this.write(table, key, state, tat);
  }

  private write(table: Table, key: string, state: State, expiresAt: number): void {
    if (expiresAt < this.earliestExpiry) this.earliestExpiry = expiresAt;
    const slot = table.write(key, state, expiresAt);
    if (slot >= 0) this.added(table, slot);
  }

  /** Lists a new entry (see `entries`; out of `write`, as `insert` is). */
  private added(table: Table, slot: number): void {
    if (this.count * 2 === this.entries.length) this.growEntries();
    this.entries[this.count * 2] = table.id;
    this.entries[this.count * 2 + 1] = slot;
    table.pos[slot] = this.count;
    this.count++;
    this.newSinceSweep++;
  }

  private growEntries(): void {
    const entries = new Int32Array(this.entries.length * 2);
    entries.set(this.entries);
    this.entries = entries;
  }

  /** Drops entry `i`: its table forgets the key, and the last entry takes its place in the list. */
  private removeEntry(i: number): void {
    const entries = this.entries;
    (this.tableList[entries[i * 2] as number] as Table).removeSlot(entries[i * 2 + 1] as number);
    const last = --this.count;
    if (i !== last) {
      const table = entries[last * 2] as number;
      const slot = entries[last * 2 + 1] as number;
      entries[i * 2] = table;
      entries[i * 2 + 1] = slot;
      (this.tableList[table] as Table).pos[slot] = i;
    }
  }

  /**
   * Makes room for `needed` new entries of `key` (whose own entries are never dropped for it). Expired
   * keys go first; then, when the store is full of live keys, `'evict'` forgets the least consumed of a
   * sample and `'refuse'` throws `ERR_STORE_FULL`. Should every held entry be this key's own (a cap below
   * the number of policies of one call), the call is stored anyway: the cap is then exceeded by at most
   * that many entries.
   */
  private makeRoom(needed: number, nowUs: number, key: string | undefined): void {
    if (nowUs >= this.earliestExpiry && this.newSinceSweep >= this.sweepEvery) this.sweep(nowUs);
    while (this.count + needed > this.maxKeys) {
      if (this.whenFull === 'evict') {
        if (!this.evictOne(nowUs, key)) return;
      } else if (!this.dropExpiredSample(nowUs, key)) {
        this.refusedKeys++;
        this.newSinceSweep++;
        throw this.refusal();
      }
    }
  }

  /**
   * The error of a refused key. A flood makes one per call, so it carries no stack trace: capturing one
   * costs more than the decision, and the place it would show is always this one.
   */
  private refusal(): FloodgateError {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      return new FloodgateError(
        'ERR_STORE_FULL',
        `the memory store is full: maxKeys is ${this.maxKeys} and whenFull is 'refuse', so a new key is refused`,
        { option: 'maxKeys' },
      );
    } finally {
      Error.stackTraceLimit = limit;
    }
  }

  /** Drops every expired key: one pass over the list, from the end, so a swapped-in entry was already seen. */
  private sweep(nowUs: number): void {
    this.sweeps++;
    this.newSinceSweep = 0;
    let removed = 0;
    let earliest = Number.POSITIVE_INFINITY;
    for (let i = this.count - 1; i >= 0; i--) {
      const expiresAt = (this.tableList[this.entries[i * 2] as number] as Table).expiresAt(
        this.entries[i * 2 + 1] as number,
      );
      if (expiresAt <= nowUs) {
        this.removeEntry(i);
        removed++;
      } else if (expiresAt < earliest) earliest = expiresAt;
    }
    this.earliestExpiry = earliest;
    this.expiredRemoved += removed;
  }

  /**
   * How much of its quota a held key has used, from a cost-0 evaluation through the model (so the same
   * notion for every algorithm): 1 − remaining / limit, 1 in a penalty block. -1 when the entry holds
   * nothing worth keeping (expired, or back to the untouched state).
   */
  private consumed(table: Table, slot: number, nowUs: number): number {
    if (table.expiresAt(slot) <= nowUs) return -1;
    const out = inspect(table.policy, table.stateAt(slot), nowUs, this.probe);
    if (out.resetAfterUs <= 0) return -1;
    const whole = Math.floor(table.policy.limit);
    return whole >= 1 ? 1 - out.remaining / whole : 1;
  }

  /**
   * Frees one entry: an expired one met in the sample, or else the least consumed of the sample and the
   * pool (ties: the nearest expiry, which gives the least back). Returns false when nothing but `key`'s
   * own entries is held.
   */
  private evictOne(nowUs: number, key: string | undefined): boolean {
    const entries = this.entries;
    for (let s = 0; s < SAMPLES; s++) {
      const i = Math.floor(Math.random() * this.count);
      const table = this.tableList[entries[i * 2] as number] as Table;
      const slot = entries[i * 2 + 1] as number;
      if (key !== undefined && table.keys[slot] === key) continue;
      const consumed = this.consumed(table, slot, nowUs);
      if (consumed < 0) {
        this.removeEntry(i);
        this.expiredRemoved++;
        return true;
      }
      this.offer(table, slot, consumed);
    }
    const pool = this.pool;
    while (this.poolSize > 0) {
      let best = 0;
      for (let j = 1; j < this.poolSize; j++) if (less(pool[j] as Candidate, pool[best] as Candidate)) best = j;
      const candidate = pool[best] as Candidate;
      const table = this.tableList[candidate.table] as Table;
      if (table.keys[candidate.slot] !== candidate.key || candidate.key === key) {
        this.dropCandidate(best);
        continue;
      }
      // The score may be stale: time only lowers consumption, but calls since may have raised it.
      const consumed = this.consumed(table, candidate.slot, nowUs);
      const expiresAt = table.expiresAt(candidate.slot);
      const i = table.pos[candidate.slot] as number;
      if (
        consumed >= 0 &&
        (consumed > candidate.consumed || (consumed === candidate.consumed && expiresAt > candidate.expiresAt))
      ) {
        candidate.consumed = consumed;
        candidate.expiresAt = expiresAt;
        continue;
      }
      this.dropCandidate(best);
      this.removeEntry(i);
      if (consumed < 0) this.expiredRemoved++;
      else this.forcedEvictions++;
      return true;
    }
    // Every sampled entry was this key's own (a tiny store): look for any other.
    for (let i = 0; i < this.count; i++) {
      const table = this.tableList[entries[i * 2] as number] as Table;
      const slot = entries[i * 2 + 1] as number;
      if (table.keys[slot] === key) continue;
      const consumed = this.consumed(table, slot, nowUs);
      this.removeEntry(i);
      if (consumed < 0) this.expiredRemoved++;
      else this.forcedEvictions++;
      return true;
    }
    return false;
  }

  /** Remembers a sampled entry if the pool has room or it beats the pool's worst. */
  private offer(from: Table, slot: number, consumed: number): void {
    const pool = this.pool;
    const table = from.id;
    const expiresAt = from.expiresAt(slot);
    let worst = 0;
    for (let j = 0; j < this.poolSize; j++) {
      const c = pool[j] as Candidate;
      if (c.table === table && c.slot === slot) {
        c.key = from.keys[slot] as string;
        c.consumed = consumed;
        c.expiresAt = expiresAt;
        return;
      }
      if (less(pool[worst] as Candidate, c)) worst = j;
    }
    let target: Candidate;
    if (this.poolSize < POOL_SIZE) target = pool[this.poolSize++] as Candidate;
    else {
      target = pool[worst] as Candidate;
      if (consumed > target.consumed || (consumed === target.consumed && expiresAt >= target.expiresAt)) return;
    }
    target.table = table;
    target.slot = slot;
    target.key = from.keys[slot] as string;
    target.consumed = consumed;
    target.expiresAt = expiresAt;
  }

  private dropCandidate(j: number): void {
    const pool = this.pool;
    const last = --this.poolSize;
    const gone = pool[j] as Candidate;
    pool[j] = pool[last] as Candidate;
    pool[last] = gone;
    gone.key = '';
  }

  /** Refuse mode: drops the expired (or untouched again) entries of a sample; true if any went. */
  private dropExpiredSample(nowUs: number, key: string | undefined): boolean {
    let dropped = false;
    for (let s = 0; s < SAMPLES && this.count > 0; s++) {
      const i = Math.floor(Math.random() * this.count);
      const table = this.tableList[this.entries[i * 2] as number] as Table;
      const slot = this.entries[i * 2 + 1] as number;
      if ((key === undefined || table.keys[slot] !== key) && this.consumed(table, slot, nowUs) < 0) {
        this.removeEntry(i);
        this.expiredRemoved++;
        dropped = true;
      }
    }
    return dropped;
  }
}

/** Whether candidate `a` should be evicted before `b`: less consumed, then nearer expiry. */
function less(a: Candidate, b: Candidate): boolean {
  return a.consumed < b.consumed || (a.consumed === b.consumed && a.expiresAt < b.expiresAt);
}
