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

/** Wall-clock time with microsecond resolution (monotonic within the process). */
export const systemClock: Clock = {
  nowUs: () => Math.round((origin + perf.now()) * 1000),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortError(signal));
        return;
      }
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortError(signal as AbortSignal));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};

export function abortError(signal: AbortSignal): FloodgateError {
  return new FloodgateError('ERR_ABORTED', 'the operation was aborted', { cause: signal.reason });
}
