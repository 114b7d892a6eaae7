import { abortError, type Clock, systemClock } from '../clock.js';
import { describeValue, FloodgateError, invalid } from '../errors.js';
import { MAX_COST, MIN_COST, validateCost } from '../model/cost.js';

/** Options of {@link smoothLimiter}. Give `warmupMs` for the warming-up variant, else it is bursty. */
export interface SmoothLimiterOptions {
  /** The stable rate: permits handed out per second. `Infinity` hands out permits without waiting. */
  permitsPerSecond: number;
  /**
   * Bursty variant: while unused, the limiter stores permits, up to this many seconds of the rate, and
   * hands them out without waiting. `0` stores nothing. @default 1
   */
  maxBurstSeconds?: number;
  /**
   * Warming-up variant: a cold limiter ramps up from `coldFactor` times the stable interval to the stable
   * rate over this many ms of saturated use, and cools down again after as long unused. `0` means no
   * warm-up at all: the stable rate from the first permit, with nothing stored.
   */
  warmupMs?: number;
  /** Warming-up variant: how much slower than the stable rate a fully cold limiter is. @default 3 */
  coldFactor?: number;
  /** Reads time and sleeps; inject a manual clock in tests. @default systemClock */
  clock?: Clock;
}

/** Options of {@link SmoothLimiter.acquire}. */
export interface SmoothAcquireOptions {
  /** Stops the wait with `ERR_ABORTED`. The permits stay booked: later callers were scheduled behind them. */
  signal?: AbortSignal;
}

/** Beyond this a wait is forever: µs past 2^53 are no longer whole numbers in a double. */
const FOREVER_US = Number.MAX_SAFE_INTEGER;

/**
 * A smooth in-process rate limiter with the behaviour of Guava's `RateLimiter`: permits are spread
 * evenly at a stable rate, a call is granted at once and the *next* call pays for its permits, and
 * unused time is stored as permits (handed out for free by the bursty variant, slowly by the
 * warming-up one).
 *
 * @example
 * ```ts
 * import { smoothLimiter } from 'floodgate/smooth';
 * const limiter = smoothLimiter({ permitsPerSecond: 2 });
 * for (const task of tasks) {
 *   await limiter.acquire(); // at most 2 tasks start per second
 *   start(task);
 * }
 * ```
 */
export function smoothLimiter(options: SmoothLimiterOptions): SmoothLimiter {
  return new SmoothLimiter(options);
}

/**
 * Guava's SmoothRateLimiter, ported: `nextFreeUs` is when the next call may proceed, `storedPermits`
 * measures past underutilisation. Waits are whole µs truncated as Guava truncates them, so its
 * documented event sequences come out identical.
 */
export class SmoothLimiter {
  /** `'bursty'` (stored permits are free) or `'warming-up'` (stored permits are slow). */
  readonly variant: 'bursty' | 'warming-up';
  private readonly clock: Clock;
  private readonly maxBurstSeconds: number;
  private readonly warmupUs: number;
  private readonly coldFactor: number;
  private rate = 0;
  private stableIntervalUs = 0;
  private maxPermits = 0;
  private stored = 0;
  private nextFreeUs: number;
  // Warming-up only: the knee of the throttling function and the slope of its climbing part.
  private thresholdPermits = 0;
  private slope = 0;

