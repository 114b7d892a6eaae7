import type { CompiledPolicy } from '../../model/compile.js';
import type { CompiledNumbers } from '../../model/descriptor.js';
import { type KindName, kindOf } from '../../model/kinds.js';
import { firstLive, liveSum } from '../../model/pairs.js';
import { TOKEN_DUST } from '../../model/token-bucket.js';
import type { State } from '../../model/types.js';

/** Cells of a policy's summary unless `summaryCells` says otherwise. */
export const DEFAULT_SUMMARY_CELLS = 65_536;
/** Most cells a summary may have (2^24: 384 MiB for a sliding window's summary, the largest cell). */
export const MAX_SUMMARY_CELLS = 2 ** 24;

/**
 * A kind's state reduced to a fixed size, and the join of two reduced states. `r[0]` is the end of a
 * penalty block (joined by max, for every kind); `r[1…fields]` are the kind's own. Every reduction and
 * join may only make a state stricter: from the result, no sequence of calls is admitted more, at any
 * moment, than from the state reduced or from either state joined, nor than from an untouched key.
 */
interface Reducer {
  readonly fields: number;
  /** Writes `s` as it stands at `nowUs`, reduced, into `r` (an untouched key reduces to zeros). */
  reduce(c: CompiledNumbers, s: State | undefined, nowUs: number, r: number[]): void;
  /** Joins `from` into `into` (both reduced at the same instant), fields only. */
  join(into: number[], from: number[]): void;
  /** The state a reduced form stands for, in the kind's layout. */
  state(c: CompiledNumbers, r: readonly number[]): State;
}

function blockedAt(s: State | undefined, nowUs: number): number {
  const blocked = s === undefined ? 0 : (s[0] as number);
  return blocked > nowUs ? blocked : 0;
}

/** Joins field by field with max: each field only ever makes the state stricter as it grows. */
function joinMax(into: number[], from: number[]): void {
  for (let i = 1; i < into.length; i++) if ((from[i] as number) > (into[i] as number)) into[i] = from[i] as number;
}

/** Sliding log and bucketed window: every live amount moved onto the newest time (counting as long or longer). */
function reducePairs(s: State | undefined, cutoff: number, keepTime: boolean, r: number[]): void {
  const length = s === undefined ? 0 : s.length;
  const sum = liveSum(s, firstLive(s, cutoff));
  const newest = length > 1 ? ((s as State)[length - 2] as number) : 0;
  r[1] = sum > 0 || keepTime ? newest : 0;
  r[2] = sum;
}

function pairsState(r: readonly number[]): State {
  return r[1] === 0 ? [r[0] as number] : [r[0] as number, r[1] as number, r[2] as number];
}

/**
 * The reductions, one per kind (the compiler requires one for each). Each is argued in model terms:
 * - meter: the latest TAT owes the most, from now on and at every later moment;
 * - interval token bucket: both states refilled to now, then the most used and the latest anchor (its
 *   refills come no sooner);
 * - fixed window, clock-aligned: the largest count of the current window; first-request aligned: a live
 *   window becomes a penalty block until its end (a window that ends sooner than an untouched key's
 *   would restart sooner, so no count on a window can stand for both);
 * - sliding window: both read in the current window, the largest current and previous counts;
 * - sliding log and bucketed window: the live sum and the newest time, as one event at that time (a
 *   cost moved later counts for longer, as the log's own coalescing argues), joined by max.
 */
