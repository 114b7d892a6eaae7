import { abortError, type Clock } from '../clock.js';
import { describeValue, FloodgateError } from '../errors.js';

interface Sleeper {
  at: number;
  seq: number;
  resolve: () => void;
}

/** A clock that only moves when told to; sleepers wake, in order, as it passes their time. */
export interface ManualClock extends Clock {
  /** Current time in ms since the epoch (may be fractional). */
  nowMs(): number;
  /** Moves time forward by `ms` (fractions allowed, down to 1 µs), waking the sleepers it passes. */
  advance(ms: number): void;
  /** Moves time forward by `us` microseconds. */
  advanceUs(us: number): void;
  /** Jumps to an absolute time in ms since the epoch; never backwards. */
  set(ms: number): void;
  /** How many sleepers are waiting. */
  readonly pending: number;
  /** When the earliest sleeper wakes, µs; Infinity when none does. */
  readonly nextWakeUs: number;
}

/**
 * A manual clock for tests and simulations: no real time passes.
 *
 * @example
 * ```ts
 * const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
 * const limiter = createLimiter({ policies: [gcra({ limit: 5, periodMs: 60_000 })], clock });
 * clock.advance(12_000);
 * ```
 */
export function manualClock(options: { startMs?: number } = {}): ManualClock {
  if (typeof options !== 'object' || options === null) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `manualClock options must be an object, got ${describeValue(options)}`,
      {
        option: 'options',
      },
    );
  }
  const startMs = options.startMs ?? Date.UTC(2030, 0, 1);
  if (typeof startMs !== 'number' || !Number.isFinite(startMs) || startMs < 0) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `startMs must be a finite number ≥ 0, got ${describeValue(startMs)}`,
      {
        option: 'startMs',
      },
    );
  }
  let now = Math.round(startMs * 1000);
  let seq = 0;
  const sleepers: Sleeper[] = [];

  const wake = () => {
    sleepers.sort((a, b) => a.at - b.at || a.seq - b.seq);
    while (sleepers.length > 0 && (sleepers[0] as Sleeper).at <= now) {
      (sleepers.shift() as Sleeper).resolve();
    }
  };
  const moveTo = (us: number) => {
    if (!Number.isFinite(us) || us < now) {
      throw new FloodgateError('ERR_INVALID_OPTION', `a manual clock moves forward only, got ${describeValue(us)} µs`);
    }
    now = us;
    wake();
  };

  return {
    nowUs: () => now,
    nowMs: () => now / 1000,
    advance: (ms) => moveTo(now + Math.round(ms * 1000)),
    advanceUs: (us) => moveTo(now + Math.round(us)),
    set: (ms) => moveTo(Math.round(ms * 1000)),
    get pending() {
      return sleepers.length;
    },
    get nextWakeUs() {
      let next = Number.POSITIVE_INFINITY;
      for (const sleeper of sleepers) if (sleeper.at < next) next = sleeper.at;
      return next;
    },
    sleep(ms, signal) {
      return new Promise<void>((resolve, reject) => {
        if (signal?.aborted) {
          reject(abortError(signal));
          return;
        }
        // Like the system clock, a delay that is not a number (NaN) or not above 0 sleeps no time.
        const at = now + Math.max(0, Math.round(ms * 1000) || 0);
        const sleeper: Sleeper = {
          at,
          seq: seq++,
          resolve: () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          },
        };
        const onAbort = () => {
          const index = sleepers.indexOf(sleeper);
          if (index >= 0) sleepers.splice(index, 1);
          reject(abortError(signal as AbortSignal));
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        if (at <= now) sleeper.resolve();
        else sleepers.push(sleeper);
      });
    },
  };
}
