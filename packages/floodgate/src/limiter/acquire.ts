import { abortError, type Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { validateKey } from '../keys.js';
import { compilePolicy } from '../model/compile.js';
import { decide } from '../model/decide.js';
import type { Decision } from '../model/decision.js';
import type { Policy } from '../model/policy.js';
import { emptyEvaluation } from '../model/types.js';
import { type Limiter, normalizePolicies, validateCost } from './limiter.js';

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
interface Lane {
  tail: Promise<void>;
  waiters: number;
}

const lanes = new WeakMap<Limiter, Map<string, Lane>>();

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
  const lane = joinLane(limiter, key);
  let release!: () => void;
  const mine = new Promise<void>((resolve) => {
    release = resolve;
  });
  const previous = lane.tail;
  const alone = lane.waiters === 0;
  lane.tail = mine;
  lane.waiters++;
  let turn = false;
  let decision: Decision;
  try {
    if (!alone) await waitForTurn(previous, clock, deadlineUs, timeoutMs, signal);
    turn = true;
    for (;;) {
      const leftMs = (deadlineUs - clock.nowUs()) / 1000;
      decision = await limiter.limit(
        key,
        reserve ? { ...callOptions, maxDelayMs: Math.min(Math.floor(leftMs), MAX_BOOKING_MS) } : callOptions,
      );
      if (decision.allowed) break;
      if (decision.reason === 'exceeds-capacity') throw impossible(cost, decision.policy);
      const waitMs = Math.max(MIN_RETRY_MS, decision.retryAfterMs);
      // The call cannot pass before the deadline (nothing but a reset frees capacity sooner): fail now.
      // Booking ahead, a denial on the limit itself means the slot lies beyond the deadline.
      if (waitMs > leftMs || (reserve && decision.reason === 'limit')) throw timeout(timeoutMs, decision);
      if (signal?.aborted) throw abortError(signal);
      await clock.sleep(waitMs, signal);
    }
  } finally {
    // A waiter that gave up before its turn hands the key on only once the ones before it are done.
    // One that was admitted hands it on at once: its slot is booked, the next may book behind it.
    if (turn) release();
    else void previous.then(release);
    void mine.then(() => leaveLane(limiter, key, lane));
  }
  const delayMs = decision.delayMs ?? 0;
  if (delayMs > 0) await untilDue(limiter, clock, key, decision, delayMs, deadlineUs, timeoutMs, signal, options);
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
    await clock.sleep(delayMs, signal);
  } catch (error) {
    await giveBack();
    throw error;
  }
}

/** Waits for the waiters ahead on the key, bounded by the deadline and the signal. */
async function waitForTurn(
  previous: Promise<void>,
  clock: Clock,
  deadlineUs: number,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const leftMs = (deadlineUs - clock.nowUs()) / 1000;
    const timer = clock.sleep(leftMs, stop.signal).then(
      () => 'timeout' as const,
      () => 'stopped' as const,
    );
    const outcome = await Promise.race([previous.then(() => 'turn' as const), timer]);
    if (outcome === 'turn') return;
    if (signal?.aborted) throw abortError(signal);
    if (outcome === 'timeout') {
      throw new FloodgateError('ERR_TIMEOUT', `not admitted within ${timeoutMs} ms: calls ahead still waiting`, {
        option: 'timeoutMs',
      });
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    stop.abort();
  }
}

function joinLane(limiter: Limiter, key: string): Lane {
  let byKey = lanes.get(limiter);
  if (byKey === undefined) {
    byKey = new Map();
    lanes.set(limiter, byKey);
  }
  let lane = byKey.get(key);
  if (lane === undefined) {
    lane = { tail: Promise.resolve(), waiters: 0 };
    byKey.set(key, lane);
  }
  return lane;
}

function leaveLane(limiter: Limiter, key: string, lane: Lane): void {
  lane.waiters--;
  if (lane.waiters === 0) lanes.get(limiter)?.delete(key);
}

/** A cost no policy can ever admit is refused before waiting, by the model, without the store. */
function rejectImpossible(policies: readonly Policy[], cost: number): void {
  if (policies.length === 0) return; // the limiter reports the missing policies itself
  const compiled = policies.map(compilePolicy);
  const evaluations = compiled.map(() => emptyEvaluation());
  decide(compiled, [], 0, cost, { commit: false }, evaluations);
  const index = evaluations.findIndex((e) => e.reason === 'exceeds-capacity');
  if (index >= 0) throw impossible(cost, (compiled[index] as { name: string }).name);
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
