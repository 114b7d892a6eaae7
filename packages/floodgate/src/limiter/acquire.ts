import { abortError, type Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { validateKey } from '../keys.js';
import { compilePolicy } from '../model/compile.js';
import { validateCost } from '../model/cost.js';
import type { Decision } from '../model/decision.js';
import { exceedsCapacity } from '../model/kinds.js';
import type { Policy } from '../model/policy.js';
import type { Limiter } from './limiter.js';
import { normalizePolicies } from './validation.js';

/** Options of `limiter.acquire`. */
export interface AcquireOptions {
  /** What the call consumes once admitted. @default 1 */
  cost?: number;
  /** Policies for this call instead of the limiter's. */
  policies?: Policy | readonly Policy[];
  /** Longest wait, in ms, before rejecting with `ERR_TIMEOUT`. @default Infinity */
  timeoutMs?: number;
  /** Stops the wait with `ERR_ABORTED`. */
  signal?: AbortSignal;
  /**
   * Books the call's slot ahead in one store call (a reservation, `maxDelayMs` up to the time left) and
   * sleeps until it comes, instead of sleeping until capacity frees and asking again: one round trip per
   * call, and a fleet's calls come out evenly spaced. Meter policies only (GCRA, continuous token
   * bucket, leaky bucket). An abort cancels the booking, which gives back what the policies can: all of
   * it unless a later call was booked behind this one. @default false
   */
  reserve?: boolean;
}

/**
 * Waiters of one limiter, per key: each waiter holds the key until it is admitted or gives up, so a
 * later (even smaller) call never overtakes an earlier one in this process.
 */
interface Waiter {
  /** Set while the waiter sleeps for its turn; called when it reaches the head of the queue. */
  wake: (() => void) | undefined;
  /** Set while the waiter sleeps for its turn; ends that sleep with an error (its gate refused it). */
  refuse: ((error: unknown) => void) | undefined;
  /** The call's gate, if any, and whether it let the call wait. */
  gate: WaitGate | undefined;
  gated: boolean;
}

/** The acquire queue of one key: its waiters, in arrival order; the first one holds the key. */
type AcquireQueue = Waiter[];

const queues = new WeakMap<Limiter, Map<string, AcquireQueue>>();

/**
 * Counts a call that waits: behind another call on its key (from the moment it arrives), or asleep for
 * capacity or for its booked slot. Only a call at the head of its key that is admitted at once never
 * waits. `enter` may throw to refuse the wait; `leave` takes back a call counted by `enter` that is
 * refused afterwards (so its room can go to an earlier call). `throttle` counts its queue with it.
 */
export interface WaitGate {
  enter(): void;
  leave(): void;
}

/** Gates of calls in flight, keyed by their options object (an internal channel: no public option). */
const gates = new WeakMap<object, WaitGate>();

/** Runs `gate` before each wait of the acquire call made with exactly this `options` object. */
export function gateWaits(options: AcquireOptions, gate: WaitGate): AcquireOptions {
  gates.set(options, gate);
  return options;
}

/** The shortest pause between two tries, so a store that answers "retry in 0 ms" cannot spin. */
const MIN_RETRY_MS = 1;

/** The longest booking ahead a reservation may ask for (the limiter's bound on `maxDelayMs`). */
const MAX_BOOKING_MS = 2 ** 40;

/**
 * Waits until `limiter` admits the call, then resolves to the admitting decision. Sleeps exactly as long
 * as the store's `retryAfterMs` says between tries (no polling), on `clock`. A timeout or an abort
 * rejects and consumes nothing; so does a cost that can never fit, at once.
 */
export async function acquire(
  limiter: Limiter,
  clock: Clock,
  key: string,
  options: AcquireOptions = {},
): Promise<Decision> {
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'options', options, 'an object');
  }
  validateKey(key);
  const cost = options.cost === undefined ? 1 : validateCost(options.cost);
  const timeoutMs = options.timeoutMs ?? Number.POSITIVE_INFINITY;
  if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs < 0) {
    throw invalid('ERR_INVALID_OPTION', 'timeoutMs', timeoutMs, 'a number of milliseconds ≥ 0 (Infinity allowed)');
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw invalid('ERR_INVALID_OPTION', 'signal', signal, 'an AbortSignal');
  }
  const policies = options.policies === undefined ? limiter.policies : normalizePolicies(options.policies, 'policies');
  rejectImpossible(policies, cost);
  if (signal?.aborted) throw abortError(signal);

  const reserve = options.reserve ?? false;
  if (typeof reserve !== 'boolean') throw invalid('ERR_INVALID_OPTION', 'reserve', reserve, 'a boolean');

  const deadlineUs = clock.nowUs() + timeoutMs * 1000;
  const callOptions = options.policies === undefined ? { cost } : { cost, policies: options.policies };
  const byKey = queuesOf(limiter);
  let queue = byKey.get(key);
  if (queue === undefined) {
    queue = [];
    byKey.set(key, queue);
  }
  const gate = gates.get(options);
  const me: Waiter = { wake: undefined, refuse: undefined, gate, gated: false };
  queue.push(me);
  let decision: Decision;
  try {
    if (queue[0] !== me) {
      passGate(me);
      await waitForTurn(me, clock, deadlineUs, timeoutMs, signal);
    }
    for (;;) {
      const leftMs = (deadlineUs - clock.nowUs()) / 1000;
      // A timer that fired late leaves the deadline behind: then only a call admitted at once may pass
      // (as without `reserve`), and a denial below is a timeout.
      decision = await limiter.limit(
        key,
        reserve
          ? { ...callOptions, maxDelayMs: Math.max(0, Math.min(Math.floor(leftMs), MAX_BOOKING_MS)) }
          : callOptions,
      );
      if (decision.allowed) break;
      if (decision.reason === 'exceeds-capacity') throw impossible(cost, decision.policy);
      const waitMs = Math.max(MIN_RETRY_MS, decision.retryAfterMs);
      // The call cannot pass before the deadline (nothing but a reset frees capacity sooner): fail now.
      // Booking ahead, a denial on the limit itself means the slot lies beyond the deadline.
      if (waitMs > leftMs || (reserve && decision.reason === 'limit')) throw timeout(timeoutMs, decision);
      if (signal?.aborted) throw abortError(signal);
      startsWaiting(queue, me);
      await clock.sleep(waitMs, signal);
    }
  } finally {
    // Admitted or given up, the waiter leaves; if it held the key, the next one gets it. (An admitted
    // call hands the key on at once: its slot is booked, the next may book behind it.)
    leave(byKey, key, queue, me);
  }
  const delayMs = decision.delayMs ?? 0;
  if (delayMs > 0) {
    await untilDue(limiter, clock, key, decision, delayMs, deadlineUs, timeoutMs, signal, options, gate);
  }
  return decision;
}

