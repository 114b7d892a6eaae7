import { abortError, type Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { newLeaseId } from './lease-id.js';
import type { AcquireReply, LeaveReply, WaitReply } from './model.js';
import { localMs, type Permit } from './permit.js';
import type { PermitStore, PermitUnwatch, PermitWaitArgs } from './store.js';

/** Options of `permits.acquire`. */
export interface PermitAcquireOptions {
  /** The cost the permit holds: a whole number. @default 1 */
  cost?: number;
  /** Longest wait, ms, before rejecting with `ERR_TIMEOUT` (0: never wait). @default Infinity */
  timeoutMs?: number;
  /** Stops the wait with `ERR_ABORTED`. */
  signal?: AbortSignal;
}

/** A waiter's place lasts this many polls past its last ask: a waiter that crashed leaves after it. */
export const WAITER_POLLS = 3;

/** A permit store with the waiting operations. */
export type WaitingStore = PermitStore & Required<Pick<PermitStore, 'wait' | 'leave'>>;

/** What {@link waitInQueue} needs of the permits it waits for. */
export interface WaitContext<D> {
  readonly store: WaitingStore;
  readonly storageKey: string;
  readonly clock: Clock | undefined;
  readonly pollMs: number;
  /** Runs a store call, turning its failure into a store error. */
  call<R>(run: () => R | Promise<R>): Promise<R>;
  /** The arguments of one ask. */
  args(leaseId: string): PermitWaitArgs;
  /** The decision of a grant, with its permit. */
  granted(leaseId: string, reply: AcquireReply, sentMs: number): D;
}

/** Validates `timeoutMs` and `signal` before any store call. */
export function waitOptions(options: PermitAcquireOptions | undefined): {
  timeoutMs: number;
  signal: AbortSignal | undefined;
} {
  // Only an absent timeout means none (a null is refused like any other value that is not a number).
  const timeoutMs = options?.timeoutMs === undefined ? Number.POSITIVE_INFINITY : options.timeoutMs;
  if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs < 0) {
    throw invalid('ERR_INVALID_OPTION', 'timeoutMs', timeoutMs, 'a number of ms ≥ 0 (or Infinity)');
  }
  const signal = options?.signal;
  if (
    signal !== undefined &&
    (typeof signal !== 'object' ||
      signal === null ||
      typeof signal.aborted !== 'boolean' ||
      typeof signal.addEventListener !== 'function' ||
      typeof signal.removeEventListener !== 'function')
  ) {
    throw invalid('ERR_INVALID_OPTION', 'signal', signal, 'an AbortSignal');
  }
  return { timeoutMs, signal };
}

/**
 * The wait of one `acquire`: asks the store (which queues the waiter, or grants it), watches the key's
 * wakes, and asks again on each wake that names its ticket, or every `pollMs`, until granted, refused
 * (queue full), timed out or aborted. A wait that gives up leaves the queue (one store call) before it
 * rejects; if that call fails, its place expires after {@link WAITER_POLLS} polls.
 */
export async function waitInQueue<D extends { permit: Permit }>(
  c: WaitContext<D>,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<D> {
  // A function, not a narrowed field: the signal aborts while the wait runs.
  const aborted = (): boolean => signal?.aborted === true;
  if (signal !== undefined && aborted()) throw abortError(signal);
  const leaseId = newLeaseId();
  const startedMs = localMs(c.clock);
  let ticket = 0;
  let unwatch: PermitUnwatch | undefined;
  let watched = false;
  let woken = false;
  // The highest wake heard during an ask, before the waiter knew its ticket.
  let heard = 0;
  let wake: (() => void) | undefined;
  const onWake = (t: number) => {
    if (t > heard) heard = t;
    if (ticket > 0 && t >= ticket) {
      woken = true;
      wake?.();
    }
  };
  const onAbort = () => wake?.();
  signal?.addEventListener('abort', onAbort);
  let queued = false;
  try {
    // Joined before the first ask, a watch already in place hears every wake after it: no second ask.
    unwatch = c.store.watching?.(c.storageKey, onWake);
    watched = unwatch !== undefined;
    for (;;) {
      woken = false;
      heard = 0;
      const sentMs = localMs(c.clock);
      const reply: WaitReply = await c.call(() => c.store.wait(c.storageKey, c.args(leaseId)));
      if (reply.granted) {
        queued = false;
        const decision = c.granted(leaseId, reply, sentMs);
        if (signal !== undefined && aborted()) {
          // Aborted while the grant was on its way: nothing may be left behind.
          await decision.permit.release().catch(() => {});
          throw abortError(signal);
        }
        return decision;
      }
      if (reply.full) {
        throw new FloodgateError(
          'ERR_QUEUE_FULL',
          `the queue of this key holds maxQueue (${c.args(leaseId).maxQueue}) waiters`,
          { option: 'maxQueue' },
        );
      }
      queued = true;
      ticket = reply.ticket;
      // A wake that let this place in came while the ask was on its way.
      if (heard >= ticket) woken = true;
      const leftMs = timeoutMs - (localMs(c.clock) - startedMs);
      if (signal !== undefined && aborted()) throw abortError(signal);
      if (leftMs <= 0) throw timeout(timeoutMs);
      if (!watched && typeof c.store.watch === 'function') {
        watched = true;
        try {
          unwatch = await (c.store.watch as NonNullable<PermitStore['watch']>)(c.storageKey, onWake);
        } catch {
          // No notification (the subscriber is down): the wait goes on by polling.
        }
        // Ask again at once: a wake sent between the first ask and the watch is not lost.
        continue;
      }
      if (!woken) await nap(c.clock, Math.min(c.pollMs, leftMs), signal, (w) => (wake = w));
      wake = undefined;
      if (signal !== undefined && aborted()) throw abortError(signal);
    }
  } catch (error) {
    if (queued) {
      // Leave the queue before rejecting; a failed leave is left to the place's expiry.
      const args = c.args(leaseId);
      await Promise.resolve(
        c.store.leave(c.storageKey, { limit: args.limit, leaseId, nowUs: args.nowUs }) as LeaveReply,
      ).catch(() => {});
    }
    throw error;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    unwatch?.();
  }
}

function timeout(timeoutMs: number): FloodgateError {
  return new FloodgateError('ERR_TIMEOUT', `no permit within timeoutMs (${timeoutMs} ms)`, { option: 'timeoutMs' });
}

/** Sleeps up to `ms` (on the caller's clock when given), ending early when woken or aborted. */
function nap(
  clock: Clock | undefined,
  ms: number,
  signal: AbortSignal | undefined,
  setWake: (wake: () => void) => void,
): Promise<void> {
  if (signal?.aborted === true) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const stop = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = () => {
      if (timer !== undefined) clearTimeout(timer);
      stop.abort();
      resolve();
    };
    setWake(done);
    if (clock === undefined) {
      timer = setTimeout(done, Math.min(Math.ceil(ms), 2 ** 31 - 1));
    } else {
      clock.sleep(ms, stop.signal).then(done, () => {});
    }
  });
}