  constructor(options: SmoothLimiterOptions) {
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'smoothLimiter options', options, 'an object');
    }
    const clock = options.clock ?? systemClock;
    if (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function') {
      throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs() and sleep()');
    }
    this.clock = clock;
    if (options.warmupMs !== undefined) {
      if (options.maxBurstSeconds !== undefined) {
        throw new FloodgateError(
          'ERR_INVALID_OPTION',
          'give either maxBurstSeconds (bursty) or warmupMs (warming up), not both',
          { option: 'maxBurstSeconds' },
        );
      }
      const warmupMs = options.warmupMs;
      if (typeof warmupMs !== 'number' || !Number.isFinite(warmupMs) || warmupMs < 0) {
        throw invalid('ERR_INVALID_OPTION', 'warmupMs', warmupMs, 'a finite number of milliseconds ≥ 0');
      }
      const coldFactor = options.coldFactor ?? 3;
      if (typeof coldFactor !== 'number' || !Number.isFinite(coldFactor) || coldFactor < 1) {
        throw invalid('ERR_INVALID_OPTION', 'coldFactor', coldFactor, 'a finite number ≥ 1');
      }
      this.variant = 'warming-up';
      this.warmupUs = Math.round(warmupMs * 1000);
      this.coldFactor = coldFactor;
      this.maxBurstSeconds = 0;
    } else {
      if (options.coldFactor !== undefined) {
        throw new FloodgateError('ERR_INVALID_OPTION', 'coldFactor needs warmupMs (the warming-up variant)', {
          option: 'coldFactor',
        });
      }
      const maxBurstSeconds = options.maxBurstSeconds ?? 1;
      if (typeof maxBurstSeconds !== 'number' || !Number.isFinite(maxBurstSeconds) || maxBurstSeconds < 0) {
        throw invalid('ERR_INVALID_OPTION', 'maxBurstSeconds', maxBurstSeconds, 'a finite number of seconds ≥ 0');
      }
      this.variant = 'bursty';
      this.maxBurstSeconds = maxBurstSeconds;
      this.warmupUs = 0;
      this.coldFactor = 1;
    }
    this.nextFreeUs = clock.nowUs();
    this.setRate(options.permitsPerSecond);
  }

  /**
   * Changes the stable rate. What is already owed stays owed: the next call still waits for the previous
   * call's permits at the old rate; stored permits are rescaled to the new maximum.
   */
  setRate(permitsPerSecond: number): void {
    if (typeof permitsPerSecond !== 'number' || Number.isNaN(permitsPerSecond) || !(permitsPerSecond > 0)) {
      throw invalid('ERR_INVALID_OPTION', 'permitsPerSecond', permitsPerSecond, 'a number above 0 (Infinity allowed)');
    }
    this.resync(this.clock.nowUs());
    this.rate = permitsPerSecond;
    // 0 for an infinite rate, Infinity for a rate so small that one permit takes longer than a double holds.
    this.stableIntervalUs = 1e6 / permitsPerSecond;
    if (this.variant === 'bursty') this.setBurstyRate();
    else this.setWarmingUpRate();
  }

  /** The stable rate, in permits per second, as last set. */
  getRate(): number {
    return this.rate;
  }

  /**
   * Waits until `permits` can be handed out, and resolves to the seconds waited (0 when granted at once).
   * The permits are booked when called, so concurrent callers are served in call order.
   */
  async acquire(permits = 1, options: SmoothAcquireOptions = {}): Promise<number> {
    checkPermits(permits);
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
    }
    const signal = options.signal;
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw invalid('ERR_INVALID_OPTION', 'signal', signal, 'an AbortSignal');
    }
    // Everything is checked before booking: a refused call books no permits.
    if (signal?.aborted === true) throw abortError(signal);
    const waitUs = this.reserve(permits, this.clock.nowUs());
    await this.sleep(waitUs, signal);
    return waitUs / 1e6;
  }

  /**
   * Takes `permits` if they can be handed out within `timeoutMs` (then waits as needed and resolves to
   * true); otherwise resolves to false at once, booking nothing. A negative timeout counts as 0.
   */
  async tryAcquire(permits = 1, timeoutMs = 0): Promise<boolean> {
    checkPermits(permits);
    if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs)) {
      throw invalid('ERR_INVALID_OPTION', 'timeoutMs', timeoutMs, 'a number of milliseconds');
    }
    const nowUs = this.clock.nowUs();
    const timeoutUs = Math.max(0, timeoutMs * 1000);
    // nextFree − timeout ≤ now, written without subtracting two infinities.
    if (!(this.nextFreeUs <= nowUs + timeoutUs)) return false;
    await this.sleep(this.reserve(permits, nowUs), undefined);
    return true;
  }

  /** Books `permits` and returns the µs the caller must wait: what the previous calls still owe. */
  private reserve(permits: number, nowUs: number): number {
    this.resync(nowUs);
    const momentAvailable = this.nextFreeUs;
    const spend = Math.min(permits, this.stored);
    const fresh = permits - spend;
    const waitUs =
      this.storedPermitsToWaitTime(this.stored, spend) + (fresh > 0 ? Math.trunc(fresh * this.stableIntervalUs) : 0);
    const next = this.nextFreeUs + waitUs;
    this.nextFreeUs = next > FOREVER_US ? Number.POSITIVE_INFINITY : next;
    this.stored -= spend;
    return Math.max(momentAvailable - nowUs, 0);
  }

  private sleep(waitUs: number, signal: AbortSignal | undefined): Promise<void> {
    if (waitUs <= 0 && signal?.aborted !== true) return Promise.resolve();
    return this.clock.sleep(waitUs / 1000, signal);
  }

  /** Turns the time since the next free moment (if past) into stored permits. */
  private resync(nowUs: number): void {
    if (nowUs > this.nextFreeUs) {
      if (this.maxPermits > 0) {
        const coolDownUs = this.coolDownIntervalUs();
        const fresh = coolDownUs === 0 ? Number.POSITIVE_INFINITY : (nowUs - this.nextFreeUs) / coolDownUs;
        this.stored = Math.min(this.maxPermits, this.stored + fresh);
      }
      this.nextFreeUs = nowUs;
    }
  }

  /** µs it takes to refill one stored permit while unused. */
  private coolDownIntervalUs(): number {
    if (this.variant === 'bursty') return this.stableIntervalUs;
    // The whole range 0…maxPermits refills in exactly one warm-up period.
    return this.maxPermits === Number.POSITIVE_INFINITY ? 0 : this.warmupUs / this.maxPermits;
  }

  private setBurstyRate(): void {
    const oldMax = this.maxPermits;
    const max = this.maxBurstSeconds === 0 ? 0 : this.maxBurstSeconds * this.rate;
    this.maxPermits = max;
    if (oldMax === Number.POSITIVE_INFINITY) this.stored = max;
    else this.stored = rescale(this.stored, oldMax, max, 0);
  }

  /**
   * The warming-up throttling function: flat at the stable interval up to `thresholdPermits`, then
   * climbing linearly to `coldFactor` times it at `maxPermits`. Spending from `maxPermits` down to the
   * threshold takes one warm-up period; from the threshold to 0, half of one.
   */
  private setWarmingUpRate(): void {
    const oldMax = this.maxPermits;
    const stable = this.stableIntervalUs;
    if (this.warmupUs === 0 || stable === Number.POSITIVE_INFINITY) {
      // Nothing to warm up: no stored permits, every permit at the stable interval. (Guava's formulas
      // divide 0 by 0 here and end up granting everything at once.)
      this.thresholdPermits = 0;
      this.maxPermits = 0;
      this.slope = 0;
    } else if (stable === 0) {
      // Infinite rate: permits cost nothing, stored or fresh.
      this.thresholdPermits = Number.POSITIVE_INFINITY;
      this.maxPermits = Number.POSITIVE_INFINITY;
      this.slope = 0;
    } else {
      const cold = stable * this.coldFactor;
      this.thresholdPermits = (0.5 * this.warmupUs) / stable;
      this.maxPermits = this.thresholdPermits + (2 * this.warmupUs) / (stable + cold);
      const width = this.maxPermits - this.thresholdPermits;
      this.slope = width > 0 && Number.isFinite(cold) ? (cold - stable) / width : 0;
    }
    if (oldMax === Number.POSITIVE_INFINITY) this.stored = 0;
    else this.stored = rescale(this.stored, oldMax, this.maxPermits, this.maxPermits);
  }

  /** The time (integral of the throttling function) to hand out `take` of `stored` permits. */
  private storedPermitsToWaitTime(stored: number, take: number): number {
    if (this.variant === 'bursty' || take <= 0 || this.stableIntervalUs === 0) return 0;
    let remaining = take;
    let micros = 0;
    const above = stored - this.thresholdPermits;
    if (above > 0) {
      const takeAbove = Math.min(above, remaining);
      const length = this.permitsToTime(above) + this.permitsToTime(above - takeAbove);
      micros = Math.trunc((takeAbove * length) / 2);
      remaining -= takeAbove;
    }
    if (remaining > 0) micros += Math.trunc(this.stableIntervalUs * remaining);
    return micros;
  }

  private permitsToTime(permits: number): number {
    return permits > 0 ? this.stableIntervalUs + permits * this.slope : this.stableIntervalUs;
  }
}

/** Stored permits kept in proportion when the maximum changes; `initial` when there was no maximum. */
function rescale(stored: number, oldMax: number, newMax: number, initial: number): number {
  if (oldMax === 0) return initial;
  if (stored === 0 || newMax === 0) return 0;
  if (newMax === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
  // Guava's order of operations, so rescaled values match it to the last bit.
  return Math.min(newMax, (stored * newMax) / oldMax);
}

/** Permits are costs (the one cost domain of `validateCost`), and a smooth limiter takes no 0. */
function checkPermits(permits: unknown): void {
  if (validateCost(permits, 'permits') === 0) {
    throw new FloodgateError(
      'ERR_INVALID_COST',
      `permits must be a finite number from ${MIN_COST} to ${MAX_COST}, got ${describeValue(permits)}`,
      { option: 'permits' },
    );
  }
}
