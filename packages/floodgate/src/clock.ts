import { FloodgateError } from './errors.js';

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

/** Longest delay a Node timer takes; longer ones fire after 1 ms instead (with a warning). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Wall-clock time with microsecond resolution (monotonic within the process). */
export const systemClock: Clock = {
  nowUs: () => Math.round((origin + perf.now()) * 1000),
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
