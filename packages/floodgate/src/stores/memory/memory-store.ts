import type { Clock } from '../../clock.js';
import { FloodgateError, invalid } from '../../errors.js';
import { localKey } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { decide, evaluatePolicy, inspect, settleDenied } from '../../model/decide.js';
import { emptyStateLength, kindOf } from '../../model/kinds.js';
import { isPlainMeter } from '../../model/meter.js';
import { refundPolicy } from '../../model/refund.js';
import { cancelReservation } from '../../model/reservation.js';
import { settlePolicy } from '../../model/settle.js';
import { type Evaluation, emptyEvaluation, type State } from '../../model/types.js';
import { type MemoryPermitStore, memoryPermitStore } from '../../permits/memory-permit-store.js';
import { decideWithPermitSync, detachedResult } from '../kit/holding.js';
import { checkOptionsObject, wholeOption } from '../kit/options.js';
import { promised } from '../kit/promised.js';
import type {
  CancelRequest,
  FastPath,
  HeldResult,
  PermitClaim,
  RefundRequest,
  SettleRequest,
  StoreRequest,
  StoreResult,
  SyncStore,
} from '../store.js';
import { Eviction } from './eviction.js';
import { MeterFastPath, type MeterWriter } from './meter-fast-path.js';
import { DEFAULT_SUMMARY_CELLS, MAX_SUMMARY_CELLS, type Summary } from './summary.js';
import { LogTable, SlabTable, type Table } from './tables.js';

/** Options of {@link memoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most keys held at once, over all policies (one key under two policies is two). When full, expired
   * keys are dropped first; then `whenFull` decides. @default 1_000_000
   */
  maxKeys?: number;
  /**
   * What a call that needs a new key does when the store is full of live keys. `'evict'` lets a held key
   * go (counted in `forcedEvictions`), its state folded into its policy's summary, so it never comes back
   * with more than it had; `'refuse'` keeps every key and throws `ERR_STORE_FULL` (counted in
   * `refusedKeys`), which the limiter answers per its `failure` policy. A call that stores nothing (a
   * check) never needs room. @default 'evict'
   */
  whenFull?: 'evict' | 'refuse';
  /**
   * Cells of the summary each policy keeps of the keys it let go (`whenFull: 'evict'`): a key the store
   * does not hold starts from its cell, the most restrictive state of the keys that left through it. More
   * cells, fewer keys denied for sharing one; each costs 24 to 40 bytes (3 to 5 doubles, by algorithm),
   * allocated when the policy first lets a key go: 1.5 to 2.5 MiB per policy at the default. An integer
   * from 1 to 2^24. @default 65_536
   */
  summaryCells?: number;
}

/** The in-process store: a bounded map per policy, decided synchronously. */
export interface MemoryStore extends SyncStore {
  readonly name: 'memory';
  /** The cap on keys held. */
  readonly maxKeys: number;
  /** What a new key does when the store is full. */
  readonly whenFull: 'evict' | 'refuse';
  /** Cells per policy summary. */
  readonly summaryCells: number;
  /** Bytes held by the summaries of keys let go (none until a key is). */
  readonly summaryBytes: number;
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
  /** Settles a call admitted with an estimated cost (see the model's `settlePolicy`). */
  settle(request: SettleRequest): Promise<void>;
  /** `settle` without a promise. */
  settleSync(request: SettleRequest): void;
  /**
   * The store's own permit store (`memoryPermitStore()`, made at first use): a limiter with a concurrency
   * policy and no `permits` keeps its permits here, and decides each call in one synchronous step.
   */
  readonly permits: MemoryPermitStore;
  /** A `limit` and a permit of `permits`, all or nothing in one synchronous step (see `Store.decideWithPermit`). */
  decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult>;
}

/**
 * The default store: state in this process, decided synchronously and exactly like every other store.
 * Bounded by `maxKeys`, with no timer per key. When a new key finds the store full, expired keys go
 * first: a pass over the store drops them all, at most once per tenth of `maxKeys` new keys (amortized
 * O(1) per new key) and only when some key may have expired. If the store is still full, `whenFull`
 * decides: `'evict'` lets go the cheapest of a few keys sampled at random (O(1) per new key, like Redis's
 * approximate LRU), its state folded into its policy's fixed-size summary (summary.ts), which a key the
 * store does not hold starts from: no key is ever admitted more than its policies allow, whatever the
 * flood; `'refuse'` throws `ERR_STORE_FULL` instead.
 *
 * @example
 * ```ts
 * const limiter = createLimiter({ store: memoryStore({ maxKeys: 100_000 }), policies: [gcra({ limit: 10, periodMs: 1000 })] });
 * const decision = limiter.limitSync('client-1');
 * ```
 */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  checkOptionsObject(options, 'memoryStore options');
  const maxKeys = wholeOption('maxKeys', options.maxKeys ?? 1_000_000, 1, undefined, 'a positive integer');
  const whenFull = options.whenFull ?? 'evict';
  if (whenFull !== 'evict' && whenFull !== 'refuse') {
    throw invalid('ERR_INVALID_OPTION', 'whenFull', options.whenFull, "'evict' or 'refuse'");
  }
  const summaryCells = wholeOption('summaryCells', options.summaryCells ?? DEFAULT_SUMMARY_CELLS, 1, MAX_SUMMARY_CELLS);
  return new MemoryStoreImpl(maxKeys, whenFull, summaryCells);
}

