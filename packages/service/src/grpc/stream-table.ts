// The open streams of a connection by id, for the HTTP/2 transport (./h2.ts).
//
// Why not a Map: a connection sets an entry and deletes it for every call, and V8 replaces a Map's hash
// table every few such changes, linking the table it leaves to the one replacing it (so that iterators
// follow). As soon as one table of that chain has lived through two young-generation collections, it
// sits in the old generation, where a young-generation collection does not look whether it is still
// used: everything it reaches survives, the next table and the streams (calls, requests, answers) each
// table held included. From then on every call's objects are promoted, the old generation grows by
// about 1 MB per young collection at 10,000 calls/s, and full collections pause the process: the tail of
// the latency. Here the arrays are replaced only when the table grows, and a slot given up holds nothing.

/** The smallest table (a power of two); it doubles whenever it would be more than half full. */
const MIN_CAPACITY = 16;
/** The ids of a table that never held a stream: no slot. */
const NO_IDS = new Int32Array(0);

/**
 * A hash table of values by stream id (odd, 1 to 2^31 - 1), with linear probing over two arrays: ids
 * (0 for a free slot) and values. An entry deleted moves the entries after it back (backward shift), so
 * no slot is ever marked deleted and lookups stop at the first free slot.
 */
export class StreamTable<V> {
  private ids: Int32Array;
  private values: Array<V | undefined>;
  private mask: number;
  private count = 0;

  // No arrays until the first stream: a connection that never opens one (an idle or churned one, by the
  // thousand under attack) allocates nothing here.
  constructor() {
    this.ids = NO_IDS;
    this.values = [];
    this.mask = 0;
  }

  /** Entries held. */
  get size(): number {
    return this.count;
  }

  /** Slots in the arrays: at least twice {@link size}. */
  get capacity(): number {
    return this.ids.length;
  }

  /** The slot where `id` lives or would go: consecutive client ids (odd) fall in consecutive slots. */
  private home(id: number): number {
    return (id >>> 1) & this.mask;
  }

  get(id: number): V | undefined {
    if (this.count === 0) return undefined;
    const ids = this.ids;
    const mask = this.mask;
    for (let at = this.home(id); ; at = (at + 1) & mask) {
      const held = ids[at] as number;
      if (held === id) return this.values[at];
      if (held === 0) return undefined;
    }
  }

  /** Adds `value` under `id`, which the table does not hold (stream ids are never reused). */
  add(id: number, value: V): void {
    if ((this.count + 1) * 2 > this.ids.length) this.resize(Math.max(MIN_CAPACITY, this.ids.length * 2));
    this.place(id, value);
    this.count++;
  }

  private place(id: number, value: V): void {
    const ids = this.ids;
    const mask = this.mask;
    let at = this.home(id);
    while (ids[at] !== 0) at = (at + 1) & mask;
    ids[at] = id;
    this.values[at] = value;
  }

  /** Removes `id`'s entry, if held. */
  delete(id: number): void {
    if (this.count === 0) return;
    const ids = this.ids;
    const values = this.values;
    const mask = this.mask;
    let free = this.home(id);
    while (ids[free] !== id) {
      if (ids[free] === 0) return;
      free = (free + 1) & mask;
    }
    ids[free] = 0;
    values[free] = undefined;
    this.count--;
    // Backward shift: an entry after the freed slot whose home is not between the two moves into it.
    for (let at = (free + 1) & mask; ids[at] !== 0; at = (at + 1) & mask) {
      const home = this.home(ids[at] as number);
      const stays = free <= at ? free < home && home <= at : free < home || home <= at;
      if (stays) continue;
      ids[free] = ids[at] as number;
      values[free] = values[at];
      ids[at] = 0;
      values[at] = undefined;
      free = at;
    }
  }

  /** The values held, as a new array (the caller may delete entries while it goes through them). */
  list(): V[] {
    const out: V[] = [];
    if (this.count === 0) return out;
    const ids = this.ids;
    for (let at = 0; at < ids.length; at++) if (ids[at] !== 0) out.push(this.values[at] as V);
    return out;
  }

  /** Gives the arrays of a table that grew back, when it holds nothing (an idle connection). */
  compact(): void {
    if (this.count === 0 && this.ids.length > MIN_CAPACITY) this.resize(MIN_CAPACITY);
  }

  private resize(capacity: number): void {
    const ids = this.ids;
    const values = this.values;
    this.ids = new Int32Array(capacity);
    this.values = new Array<V | undefined>(capacity).fill(undefined);
    this.mask = capacity - 1;
    for (let at = 0; at < ids.length; at++) {
      const id = ids[at] as number;
      if (id !== 0) this.place(id, values[at] as V);
    }
  }
}
