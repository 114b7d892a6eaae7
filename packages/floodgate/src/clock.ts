import { FloodgateError, invalid } from './errors.js';

/**
 * A source of time in integer microseconds since the Unix epoch, and a way to wait on it.
 * Inject one to make time an argument: tests drive a {@link ManualClock}, production uses {@link systemClock}.
 */
export interface Clock {
  /** Current time, integer µs since the epoch. */
  nowUs(): number;
  /** Resolves after `ms` of this clock's time; rejects with `ERR_ABORTED` when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

// `performance` is a lazy getter on the global object: keep the object itself.
const perf = performance;
const origin = perf.timeOrigin;

/**
 * Node's monotonic clock in ns (`process.hrtime.bigint()`), read without allocating: the BigInt is
 * stored in a 64-bit cell and read back as two 32-bit words. A clock read is the largest part of an
 * in-process decision; this one is cheaper than `performance.now()` (which checks its receiver on every
 * call) and small enough to compile into the code that reads it. Undefined outside Node (the web page
 * bundles this module).
 */
const hrtimeNs: (() => bigint) | undefined =
  typeof globalThis.process?.hrtime?.bigint === 'function' ? globalThis.process.hrtime.bigint : undefined;
const cell = new BigUint64Array(1);
const words = new Uint32Array(cell.buffer);
/** Which word of the cell holds the high 32 bits (the platform's byte order). */
const HIGH = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0;

/**
 * Whole µs of a count of ns (exact below 2^53 µs: 285 years): ns = high·2^32 + low, and
 * 2^32 = 4 294 967 × 1000 + 296, so ⌊ns / 1000⌋ = high·4 294 967 + ⌊(high·296 + low) / 1000⌋, in doubles.
 */
export function nsToUs(ns: bigint): number {
  cell[0] = ns;
  const high = words[HIGH] as number;
  return high * 4_294_967 + Math.floor((high * 296 + (words[1 - HIGH] as number)) / 1000);
}

/** µs since the epoch minus µs of `hrtimeNs`: both clocks read once, at the same instant. */
const offsetUs = hrtimeNs === undefined ? 0 : Math.round((origin + perf.now()) * 1000) - nsToUs(hrtimeNs());

/** Longest delay a Node timer takes; longer ones fire after 1 ms instead (with a warning). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Wall-clock time with microsecond resolution (monotonic within the process). */
export const systemClock: Clock = {
  nowUs: hrtimeNs === undefined ? () => Math.round((origin + perf.now()) * 1000) : () => offsetUs + nsToUs(hrtimeNs()),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortError(signal));
        return;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortError(signal as AbortSignal));
      };
      // Long (or infinite) sleeps are chained timers, each within what a timer can hold. (The global
      // `performance` is read here, off the hot path, so fake timers in tests control it too.)
      const deadline = performance.now() + ms;
      const arm = (left: number) => {
        timer = setTimeout(
          () => {
            const rest = deadline - performance.now();
            if (rest > 0 && left > MAX_TIMER_MS) {
              arm(rest);
              return;
            }
            signal?.removeEventListener('abort', onAbort);
            resolve();
          },
          Math.min(Math.max(left, 0), MAX_TIMER_MS),
        );
      };
      // The listener first, the timer last: if either throws (a signal that is not an AbortSignal), the
      // promise rejects and no timer is left behind to fire into a broken signal.
      signal?.addEventListener('abort', onAbort, { once: true });
      arm(ms);
    }),
};

export function abortError(signal: AbortSignal): FloodgateError {
  return new FloodgateError('ERR_ABORTED', 'the operation was aborted', { cause: signal.reason });
}

/** Every store computes on whole µs: a custom clock's fraction is dropped, a broken clock refused. */
export function wholeClockUs(nowUs: number): number {
  if (Number.isInteger(nowUs)) return nowUs;
  if (!Number.isFinite(nowUs) || nowUs < 0 || nowUs > Number.MAX_SAFE_INTEGER) {
    throw invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of µs since the epoch');
  }
  return Math.floor(nowUs);
}