class MemoryStoreImpl implements MemoryStore, MeterWriter {
  readonly name = 'memory' as const;
  readonly hasOwnClock = false;
  private readonly tables = new Map<string, Table>();
  private readonly tableList: Table[] = [];
  private readonly byPolicy = new Map<CompiledPolicy, { prefix: string; table: Table }>();
  private readonly states: (State | undefined)[] = [];
  private readonly scratch: Evaluation[] = [];
  /** The state `addMeter` stores: `[0, tat]`. */
  private readonly meterState = [0, 0];
  private readonly result: { allowed: boolean; evaluations: Evaluation[] } = { allowed: true, evaluations: [] };
  /** The held keys, and the rule that makes room among them. */
  private readonly eviction: Eviction;
  private ownPermits: MemoryPermitStore | undefined;

  constructor(
    readonly maxKeys: number,
    readonly whenFull: 'evict' | 'refuse',
    readonly summaryCells: number,
  ) {
    this.eviction = new Eviction(this.tableList, maxKeys, whenFull, summaryCells);
  }

  get size(): number {
    return this.eviction.count;
  }

  get summaryBytes(): number {
    return this.eviction.summaryBytes;
  }

  /** The summary of the keys `table` let go, if it let any go. */
  summaryOf(table: Table): Summary | undefined {
    return this.eviction.summaryOf(table);
  }

  /**
   * The state a call on `key` starts from: the table's, or for a key it does not hold, the summary's
   * (an upper bound on what a key that left still owes), or undefined (untouched).
   */
  private startState(table: Table, key: string, c: CompiledPolicy, nowUs: number): State | undefined {
    const held = table.read(key);
    if (held !== undefined) return held;
    const summary = this.eviction.summaryOf(table);
    return summary === undefined ? undefined : summary.read(c, key, nowUs);
  }

  get forcedEvictions(): number {
    return this.eviction.forcedEvictions;
  }

  get refusedKeys(): number {
    return this.eviction.refusedKeys;
  }

  get expiredRemoved(): number {
    return this.eviction.expiredRemoved;
  }

  get sweeps(): number {
    return this.eviction.sweeps;
  }

  /**
   * The meter fast path, for a limiter whose one policy is a meter that `isPlainMeter` (see
   * {@link MeterFastPath}); none for other policies.
   */
  fastPath(prefix: string, policies: readonly CompiledPolicy[], clock: Clock): FastPath | undefined {
    const only = policies[0] as CompiledPolicy;
    if (policies.length !== 1 || !isPlainMeter(only)) return undefined;
    return new MeterFastPath(this, this.table(prefix, only) as SlabTable, only, clock);
  }