const REDUCERS: { readonly [N in KindName]: Reducer } = {
  meter: {
    fields: 1,
    reduce(_c, s, nowUs, r) {
      r[0] = blockedAt(s, nowUs);
      const tat = s === undefined ? 0 : (s[1] as number);
      r[1] = tat > nowUs ? tat : 0;
    },
    join: joinMax,
    state: (_c, r) => [r[0] as number, r[1] as number],
  },
  'token-interval': {
    fields: 2,
    reduce(c, s, nowUs, r) {
      r[0] = blockedAt(s, nowUs);
      let used = s === undefined ? 0 : (s[1] as number);
      let anchor = s === undefined ? 0 : (s[2] as number);
      if (used > 0) {
        const intervals = Math.floor((nowUs - anchor) / c.b);
        if (intervals > 0) {
          used -= intervals * c.a;
          anchor += intervals * c.b;
        }
      }
      if (used <= c.limit * TOKEN_DUST) {
        used = 0;
        anchor = 0;
      }
      r[1] = used;
      r[2] = anchor;
    },
    join(into, from) {
      if ((from[1] as number) <= 0) return;
      if ((into[1] as number) <= 0) {
        into[1] = from[1] as number;
        into[2] = from[2] as number;
        return;
      }
      joinMax(into, from);
    },
    state: (_c, r) => [r[0] as number, r[1] as number, r[2] as number],
  },
  'fixed-window': {
    fields: 2,
    reduce(c, s, nowUs, r) {
      r[0] = blockedAt(s, nowUs);
      r[1] = 0;
      r[2] = 0;
      if (s === undefined) return;
      const start = s[1] as number;
      const count = s[2] as number;
      if (c.c === 0) {
        const current = nowUs - (nowUs % c.a);
        if (start === current && count > 0) {
          r[1] = current;
          r[2] = count;
        }
      } else if (count > 0 && nowUs < start + c.a && start + c.a > (r[0] as number)) {
        r[0] = start + c.a;
      }
    },
    join(into, from) {
      if ((from[2] as number) > (into[2] as number)) {
        into[1] = from[1] as number;
        into[2] = from[2] as number;
      }
    },
    state: (_c, r) => [r[0] as number, r[1] as number, r[2] as number],
  },
  'sliding-window': {
    fields: 3,
    reduce(c, s, nowUs, r) {
      r[0] = blockedAt(s, nowUs);
      const current = nowUs - (nowUs % c.a);
      let count = 0;
      let previous = 0;
      if (s !== undefined && s[1] === current) {
        count = s[2] as number;
        previous = s[3] as number;
      } else if (s !== undefined && s[1] === current - c.a) {
        previous = s[2] as number;
      }
      r[1] = current;
      r[2] = count;
      r[3] = previous;
    },
    join: joinMax,
    state: (_c, r) => [r[0] as number, r[1] as number, r[2] as number, r[3] as number],
  },
  'sliding-log': {
    fields: 2,
    reduce(c, s, nowUs, r) {
      r[0] = blockedAt(s, nowUs);
      // The minimum gap counts from the newest event even once it has left the window: keep its time.
      reducePairs(
        s,
        nowUs - c.a,
        c.b > 0 && s !== undefined && s.length > 1 && (s[s.length - 2] as number) + c.b > nowUs,
        r,
      );
    },
    join: joinMax,
    state: (_c, r) => pairsState(r),
  },
  'bucketed-window': {
    fields: 2,
    reduce(c, s, nowUs, r) {
      r[0] = blockedAt(s, nowUs);
      reducePairs(s, nowUs - (nowUs % c.b) - c.a, false, r);
    },
    join: joinMax,
    state: (_c, r) => pairsState(r),
  },
};

/** The two halves of a summary's secret, from the platform's random source. */
export function summarySeed(): [number, number] {
  const seed = new Uint32Array(2);
  globalThis.crypto.getRandomValues(seed);
  return [seed[0] as number, seed[1] as number];
}

/**
 * What the keys of one policy table that had to leave it still owe, in a fixed number of cells: each
 * cell holds the join (the most restrictive state, in the model's terms, see `REDUCERS`) of every state
 * folded into it, and when it stops mattering (the latest expiry among them). A key that the table does
 * not hold starts from its cell, never from the untouched state: that is an upper bound on what it has
 * consumed, whether it left through the cell or not. Keys that share a cell may be denied calls they
 * could have had; no key gets a call it could not.
 *
 * A key's cell is a keyed hash of the key (HalfSipHash-1-3 under a secret drawn per store), so a client
 * cannot pick keys that land in another key's cell. Each table has its own summary: a state is only
 * ever read by the policy name and kind that wrote it, as in the table itself.
 *
 * Memory: `cells × (2 + fields) × 8` bytes (fields: 1 for the meter, 2 for the interval token bucket,
 * the fixed window and both logs, 3 for the sliding window), allocated when the table first lets a key go.
 */
export class Summary {
  private readonly data: Float64Array;
  private readonly stride: number;
  private readonly reducer: Reducer;
  private readonly key = [0, 0, 0, 0];
  private readonly cell = [0, 0, 0, 0];
  /** Keys folded in since the summary was made (a figure for tests and benchmarks). */
  folded = 0;

  constructor(
    c: CompiledNumbers,
    readonly cells: number,
    private readonly seed: readonly [number, number],
  ) {
    this.reducer = REDUCERS[kindOf(c).name as KindName];
    this.stride = 2 + this.reducer.fields;
    this.data = new Float64Array(cells * this.stride);
    this.key.length = 1 + this.reducer.fields;
    this.cell.length = 1 + this.reducer.fields;
  }

