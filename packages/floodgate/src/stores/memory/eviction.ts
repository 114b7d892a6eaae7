import { FloodgateError } from '../../errors.js';
import { inspect } from '../../model/decide.js';
import { emptyEvaluation } from '../../model/types.js';
import { Summary, summarySeed } from './summary.js';
import type { Table } from './tables.js';

/**
 * Entries looked at per eviction. Each one costs a cost-0 evaluation and a look at its summary cell
 * (`evictionScore`). Which key goes only decides how precise the store stays: a key let go keeps what it
 * owes in its summary. Redis samples 5 for its approximate LRU, for the same trade.
 */
const SAMPLES = 5;

/**
 * Candidates remembered between evictions (Redis keeps 16 too): each eviction takes the lowest score of
 * the pool and the new sample, so the good candidates that earlier samples found are not lost.
 */
const POOL_SIZE = 16;

/** A remembered eviction candidate: `key` of table `table`, while the table holds it. */
interface Candidate {
  table: number;
  key: string;
  consumed: number;
  expiresAt: number;
}

/**
 * The memory store's held keys and the rule that makes room among them. The store's side of it:
 * - `add()` when a table gives a new key a slot, `remove(table, slot)` to forget a held key (a reset);
 * - on every write, `earliestExpiry` lowered to the write's expiry when it is earlier (inline: the hot path);
 * - `makeRoom(needed, nowUs, key)` before writing `needed` new keys of `key` when `count + needed > maxKeys`:
 *   it drops expired keys, then evicts or refuses (`ERR_STORE_FULL`) as `whenFull` says;
 * - `summaryOf(table)`: the summary of the keys `table` let go, which a key the table does not hold
 *   starts from (`Summary.read`);
 * - the counters (`forcedEvictions`, `refusedKeys`, `expiredRemoved`, `sweeps`), `summaryBytes` and `clear()`.
 * Everything else (sampling, the candidate pool, sweeps, folding an evicted key's state into its table's
 * summary) stays in this file, so the rule can change alone.
 */
export class Eviction {
  forcedEvictions = 0;
  refusedKeys = 0;
  expiredRemoved = 0;
  sweeps = 0;
  /**
   * Keys held: the sum of the tables' sizes. Each table's slots are dense, so entry `i` of all held keys
   * (a uniform sample is one random `i`) is a slot of the table its rank falls in (`pick`).
   */
  count = 0;
  /** The table and slot `pick` found. */
  private pickedTable: Table | undefined;
  private pickedSlot = 0;
  /**
   * No held key expires before this, but one that had expired when it was written (a lower bound: the
   * least expiry at the last sweep and since; a meter's state may expire at a time before its write).
   */
  earliestExpiry = Number.POSITIVE_INFINITY;
  /** New keys (stored or refused) since the last sweep; the first time the store fills, a sweep is due. */
  private newSinceSweep: number;
  private readonly sweepEvery: number;
  private readonly pool: Candidate[] = Array.from({ length: POOL_SIZE }, () => ({
    table: 0,
    key: '',
    consumed: 0,
    expiresAt: 0,
  }));
  private poolSize = 0;
  private readonly probe = emptyEvaluation();
  /** Per table (by id), the summary of the keys it let go; undefined until it lets one go. */
  private readonly summaries: (Summary | undefined)[] = [];
  private readonly seed = summarySeed();

  /** `tables`: the store's tables by id (the store appends to it). */
  constructor(
    private readonly tables: readonly Table[],
    readonly maxKeys: number,
    readonly whenFull: 'evict' | 'refuse',
    readonly summaryCells: number,
  ) {
    this.sweepEvery = Math.max(1, Math.floor(maxKeys / 10));
    this.newSinceSweep = this.sweepEvery;
  }

  /** Bytes held by the summaries (none until a key is let go). */
  get summaryBytes(): number {
    let bytes = 0;
    for (const summary of this.summaries) bytes += summary === undefined ? 0 : summary.bytes;
    return bytes;
  }

  /** The summary of the keys `table` let go, if it let any go. */
  summaryOf(table: Table): Summary | undefined {
    return this.summaries[table.id];
  }

  /** Forgets every entry and every summary (the tables are cleared by the store). */
  clear(): void {
    this.summaries.length = 0;
    this.count = 0;
    this.poolSize = 0;
    this.earliestExpiry = Number.POSITIVE_INFINITY;
  }

  /** Counts a new key, which a table has just given a slot. */
  add(): void {
    this.count++;
    this.newSinceSweep++;
  }

  /** Drops the key in slot `slot` of `table` (the table's last slot moves into it). */
  remove(table: Table, slot: number): void {
    table.removeSlot(slot);
    this.count--;
  }

  /** Finds held key number `i` of all (0 ≤ i < count): sets `pickedTable` and `pickedSlot`. */
  private pick(i: number): void {
    const tables = this.tables;
    let rest = i;
    for (let t = 0; t < tables.length; t++) {
      const table = tables[t] as Table;
      const size = table.size;
      if (rest < size) {
        this.pickedTable = table;
        this.pickedSlot = rest;
        return;
      }
      rest -= size;
    }
    throw new Error(`no held key number ${i} of ${this.count}`);
  }

