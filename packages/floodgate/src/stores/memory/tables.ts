import type { CompiledPolicy } from '../../model/compile.js';
import type { State } from '../../model/types.js';

/** Slots a table starts with; it doubles when full. */
const INITIAL_SLOTS = 1024;

/** The slot of each key of a table: both kinds of table keep their keys in dense slots, found by key here. */
abstract class SlotIndex {
  readonly index = new Map<string, number>();

  has(key: string): boolean {
    return this.index.has(key);
  }

  slotOf(key: string): number | undefined {
    return this.index.get(key);
  }
}

/**
 * Fixed-size states packed in one Float64Array, slot `i` holding the state of key `keys[i]`, and each
 * slot's expiry in a Float32Array (but a meter's, below). A key costs a Map entry with a small-integer value, a place in `keys`
 * and a few numbers, and no object of its own. The slots are dense: slot `i` for `i < size` holds a key,
 * and a key that leaves takes the last one in its place (`removeSlot`), so a uniform sample of the
 * table's keys is one random slot, with no list beside them.
 *
 * An expiry is kept as a 32-bit float relative to the table's first one, rounded up: exact within 2^24 µs
 * (16 s) of it, and beyond that late by less than 2^-23 of the distance (an hour away: 0.5 ms), never early.
 * Expiries only let the store drop keys that hold nothing; a state read after its expiry decides like
 * an absent one. A table whose kind's states are their own expiry (`untouchedAtLatest`: the meter's
 * `[blockedUntil, tat]`, untouched from the later of the two on) keeps none: a key costs 4 bytes less, and
 * a write touches the slab alone.
 */
export class SlabTable extends SlotIndex {
  /** The key of each slot, as long as the slab (grown with it, rather than by a half, as a push would). */
  keys: (string | undefined)[] = new Array<string | undefined>(INITIAL_SLOTS);
  /** Keys held: slots 0 to size − 1. */
  size = 0;
  private slab: Float64Array;
  private expiries: Float32Array;
  /** Expiries are stored relative to this (NaN until the first key). */
  private epoch = Number.NaN;
  private readonly scratch: number[];
  private readonly sampled: number[];

  constructor(
    readonly id: number,
    public policy: CompiledPolicy,
    readonly stateLength: number,
    /** The state's latest field is its expiry: no expiry is stored (see `untouchedAtLatest`). */
    readonly untouchedAtLatest = false,
  ) {
    super();
    this.slab = new Float64Array(INITIAL_SLOTS * stateLength);
    this.expiries = new Float32Array(untouchedAtLatest ? 0 : INITIAL_SLOTS);
    this.scratch = new Array<number>(stateLength).fill(0);
    this.sampled = new Array<number>(stateLength).fill(0);
  }

  /** The slot of the last key read, so the write that usually follows needs no second lookup. */
  private lastKey: string | undefined;
  private lastSlot: number | undefined;

  /** The key's state, copied into a reused array (valid until the next read of this table). */
  read(key: string): State | undefined {
    const slot = this.index.get(key);
    this.lastKey = key;
    this.lastSlot = slot;
    if (slot === undefined) return undefined;
    const n = this.stateLength;
    const base = slot * n;
    const scratch = this.scratch;
    for (let i = 0; i < n; i++) scratch[i] = this.slab[base + i] as number;
    return scratch;
  }

  /** Field `i` of the state in a held slot. */
  field(slot: number, i: number): number {
    return this.slab[slot * this.stateLength + i] as number;
  }

  /** Stores a state of two numbers in a held slot. */
  rewrite2(slot: number, a: number, b: number, expiresAt: number): void {
    const base = slot * 2;
    this.slab[base] = a;
    this.slab[base + 1] = b;
    if (this.untouchedAtLatest) return;
    const d = expiresAt - this.epoch;
    const expiries = this.expiries;
    expiries[slot] = d;
    // Stored to the nearest float: raised when that was below (rarely: never for whole µs within 16 s).
    if ((expiries[slot] as number) < d) expiries[slot] = nextUp32(expiries[slot] as number);
  }

  /** Stores a state; returns the new slot when the key is new, else -1. */
  write(key: string, state: State, expiresAt: number): number {
    let slot = key === this.lastKey && this.lastSlot !== undefined ? this.lastSlot : this.index.get(key);
    let added = -1;
    if (slot === undefined) {
      slot = this.insert(key, expiresAt);
      added = slot;
    }
    const n = this.stateLength;
    const base = slot * n;
    for (let i = 0; i < n; i++) this.slab[base + i] = state[i] as number;
    if (this.untouchedAtLatest) return added;
    const d = expiresAt - this.epoch;
    const expiries = this.expiries;
    expiries[slot] = d;
    if ((expiries[slot] as number) < d) expiries[slot] = nextUp32(expiries[slot] as number);
    return added;
  }