  /** Bytes held by the cells. */
  get bytes(): number {
    return this.data.byteLength;
  }

  /** The state `key` starts from when the table does not hold it; undefined when its cell holds nothing live. */
  read(c: CompiledPolicy, key: string, nowUs: number): State | undefined {
    const base = this.cellOf(key) * this.stride;
    if (!((this.data[base] as number) > nowUs)) return undefined;
    const cell = this.cell;
    for (let i = 0; i < cell.length; i++) cell[i] = this.data[base + 1 + i] as number;
    return this.reducer.state(c, cell);
  }

  /** Folds the state of `key`, which leaves the table now, into its cell; `expiresAt` is when it is untouched. */
  fold(c: CompiledPolicy, key: string, state: State, expiresAt: number, nowUs: number): void {
    const base = this.cellOf(key) * this.stride;
    const joined = this.join(c, base, state, nowUs);
    const data = this.data;
    const live = (data[base] as number) > nowUs;
    data[base] = live && (data[base] as number) > expiresAt ? (data[base] as number) : expiresAt;
    for (let i = 0; i < joined.length; i++) data[base + 1 + i] = joined[i] as number;
    this.folded++;
  }

  /** The state `key` would start from if it left the table now with `state` (nothing changes). */
  preview(c: CompiledPolicy, key: string, state: State, nowUs: number): State {
    return this.reducer.state(c, this.join(c, this.cellOf(key) * this.stride, state, nowUs));
  }

  /** The join of `state` with the cell at `base`, both as they stand at `nowUs`, in reused scratch. */
  private join(c: CompiledPolicy, base: number, state: State, nowUs: number): number[] {
    const reducer = this.reducer;
    const key = this.key;
    reducer.reduce(c, state, nowUs, key);
    if (!((this.data[base] as number) > nowUs)) return key;
    const cell = this.cell;
    for (let i = 0; i < cell.length; i++) cell[i] = this.data[base + 1 + i] as number;
    // The cell was reduced when it was last written: read it again as it stands now (windows roll).
    reducer.reduce(c, reducer.state(c, cell), nowUs, cell);
    if ((key[0] as number) > (cell[0] as number)) cell[0] = key[0] as number;
    reducer.join(cell, key);
    return cell;
  }

  /** The key's cell: HalfSipHash-1-3 of its UTF-16 code units under the store's secret. */
  cellOf(key: string): number {
    return halfSipHash13(key, this.seed[0], this.seed[1]) % this.cells;
  }
}

/**
 * HalfSipHash-1-3 (the 32-bit SipHash of Aumasson and Bernstein, as the Linux kernel uses it for
 * hash tables a remote party fills) over the string's UTF-16 code units, two to a word. Unsigned 32 bits.
 */
export function halfSipHash13(text: string, k0: number, k1: number): number {
  let v0 = k0 | 0;
  let v1 = k1 | 0;
  let v2 = 0x6c796765 ^ k0;
  let v3 = 0x74656462 ^ k1;
  const n = text.length;
  const whole = n & ~1;
  // One SipRound per word (the last word carries the length), then three to finalize (words of 0).
  for (let i = 0; i <= whole + 6; i += 2) {
    let m = 0;
    if (i < whole) m = text.charCodeAt(i) | (text.charCodeAt(i + 1) << 16);
    else if (i === whole) m = (n & 1 ? text.charCodeAt(i) : 0) | (((2 * n) & 0xff) << 24);
    else if (i === whole + 2) v2 ^= 0xff;
    v3 ^= m;
    v0 = (v0 + v1) | 0;
    v1 = (v1 << 5) | (v1 >>> 27);
    v1 ^= v0;
    v0 = (v0 << 16) | (v0 >>> 16);
    v2 = (v2 + v3) | 0;
    v3 = (v3 << 8) | (v3 >>> 24);
    v3 ^= v2;
    v0 = (v0 + v3) | 0;
    v3 = (v3 << 7) | (v3 >>> 25);
    v3 ^= v0;
    v2 = (v2 + v1) | 0;
    v1 = (v1 << 13) | (v1 >>> 19);
    v1 ^= v2;
    v2 = (v2 << 16) | (v2 >>> 16);
    v0 ^= m;
  }
  return (v1 ^ v3) >>> 0;
}
