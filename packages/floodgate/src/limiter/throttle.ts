import { abortError, type Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { validateCost } from '../model/cost.js';
import type { Policy } from '../model/policy.js';
import { memoryStore } from '../stores/memory/memory-store.js';
import { gateWaits } from './acquire.js';
import { createLimiter, Limiter } from './limiter.js';

/** Options of {@link throttle}. Give a `limiter`, or `policies` for a private in-memory one. */
export interface ThrottleOptions<A extends unknown[]> {
  /** The limiter that spaces the calls (any store: calls from a whole fleet share it). */
  limiter?: Limiter;
  /** Policies of a private in-memory limiter, when no `limiter` is given. */
  policies?: Policy | readonly Policy[];
  /** Clock of that private limiter (tests, simulations). @default systemClock */
  clock?: Clock;
  /** The key calls are counted under, or a function of the call's arguments. @default 'throttle' */
  key?: string | ((...args: A) => string);
  /** What one call costs, or a function of its arguments (bytes, tokens, rows). @default 1 */
  cost?: number | ((...args: A) => number);
  /**
   * Most calls waiting for their turn. A call waits, and counts, from the moment it queues behind another
   * call on its key (even one still asking the store), or when it sleeps for capacity; only a call that is
   * first on its key and admitted at once never counts. A call that would wait while `maxQueue` calls wait
   * is rejected at once with `ERR_QUEUE_FULL` (when the first call on a key must sleep and the queue is
   * full, the newest call waiting on that key is rejected instead). `0`: run a call only if it is admitted
   * at once. @default 1000
   */
  maxQueue?: number;
  /** Longest wait of one call, in ms, before it rejects with `ERR_TIMEOUT`. @default Infinity */
  timeoutMs?: number;
  /** Aborting it rejects every waiting call and every later one with `ERR_ABORTED`. */
  signal?: AbortSignal;
}

/** A throttled function: same arguments, same result, called no faster than its limiter admits. */
export interface Throttled<A extends unknown[], R> {
  (...args: A): Promise<Awaited<R>>;
  /** Calls waiting for their turn now (behind another call on their key, or asleep for capacity). */
  readonly queued: number;
}

/**
 * Wraps an async function so its calls are spaced by a limiter: each call waits (first come, first
 * served per key) until admitted, then runs. The function's own result or error comes back unchanged.
 *
 * @example
 * ```ts
 * const embed = throttle(openai.embeddings.create, {
 *   policies: gcra({ limit: 3000, periodMs: 60_000 }),
 *   cost: (request) => request.input.length,
 *   maxQueue: 100,
 * });
 * const result = await embed({ input: texts });
 * ```
 */
export function throttle<A extends unknown[], R>(fn: (...args: A) => R, options: ThrottleOptions<A>): Throttled<A, R> {
  if (typeof fn !== 'function') throw invalid('ERR_INVALID_OPTION', 'fn', fn, 'a function');
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'throttle options', options, 'an object');
  }
  const limiter = throttleLimiter(options);
  const key = options.key ?? 'throttle';
  if (typeof key !== 'string' && typeof key !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'key', key, 'a string or a function of the arguments');
  }
  const cost = options.cost ?? 1;
  if (typeof cost !== 'number' && typeof cost !== 'function') {
    throw invalid('ERR_INVALID_COST', 'cost', cost, 'a number or a function of the arguments');
  }
  // A function's costs are checked per call, by the limiter.
  if (typeof cost === 'number') validateCost(cost);
  const maxQueue = options.maxQueue ?? 1000;
  if (typeof maxQueue !== 'number' || !(maxQueue >= 0) || (!Number.isSafeInteger(maxQueue) && maxQueue !== Infinity)) {
    throw invalid('ERR_INVALID_OPTION', 'maxQueue', maxQueue, 'a whole number ≥ 0 (Infinity allowed)');
  }
  const timeoutMs = options.timeoutMs;
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))) {
    throw invalid('ERR_INVALID_OPTION', 'timeoutMs', timeoutMs, 'a number of milliseconds ≥ 0');
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw invalid('ERR_INVALID_OPTION', 'signal', signal, 'an AbortSignal');
  }
  let queued = 0;

  async function throttled(this: unknown, ...args: A): Promise<Awaited<R>> {
    if (signal?.aborted) throw abortError(signal);
    const callKey = typeof key === 'function' ? key(...args) : key;
    const callCost = typeof cost === 'function' ? cost(...args) : cost;
    // The call joins the queue when it has to wait (behind another call on its key, or asleep for its
    // turn), and only if there is room; a call at the head of its key admitted at once never joins.
    let waiting = false;
    const gate = {
      enter: () => {
        if (waiting) return;
        if (queued >= maxQueue) {
          throw new FloodgateError(
            'ERR_QUEUE_FULL',
            `throttle queue is full: ${queued} calls already waiting (maxQueue ${maxQueue})`,
            { option: 'maxQueue' },
          );
        }
        queued++;
        waiting = true;
      },
      leave: () => {
        if (!waiting) return;
        queued--;
        waiting = false;
      },
    };
    try {
      await limiter.acquire(
        callKey,
        gateWaits(
          {
            cost: callCost,
            ...(timeoutMs === undefined ? {} : { timeoutMs }),
            ...(signal === undefined ? {} : { signal }),
          },
          gate,
        ),
      );
    } finally {
      gate.leave();
    }
    return (await fn.apply(this, args)) as Awaited<R>;
  }

  Object.defineProperty(throttled, 'queued', { get: () => queued, enumerable: true });
  Object.defineProperty(throttled, 'name', { value: `throttled ${fn.name || 'function'}` });
  return throttled as Throttled<A, R>;
}

function throttleLimiter(options: ThrottleOptions<never>): Limiter {
  if (options.limiter !== undefined) {
    if (!(options.limiter instanceof Limiter)) {
      throw invalid('ERR_INVALID_OPTION', 'limiter', options.limiter, 'a limiter from createLimiter()');
    }
    if (options.policies !== undefined || options.clock !== undefined) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        'give either a limiter, or policies (and a clock) for a private one, not both',
        { option: 'policies' },
      );
    }
    return options.limiter;
  }
  if (options.policies === undefined) {
    throw new FloodgateError('ERR_INVALID_OPTION', 'throttle needs a limiter or policies', { option: 'limiter' });
  }
  return createLimiter({
    store: memoryStore(),
    policies: options.policies,
    prefix: 'throttle',
    ...(options.clock === undefined ? {} : { clock: options.clock }),
  });
}