  /** A slot for a new key (out of `write`, which mostly rewrites a held key: small code compiles better). */
  private insert(key: string, expiresAt: number): number {
    const slot = this.size++;
    if (slot === this.keys.length) this.grow();
    // The first expiry: those that follow are near it, and so kept to within a few µs.
    if (Number.isNaN(this.epoch)) this.epoch = Number.isFinite(expiresAt) ? expiresAt : 0;
    this.index.set(key, slot);
    this.keys[slot] = key;
    return slot;
  }

  /**
   * When the key in `slot` is untouched again, µs: never earlier than the expiry written, or for a state
   * that is its own expiry, the latest of its times (which may lie before the time it was written at).
   */
  expiresAt(slot: number): number {
    if (!this.untouchedAtLatest) return this.epoch + (this.expiries[slot] as number);
    const n = this.stateLength;
    const base = slot * n;
    let latest = this.slab[base] as number;
    for (let i = 1; i < n; i++) latest = Math.max(latest, this.slab[base + i] as number);
    return latest;
  }

  /** A slot's state, copied into an array of its own (a sample must not clobber what `read` returned). */
  stateAt(slot: number): State {
    const n = this.stateLength;
    const base = slot * n;
    const sampled = this.sampled;
    for (let i = 0; i < n; i++) sampled[i] = this.slab[base + i] as number;
    return sampled;
  }

  /** Forgets the key in `slot`: the last slot's key moves into it. */
  removeSlot(slot: number): void {
    const keys = this.keys;
    this.index.delete(keys[slot] as string);
    const last = --this.size;
    if (slot !== last) {
      const moved = keys[last] as string;
      keys[slot] = moved;
      this.index.set(moved, slot);
      const n = this.stateLength;
      this.slab.copyWithin(slot * n, last * n, last * n + n);
      if (!this.untouchedAtLatest) this.expiries[slot] = this.expiries[last] as number;
    }
    keys[last] = undefined;
    this.lastKey = undefined;
  }

  clear(): void {
    this.index.clear();
    this.keys = new Array<string | undefined>(INITIAL_SLOTS);
    this.size = 0;
    this.lastKey = undefined;
    this.epoch = Number.NaN;
    this.slab = new Float64Array(INITIAL_SLOTS * this.stateLength);
    if (!this.untouchedAtLatest) this.expiries = new Float32Array(INITIAL_SLOTS);
  }

  private grow(): void {
    const slots = this.keys.length * 2;
    const slab = new Float64Array(slots * this.stateLength);
    slab.set(this.slab);
    this.slab = slab;
    if (!this.untouchedAtLatest) {
      const expiries = new Float32Array(slots);
      expiries.set(this.expiries);
      this.expiries = expiries;
    }
    const keys = new Array<string | undefined>(slots);
    for (let i = 0; i < this.size; i++) keys[i] = this.keys[i];
    this.keys = keys;
  }
}

const float = new Float32Array(1);
const bits = new Int32Array(float.buffer);

/**
 * The next 32-bit float above `f` (a finite float): an expiry stored to the nearest float below it is
 * raised to this, the least float above it. Added to the epoch it was taken from, it gives back no less
 * than the expiry it stands for, since rounding to the nearest double keeps the order with the expiry.
 */
function nextUp32(f: number): number {
  if (f === 0) return 2 ** -149;
  float[0] = f;
  bits[0] = (bits[0] as number) + (f > 0 ? 1 : -1);
  return float[0] as number;
}

/**
 * Variable-size states (lists of pairs, such as the sliding log): one array per key, by slot, dense as
 * in {@link SlabTable}.
 */
export class LogTable extends SlotIndex {
  readonly keys: string[] = [];
  private readonly states: State[] = [];
  private readonly expiries: number[] = [];

  constructor(
    readonly id: number,
    public policy: CompiledPolicy,
  ) {
    super();
  }

  get size(): number {
    return this.keys.length;
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
    const added = this.keys.length;
    this.index.set(key, added);
    this.keys.push(key);
    this.states.push(state);
    this.expiries.push(expiresAt);
    return added;
  }

  expiresAt(slot: number): number {
    return this.expiries[slot] as number;
  }

  stateAt(slot: number): State {
    return this.states[slot] as State;
  }

  /** Forgets the key in `slot`: the last slot's key moves into it. */
  removeSlot(slot: number): void {
    const keys = this.keys;
    this.index.delete(keys[slot] as string);
    const last = keys.length - 1;
    if (slot !== last) {
      const moved = keys[last] as string;
      keys[slot] = moved;
      this.index.set(moved, slot);
      this.states[slot] = this.states[last] as State;
      this.expiries[slot] = this.expiries[last] as number;
    }
    keys.pop();
    this.states.pop();
    this.expiries.pop();
  }

  clear(): void {
    this.index.clear();
    this.keys.length = 0;
    this.states.length = 0;
    this.expiries.length = 0;
  }
}

/** A table of one policy's keys under one prefix: fixed-size states in a slab, or a list of pairs per key. */
export type Table = SlabTable | LogTable;
