import type { CompiledPolicy } from '../../model/compile.js';
import type { State } from '../../model/types.js';

/**
 * Fixed-size states packed in one Float64Array: slot `i` holds `[expiresAt, ...state]`. A key costs a
 * Map entry with a small-integer value plus a few doubles, and no object of its own. `keys` and `pos`
 * (the slot's place in the store's list of entries) let the store sample slots and drop them.
 */
export class SlabTable {
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
export class LogTable {
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

/** A table of one policy's keys under one prefix: fixed-size states in a slab, or a list of pairs per key. */
export type Table = SlabTable | LogTable;
