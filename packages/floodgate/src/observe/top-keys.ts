import { invalid } from '../errors.js';

/** Options of {@link TopKeys}. */
export interface TopKeysOptions {
  /**
   * Keys counted at once per interval. Memory is two intervals of this many entries, whatever the
   * traffic; the count of any key is over-estimated by at most (weight recorded in the interval) /
   * `capacity`. @default 1000
   */
  capacity?: number;
  /** Length of one interval, ms: a report covers the current interval and the one before. @default 60_000 */
  intervalMs?: number;
}

/** One heavy hitter of a {@link TopKeys} report. */
export interface TopKey {
  key: string;
  /**
   * Weight recorded for the key over the report's span, an upper bound: the true weight lies in
   * `[count - error, count]`.
   */
  count: number;
  /** How much `count` may over-estimate the key's true weight. */
  error: number;
}

/** What a {@link TopKeys} report covers. */
export interface TopKeysReport {
  /** The heaviest keys first (ties: the smaller error first, then by key). */
  keys: TopKey[];
  /** Total weight recorded over the span, every key included. */
  total: number;
  /**
   * The largest over-estimate of any key's count in this report, absent keys included: a key not listed
   * may have had up to this much weight. At most `total / capacity`.
   */
  error: number;
  /** Start of the span, ms on the recording clock. */
  sinceMs: number;
}

interface Counter {
  key: string;
  count: number;
  /** Over-estimate carried from the counter this key took over. */
  error: number;
  /** Position in the heap. */
  at: number;
}

/**
 * One interval's Space-Saving summary (Metwally, Agrawal, El Abbadi, 2005): at most `capacity` counters;
 * a key not counted takes over the counter of the least count, inheriting its count as its error. Every
 * key whose true weight exceeds total / capacity holds a counter, and every count over-estimates by at
 * most the least count, itself at most total / capacity. A binary min-heap finds the least counter in
 * O(log capacity).
 */
class Summary {
  readonly counters = new Map<string, Counter>();
  private readonly heap: Counter[] = [];
  total = 0;

  constructor(
    private readonly capacity: number,
    readonly startMs: number,
  ) {}

  /** The least count held: what an absent key's weight may have been (0 while there is room). */
  get floor(): number {
    return this.heap.length < this.capacity ? 0 : (this.heap[0] as Counter).count;
  }

  record(key: string, weight: number): void {
    this.total += weight;
    const held = this.counters.get(key);
    if (held !== undefined) {
      held.count += weight;
      this.down(held.at);
      return;
    }
    if (this.heap.length < this.capacity) {
      const counter: Counter = { key, count: weight, error: 0, at: this.heap.length };
      this.heap.push(counter);
      this.counters.set(key, counter);
      this.up(counter.at);
      return;
    }
    const least = this.heap[0] as Counter;
    this.counters.delete(least.key);
    least.error = least.count;
    least.count += weight;
    least.key = key;
    this.counters.set(key, least);
    this.down(0);
  }

  private up(i: number): void {
    const heap = this.heap;
    const item = heap[i] as Counter;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent] as Counter;
      if (p.count <= item.count) break;
      heap[i] = p;
      p.at = i;
      i = parent;
    }
    heap[i] = item;
    item.at = i;
  }

  private down(i: number): void {
    const heap = this.heap;
    const n = heap.length;
    const item = heap[i] as Counter;
    for (;;) {
      let least = i * 2 + 1;
      if (least >= n) break;
      const right = least + 1;
      if (right < n && (heap[right] as Counter).count < (heap[least] as Counter).count) least = right;
      const child = heap[least] as Counter;
      if (child.count >= item.count) break;
      heap[i] = child;
      child.at = i;
      i = least;
    }
    heap[i] = item;
    item.at = i;
  }
}

/**
 * The heaviest keys of a stream (say, the keys denied most) over a recent span, in a structure of fixed
 * size: two Space-Saving summaries, the current interval's and the one before, each of `capacity`
 * counters. A report merges the two: each listed count is an upper bound, off by at most its `error`,
 * and any key whose weight over the span exceeds the report's `error` (at most total / capacity) is
 * listed. A flood of distinct keys cannot grow it, nor hide a heavy key.
 *
 * Time is an argument (ms on any clock that does not go back), so the limiter, the service and tests
 * drive it alike.
 */
export class TopKeys {
  readonly capacity: number;
  readonly intervalMs: number;
  private current: Summary | undefined;
  private previous: Summary | undefined;

  constructor(options: TopKeysOptions = {}) {
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'topKeys options', options, 'an object');
    }
    const capacity = options.capacity ?? 1000;
    if (!Number.isSafeInteger(capacity) || capacity < 1 || capacity > 1_000_000) {
      throw invalid('ERR_INVALID_OPTION', 'capacity', options.capacity, 'an integer from 1 to 1000000');
    }
    const intervalMs = options.intervalMs ?? 60_000;
    if (typeof intervalMs !== 'number' || !Number.isFinite(intervalMs) || intervalMs <= 0) {
      throw invalid('ERR_INVALID_OPTION', 'intervalMs', options.intervalMs, 'a finite number of milliseconds above 0');
    }
    this.capacity = capacity;
    this.intervalMs = intervalMs;
  }

  /** Counts `weight` (a finite number above 0; 1 by default) for `key` at `nowMs`. */
  record(key: string, nowMs: number, weight = 1): void {
    if (!(weight > 0) || !Number.isFinite(weight)) return;
    this.at(nowMs).record(key, weight);
  }

  /** The `n` heaviest keys over the current and the previous interval, as of `nowMs`. */
  top(n: number, nowMs: number): TopKeysReport {
    const current = this.at(nowMs);
    const previous = this.previous;
    const merged = new Map<string, TopKey>();
    const add = (summary: Summary, other: Summary | undefined): void => {
      for (const counter of summary.counters.values()) {
        let entry = merged.get(counter.key);
        if (entry === undefined) {
          // Absent from the other interval's summary: it may have had up to that summary's floor there.
          const missing = other === undefined || other.counters.has(counter.key) ? 0 : other.floor;
          entry = { key: counter.key, count: missing, error: missing };
          merged.set(counter.key, entry);
        }
        entry.count += counter.count;
        entry.error += counter.error;
      }
    };
    add(current, previous);
    if (previous !== undefined) add(previous, current);
    const keys = [...merged.values()].sort(
      (x, y) => y.count - x.count || x.error - y.error || (x.key < y.key ? -1 : x.key > y.key ? 1 : 0),
    );
    const limit = Math.max(0, Math.floor(n));
    return {
      keys: keys.slice(0, limit),
      total: current.total + (previous?.total ?? 0),
      error: current.floor + (previous?.floor ?? 0),
      sinceMs: previous?.startMs ?? current.startMs,
    };
  }

  /** Forgets everything counted. */
  clear(): void {
    this.current = undefined;
    this.previous = undefined;
  }

  /** The summary of the interval holding `nowMs`, rolling intervals over as time passes. */
  private at(nowMs: number): Summary {
    let current = this.current;
    if (current === undefined) {
      current = new Summary(this.capacity, nowMs);
      this.current = current;
      return current;
    }
    const elapsed = nowMs - current.startMs;
    if (elapsed < this.intervalMs) return current;
    // The interval after the current one keeps it as the previous; later than that, both are over.
    const intervals = Math.floor(elapsed / this.intervalMs);
    const start = current.startMs + intervals * this.intervalMs;
    this.previous = intervals === 1 ? current : undefined;
    current = new Summary(this.capacity, start);
    this.current = current;
    return current;
  }
}