/**
 * Sleeps until a booked call (a reservation, or a leaky bucket in queue mode) may proceed. Giving up
 * (abort, or a queue delay past the deadline) cancels the booking first.
 */
async function untilDue(
  limiter: Limiter,
  clock: Clock,
  key: string,
  decision: Decision,
  delayMs: number,
  deadlineUs: number,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  options: AcquireOptions,
  gate: WaitGate | undefined,
): Promise<void> {
  const giveBack = async () => {
    try {
      await limiter.cancel(key, decision, options.policies === undefined ? undefined : { policies: options.policies });
    } catch {
      // The booking stays (the store is unreachable); the caller still gets the error that stopped it.
    }
  };
  if (delayMs > (deadlineUs - clock.nowUs()) / 1000) {
    await giveBack();
    throw new FloodgateError('ERR_TIMEOUT', `not admitted within ${timeoutMs} ms: queued for ${delayMs} ms`, {
      option: 'timeoutMs',
    });
  }
  try {
    gate?.enter();
    await clock.sleep(delayMs, signal);
  } catch (error) {
    await giveBack();
    throw error;
  }
}

/** Runs a waiter's gate once (it throws when the wait is refused). */
function passGate(w: Waiter): void {
  if (w.gated) return;
  w.gate?.enter();
  w.gated = true;
}

/**
 * The head of an acquire queue goes to sleep: it waits now, and counts from here (the calls behind it already
 * count, from their arrival). When its gate has no room, the newest counted waiter behind it on the key
 * gives its room up (it is refused), so the earlier call keeps its turn; with none, the head is refused.
 */
function startsWaiting(queue: AcquireQueue, me: Waiter): void {
  if (me.gated || me.gate === undefined) return;
  try {
    passGate(me);
    return;
  } catch (error) {
    for (let i = queue.length - 1; i > 0; i--) {
      const w = queue[i] as Waiter;
      if (!w.gated || w.gate === undefined || w.refuse === undefined) continue;
      w.gated = false;
      w.gate.leave();
      w.refuse(error);
      break;
    }
    passGate(me);
  }
}

/** Sleeps until the waiters ahead on the key are done, bounded by the deadline and the signal. */
async function waitForTurn(
  me: Waiter,
  clock: Clock,
  deadlineUs: number,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const turn = new Promise<'turn'>((resolve, reject) => {
      me.wake = () => resolve('turn');
      me.refuse = reject;
    });
    const timer = clock.sleep((deadlineUs - clock.nowUs()) / 1000, stop.signal).then(
      () => 'timeout' as const,
      () => 'stopped' as const,
    );
    const outcome = await Promise.race([turn, timer]);
    if (outcome === 'turn') return;
    if (signal?.aborted) throw abortError(signal);
    throw new FloodgateError('ERR_TIMEOUT', `not admitted within ${timeoutMs} ms: calls ahead still waiting`, {
      option: 'timeoutMs',
    });
  } finally {
    me.wake = undefined;
    me.refuse = undefined;
    signal?.removeEventListener('abort', onAbort);
    stop.abort();
  }
}

function queuesOf(limiter: Limiter): Map<string, AcquireQueue> {
  let byKey = queues.get(limiter);
  if (byKey === undefined) {
    byKey = new Map();
    queues.set(limiter, byKey);
  }
  return byKey;
}

/** Takes a waiter out of its acquire queue; when it held the key, wakes the next one. */
function leave(byKey: Map<string, AcquireQueue>, key: string, queue: AcquireQueue, me: Waiter): void {
  const index = queue.indexOf(me);
  if (index === 0) {
    queue.shift();
    queue[0]?.wake?.();
  } else if (index > 0) {
    queue.splice(index, 1);
  }
  if (queue.length === 0) byKey.delete(key);
}

/** A cost no policy can ever admit is refused before waiting, by the model's own test, without the store. */
function rejectImpossible(policies: readonly Policy[], cost: number): void {
  for (const policy of policies) {
    const c = compilePolicy(policy);
    if (exceedsCapacity(c, cost)) throw impossible(cost, c.name);
  }
}

function impossible(cost: number, policy: string): FloodgateError {
  return new FloodgateError(
    'ERR_INVALID_COST',
    `cost ${cost} can never be admitted: it exceeds what policy ${JSON.stringify(policy)} admits at once`,
    { option: 'cost' },
  );
}

function timeout(timeoutMs: number, decision: Decision): FloodgateError {
  return new FloodgateError(
    'ERR_TIMEOUT',
    `not admitted within ${timeoutMs} ms: policy ${JSON.stringify(decision.policy)} asks to retry in ${decision.retryAfterMs} ms`,
    { option: 'timeoutMs' },
  );
}