  decide(request: StoreRequest): Promise<StoreResult> {
    try {
      // decideSync reuses its result and evaluations; the promise form hands out copies.
      return Promise.resolve(this.decidedCopy(request));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  get permits(): MemoryPermitStore {
    this.ownPermits ??= memoryPermitStore();
    return this.ownPermits;
  }

  decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult> {
    try {
      return Promise.resolve(decideWithPermitSync((r) => this.decidedCopy(r), this.permits, request, claim));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** `decideSync`, its result a copy the next call does not reuse. */
  private decidedCopy(request: StoreRequest): StoreResult {
    return detachedResult(this.decideSync(request));
  }

  /** The evaluations returned are reused by the next call: read them before deciding again. */
  decideSync(request: StoreRequest): StoreResult {
    const { policies, prefix } = request;
    const key = localKey(request.key);
    const nowUs = callerClock(request.nowUs);
    const n = policies.length;
    const evaluations = this.scratch;
    while (evaluations.length < n) evaluations.push(emptyEvaluation());
    if (n === 1) {
      // One policy, the common case: no arrays to fill, one table.
      const c = policies[0] as CompiledPolicy;
      const table = this.table(prefix, c);
      const out = evaluations[0] as Evaluation;
      const state = this.startState(table, key, c, nowUs);
      evaluatePolicy(c, state, nowUs, request.cost, request.maxDelayUs, out);
      const allowed = out.allowed;
      if (!allowed) settleDenied(c, state, nowUs, request.cost, request.commit, out);
      if (request.commit && out.next !== undefined) {
        const expiresAt = nowUs + out.resetAfterUs;
        // The key is in no other table of this call, so nothing needs protecting from eviction.
        if (this.eviction.count >= this.maxKeys && !table.has(key)) this.eviction.makeRoom(1, nowUs, undefined);
        this.write(table, key, out.next, expiresAt);
      } else if (!request.commit) out.next = undefined;
      const result = this.result;
      result.allowed = allowed;
      result.evaluations = n === evaluations.length ? evaluations : evaluations.slice(0, n);
      return result;
    }
    const states = this.states;
    for (let i = 0; i < n; i++) {
      const c = policies[i] as CompiledPolicy;
      states[i] = this.startState(this.table(prefix, c), key, c, nowUs);
    }
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
      if (slot !== undefined) this.eviction.remove(table, slot);
    }
  }

  clear(): void {
    for (const table of this.tables.values()) table.clear();
    this.eviction.clear();
  }

  close(): Promise<void> {
    this.clear();
    return Promise.resolve();
  }

  cancel(request: CancelRequest): Promise<boolean> {
    return promised(() => this.cancelSync(request));
  }

  cancelSync(request: CancelRequest): boolean {
    const { policies, prefix, key, nowUs } = onTables(request);
    // read() reuses one array per table: copy each state before reading the next.
    const states = policies.map((c) => {
      const state = this.startState(this.table(prefix, c), key, c, nowUs);
      return state === undefined ? undefined : [...state];
    });
    const outs = policies.map(() => emptyEvaluation());
    const all = cancelReservation(policies, states, nowUs, request.reservation, outs);
    this.commit(prefix, policies, key, outs, nowUs);
    return all;
  }

  refund(request: RefundRequest): Promise<void> {
    return promised(() => this.refundSync(request));
  }

  refundSync(request: RefundRequest): void {
    const { policies, prefix, key, nowUs } = onTables(request);
    for (const c of policies) {
      const table = this.table(prefix, c);
      const next = refundPolicy(c, table.read(key), nowUs, request.leasedAtUs, request.leased, request.unused);
      // Only a key the store holds changes: a refund never needs room.
      if (next !== undefined) this.write(table, key, next, nowUs + inspect(c, next, nowUs).resetAfterUs);
    }
  }

  settle(request: SettleRequest): Promise<void> {
    return promised(() => this.settleSync(request));
  }

  settleSync(request: SettleRequest): void {
    const { policies, prefix, key, nowUs } = onTables(request);
    // A debt may land on a key the store no longer holds (it drained): it starts where a decision would.
    const outs = policies.map((c) => {
      const out = emptyEvaluation();
      const start = this.startState(this.table(prefix, c), key, c, nowUs);
      const next = settlePolicy(c, start, nowUs, request.atUs, request.estimate, request.actual);
      out.next = next;
      if (next !== undefined) out.resetAfterUs = inspect(c, next, nowUs).resetAfterUs;
      return out;
    });
    this.commit(prefix, policies, key, outs, nowUs);
  }

  private lastPolicy: CompiledPolicy | undefined;
  private lastPrefix = '';
  private lastTable: Table | undefined;

  table(prefix: string, c: CompiledPolicy): Table {
    if (c === this.lastPolicy && prefix === this.lastPrefix) {
      // The meter fast path marks the table as used by its policy without passing here: mark it again,
      // as `findTable` does (eviction and the summary read a table's keys by its last policy).
      const last = this.lastTable as Table;
      if (last.policy !== c) last.policy = c;
      return last;
    }
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
      const layout = kind.layout;
      table =
        'fields' in layout
          ? new SlabTable(n, c, emptyStateLength(kind), layout.untouchedAtLatest === true)
          : new LogTable(n, c);
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
    const eviction = this.eviction;
    if (eviction.count + n > this.maxKeys) {
      let needed = 0;
      for (let i = 0; i < n; i++) {
        if ((outs[i] as Evaluation).next !== undefined && !this.table(prefix, policies[i] as CompiledPolicy).has(key)) {
          needed++;
        }
      }
      if (needed > 0 && eviction.count + needed > this.maxKeys) eviction.makeRoom(needed, nowUs, key);
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
   * the meter fast path's way in, not part of the store's interface.
   */
  rewriteMeter(table: SlabTable, slot: number, tat: number): void {
    const eviction = this.eviction;
    if (tat < eviction.earliestExpiry) eviction.earliestExpiry = tat;
    table.rewrite2(slot, 0, tat, tat);
  }

  /** `rewriteMeter` for a new key, when the store has room for it. */
  addMeter(table: SlabTable, key: string, tat: number): void {
    const state = this.meterState;
    state[1] = tat;
    this.write(table, key, state, tat);
  }

  private write(table: Table, key: string, state: State, expiresAt: number): void {
    const eviction = this.eviction;
    if (expiresAt < eviction.earliestExpiry) eviction.earliestExpiry = expiresAt;
    if (table.write(key, state, expiresAt) >= 0) eviction.add();
  }
}

/**
 * A cancel, refund or settle as the tables take it: its policies and prefix, its key as the tables hold
 * it, and the caller's time.
 */
function onTables(request: CancelRequest | RefundRequest | SettleRequest): {
  policies: readonly CompiledPolicy[];
  prefix: string;
  key: string;
  nowUs: number;
} {
  return {
    policies: request.policies,
    prefix: request.prefix,
    key: localKey(request.key),
    nowUs: callerClock(request.nowUs),
  };
}

/** The caller's time: the memory store has no clock of its own, so a request without one is refused. */
function callerClock(nowUs: number | undefined): number {
  if (nowUs === undefined) {
    throw new FloodgateError('ERR_INVALID_OPTION', 'the memory store needs the caller’s clock (nowUs)');
  }
  return nowUs;
}
