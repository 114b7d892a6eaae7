import { TopKeys } from 'floodgate';

/** One key of the {@link DeniedKeys} sketch. */
export interface DeniedKey {
  readonly key: string;
  /** Denials counted for the key: never below the truth, at most `error` above it. */
  readonly count: number;
  /** How much of `count` may belong to keys this one displaced (0: exact). */
  readonly error: number;
}

/**
 * The most denied keys (or tenants), in a fixed amount of memory whatever the number of keys: the
 * library's Space-Saving sketch ({@link TopKeys}) with epochs for intervals. It holds `capacity` counters
 * per epoch; a key that is not held takes the counter of the least counted one and inherits its count as
 * possible error. Any key denied more than `total / capacity` times is guaranteed to be held, so an
 * attacker cannot hide among many small keys.
 *
 * Counts cover the current epoch and the one before (rotated by {@link rotate}), so the list follows
 * what happens now rather than since the start.
 */
export class DeniedKeys {
  private readonly sketch: TopKeys;
  /** The current epoch, the sketch's time: one unit per epoch. */
  private epoch = 0;

  constructor(readonly capacity = 128) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
    this.sketch = new TopKeys({ capacity, intervalMs: 1 });
  }

  /** Counts one denial of `key`. */
  add(key: string): void {
    this.sketch.record(key, this.epoch);
  }

  /** Starts a new epoch: the current counts become the previous ones. */
  rotate(): void {
    this.epoch++;
  }

  /** The `n` most denied keys over the current and previous epochs, most denied first. */
  top(n: number): DeniedReport {
    const { keys, total, error } = this.sketch.top(n, this.epoch);
    return { total, error, keys };
  }
}

/** What {@link DeniedKeys.top} reports. */
export interface DeniedReport {
  /** Denials counted over the span, every key included. */
  readonly total: number;
  /** The largest over-estimate of any count; a key not listed was denied at most this often. */
  readonly error: number;
  readonly keys: DeniedKey[];
}

/** Buckets per doubling of the latency histogram: bucket edges about 19% apart. */
const SUB_BUCKETS = 4;
/** Latencies from 1 µs to about 70 s. */
const BUCKETS = 26 * SUB_BUCKETS;

/** Latency percentiles over a window, ms. */
export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

/**
 * Decision latencies per second for the last minute, as log-scale histograms of fixed size: recording is
 * one increment, memory does not grow with traffic, and a percentile is exact to about 19%.
 */
export class LatencyHistogram {
  private readonly seconds: Uint32Array[] = [];
  private readonly maxima: number[] = [];
  private current = new Uint32Array(BUCKETS);
  private currentMax = 0;

  /** Records one latency, in ms. */
  record(ms: number): void {
    const us = ms * 1000;
    const index = us <= 1 ? 0 : Math.min(BUCKETS - 1, Math.floor(Math.log2(us) * SUB_BUCKETS));
    (this.current as Uint32Array)[index] = ((this.current as Uint32Array)[index] as number) + 1;
    if (ms > this.currentMax) this.currentMax = ms;
  }

  /** Closes the current second; keeps the last 60. */
  rotate(): void {
    this.seconds.push(this.current);
    this.maxima.push(this.currentMax);
    if (this.seconds.length > 60) {
      this.seconds.shift();
      this.maxima.shift();
    }
    this.current = new Uint32Array(BUCKETS);
    this.currentMax = 0;
  }

  /** Percentiles over the last `windowSeconds` closed seconds. */
  summary(windowSeconds: number): LatencySummary {
    const merged = new Uint32Array(BUCKETS);
    let count = 0;
    let maxMs = 0;
    const from = Math.max(0, this.seconds.length - windowSeconds);
    for (let s = from; s < this.seconds.length; s++) {
      const h = this.seconds[s] as Uint32Array;
      for (let i = 0; i < BUCKETS; i++) merged[i] = (merged[i] as number) + (h[i] as number);
      maxMs = Math.max(maxMs, this.maxima[s] as number);
    }
    for (let i = 0; i < BUCKETS; i++) count += merged[i] as number;
    const at = (q: number): number => {
      if (count === 0) return 0;
      const rank = Math.ceil(q * count);
      let seen = 0;
      for (let i = 0; i < BUCKETS; i++) {
        seen += merged[i] as number;
        // The upper edge of the bucket, capped by the largest latency seen: never reported too low.
        if (seen >= rank) return Math.min(maxMs, 2 ** ((i + 1) / SUB_BUCKETS) / 1000);
      }
      return maxMs;
    };
    return { count, p50Ms: round(at(0.5)), p90Ms: round(at(0.9)), p99Ms: round(at(0.99)), maxMs: round(maxMs) };
  }
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