  /**
   * Makes room for `needed` new entries of `key` (whose own entries are never dropped for it). Expired
   * keys go first; then, when the store is full of live keys, `'evict'` lets the cheapest of a sample go
   * into its summary and `'refuse'` throws `ERR_STORE_FULL`. Should every held entry be this key's own (a cap below
   * the number of policies of one call), the call is stored anyway: the cap is then exceeded by at most
   * that many entries.
   */
  makeRoom(needed: number, nowUs: number, key: string | undefined): void {
    if (nowUs >= this.earliestExpiry && this.newSinceSweep >= this.sweepEvery) this.sweep(nowUs, key);
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

  /**
   * Drops every expired key but `key`'s own entries (its call counted them as held and is about to
   * rewrite them): one pass over each table, from its end, so a slot moved into another was already seen.
   */
  private sweep(nowUs: number, key: string | undefined): void {
    this.sweeps++;
    this.newSinceSweep = 0;
    let removed = 0;
    let earliest = Number.POSITIVE_INFINITY;
    for (const table of this.tables) {
      for (let slot = table.size - 1; slot >= 0; slot--) {
        const expiresAt = table.expiresAt(slot);
        if (expiresAt <= nowUs && (key === undefined || table.keys[slot] !== key)) {
          this.remove(table, slot);
          removed++;
        } else if (expiresAt < earliest) earliest = expiresAt;
      }
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
   * Folds the state of a live entry that is forced out into its table's summary (made on first use), so
   * that the key, when it comes back, starts from no less than it had: eviction never over-admits.
   */
  private fold(table: Table, slot: number, nowUs: number): void {
    let summary = this.summaries[table.id];
    if (summary === undefined) {
      summary = new Summary(table.policy, this.summaryCells, this.seed);
      this.summaries[table.id] = summary;
    }
    summary.fold(table.policy, table.keys[slot] as string, table.stateAt(slot), table.expiresAt(slot), nowUs);
  }

  /**
   * How much an entry is worth keeping, lowest first out; -1 when it holds nothing worth keeping. Since a
   * key that leaves keeps what it owes in its summary cell, what eviction can lose is only precision: the
   * key's own (how much stricter it comes back: the consumption of its cell joined with it, less its own),
   * counted twice, plus what it has left (a key at its limit comes back exact from its cell, while a key
   * that used little would meet the cell's other keys: it is the one to keep).
   */
  private evictionScore(table: Table, slot: number, nowUs: number): number {
    const consumed = this.consumed(table, slot, nowUs);
    if (consumed < 0) return consumed;
    const summary = this.summaries[table.id];
    let loss = 0;
    if (summary !== undefined) {
      const back = summary.preview(table.policy, table.keys[slot] as string, table.stateAt(slot), nowUs);
      const out = inspect(table.policy, back, nowUs, this.probe);
      const whole = Math.floor(table.policy.limit);
      loss = Math.max(0, (whole >= 1 ? 1 - out.remaining / whole : 1) - consumed);
    }
    return 2 * loss + (1 - consumed);
  }

  /**
   * Frees one entry: an expired one met in the sample, or else the lowest `evictionScore` of the sample
   * and the pool (ties: the nearest expiry, which gives the least back). Returns false when nothing but
   * `key`'s own entries is held.
   */
  private evictOne(nowUs: number, key: string | undefined): boolean {
    for (let s = 0; s < SAMPLES; s++) {
      this.pick(Math.floor(Math.random() * this.count));
      const table = this.pickedTable as Table;
      const slot = this.pickedSlot;
      if (key !== undefined && table.keys[slot] === key) continue;
      const consumed = this.evictionScore(table, slot, nowUs);
      if (consumed < 0) {
        this.remove(table, slot);
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
      const table = this.tables[candidate.table] as Table;
      const slot = table.slotOf(candidate.key);
      if (slot === undefined || candidate.key === key) {
        this.dropCandidate(best);
        continue;
      }
      // The score may be stale: time and calls since may have changed it.
      const consumed = this.evictionScore(table, slot, nowUs);
      const expiresAt = table.expiresAt(slot);
      if (
        consumed >= 0 &&
        (consumed > candidate.consumed || (consumed === candidate.consumed && expiresAt > candidate.expiresAt))
      ) {
        candidate.consumed = consumed;
        candidate.expiresAt = expiresAt;
        continue;
      }
      this.dropCandidate(best);
      if (consumed >= 0) this.fold(table, slot, nowUs);
      this.remove(table, slot);
      if (consumed < 0) this.expiredRemoved++;
      else this.forcedEvictions++;
      return true;
    }
    // Every sampled entry was this key's own (a tiny store): look for any other.
    for (const table of this.tables) {
      for (let slot = 0; slot < table.size; slot++) {
        if (table.keys[slot] === key) continue;
        const consumed = this.consumed(table, slot, nowUs);
        if (consumed >= 0) this.fold(table, slot, nowUs);
        this.remove(table, slot);
        if (consumed < 0) this.expiredRemoved++;
        else this.forcedEvictions++;
        return true;
      }
    }
    return false;
  }

  /** Remembers a sampled entry if the pool has room or it beats the pool's worst. */
  private offer(from: Table, slot: number, consumed: number): void {
    const pool = this.pool;
    const table = from.id;
    const key = from.keys[slot] as string;
    const expiresAt = from.expiresAt(slot);
    let worst = 0;
    for (let j = 0; j < this.poolSize; j++) {
      const c = pool[j] as Candidate;
      if (c.table === table && c.key === key) {
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
    target.key = key;
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
      this.pick(Math.floor(Math.random() * this.count));
      const table = this.pickedTable as Table;
      const slot = this.pickedSlot;
      if ((key === undefined || table.keys[slot] !== key) && this.consumed(table, slot, nowUs) < 0) {
        this.remove(table, slot);
        this.expiredRemoved++;
        dropped = true;
      }
    }
    return dropped;
  }
}

/** Whether candidate `a` should be evicted before `b`: a lower `evictionScore` (its `consumed` field), then nearer expiry. */
function less(a: Candidate, b: Candidate): boolean {
  return a.consumed < b.consumed || (a.consumed === b.consumed && a.expiresAt < b.expiresAt);
}
