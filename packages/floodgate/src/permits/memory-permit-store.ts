import { type Clock, systemClock, wholeClockUs } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { checkOptionsObject, wholeOption } from '../stores/kit/options.js';
import { LocalWakes } from './local-wakes.js';
import {
  type AcquireReply,
  acquirePermit,
  emptyPermitState,
  isForgettable,
  type LeaveReply,
  leaveQueue,
  type PermitState,
  type RefreshReply,
  type ReleaseReply,
  refreshPermit,
  releasePermit,
  type WaitReply,
  waitPermit,
} from './model.js';
import type * as Port from './store.js';

/** Options of {@link memoryPermitStore}. */
export interface MemoryPermitStoreOptions {
  /** The store's clock, when the caller gives no time. @default systemClock */
  clock?: Clock;
  /**
   * Most keys held at once. A new key beyond them is refused with `ERR_STORE_FULL` (never by dropping a
   * key that holds leases, which would let its permits be granted twice). @default 100000
   */
  maxKeys?: number;
}

/** The in-process permit store: synchronous, exact, one process only. */
export interface MemoryPermitStore extends Port.PermitStore {
  readonly name: 'memory';
  acquire(key: string, args: Port.PermitAcquireArgs): AcquireReply;
  refresh(key: string, args: Port.PermitRefreshArgs): RefreshReply;
  release(key: string, args: Port.PermitReleaseArgs): ReleaseReply;
  wait(key: string, args: Port.PermitWaitArgs): WaitReply;
  leave(key: string, args: Port.PermitLeaveArgs): LeaveReply;
  watch(key: string, listener: (ticket: number) => void): Port.PermitUnwatch;
  watching(key: string, listener: (ticket: number) => void): Port.PermitUnwatch;
  /** How many keys the store holds now. */
  readonly size: number;
}

/**
 * Whether a key's state can be forgotten, read without sweeping it: every lease and waiter expired, the
 * clock past its fence. A sweep here would drop what a later call on that key must report as freed (its
 * `wake`), so a waiter would not be told of the room.
 */
function expiredWhole(state: PermitState, nowUs: number): boolean {
  if (state.fence >= nowUs) return false;
  for (const lease of state.leases.values()) if (lease.expiresAtUs > nowUs) return false;
  if (state.queue !== undefined)
    for (const waiter of state.queue.values()) if (waiter.expiresAtUs > nowUs) return false;
  return true;
}

/** Keys looked at for forgetting on each call: idle keys leave in a bounded number of calls. */
const SWEEP_PER_CALL = 2;

/**
 * An in-process store of concurrency permits, running the permit model directly: every call is a
 * synchronous update of one key's leases.
 *
 * @example
 * ```ts
 * const permits = createPermits({ store: memoryPermitStore(), policy: concurrency({ limit: 2, leaseMs: 30_000 }) });
 * ```
 */
export function memoryPermitStore(options: MemoryPermitStoreOptions = {}): MemoryPermitStore {
  checkOptionsObject(options, 'memoryPermitStore options');
  const clock = options.clock ?? systemClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'clock', options.clock, 'a Clock');
  }
  const maxKeys = wholeOption('maxKeys', options.maxKeys ?? 100_000, 1, undefined, 'a whole number ≥ 1');
  const states = new Map<string, PermitState>();
  let cursor = states.keys();

  const forgetSome = (nowUs: number) => {
    for (let i = 0; i < SWEEP_PER_CALL && states.size > 0; i++) {
      let next = cursor.next();
      if (next.done === true) {
        cursor = states.keys();
        next = cursor.next();
        if (next.done === true) return;
      }
      const state = states.get(next.value);
      if (state !== undefined && expiredWhole(state, nowUs)) states.delete(next.value);
    }
  };
  const stateOf = (key: string, nowUs: number, create: boolean): PermitState | undefined => {
    forgetSome(nowUs);
    let state = states.get(key);
    if (state === undefined && create) {
      if (states.size >= maxKeys) {
        throw new FloodgateError('ERR_STORE_FULL', `the memory permit store holds maxKeys (${maxKeys}) keys`, {
          option: 'maxKeys',
        });
      }
      state = emptyPermitState();
      states.set(key, state);
    }
    return state;
  };
  const wakes = new LocalWakes();
  const settle = <R extends { wake?: number }>(key: string, state: PermitState, nowUs: number, reply: R): R => {
    if (isForgettable(state, nowUs)) states.delete(key);
    return wakes.tell(key, reply);
  };
  const now = (nowUs: number | undefined) => wholeClockUs(nowUs ?? clock.nowUs());

  return {
    name: 'memory',
    get size() {
      return states.size;
    },
    acquire(key, args) {
      const nowUs = now(args.nowUs);
      const state = stateOf(key, nowUs, true) as PermitState;
      return settle(key, state, nowUs, acquirePermit(state, nowUs, args.limit, args.leaseUs, args.cost, args.leaseId));
    },
    refresh(key, args) {
      const nowUs = now(args.nowUs);
      const state = stateOf(key, nowUs, false);
      if (state === undefined) return { refreshed: false, expiresAtUs: 0, nowUs, wake: 0 };
      return settle(key, state, nowUs, refreshPermit(state, nowUs, args.leaseUs, args.leaseId, args.limit));
    },
    release(key, args) {
      const nowUs = now(args.nowUs);
      const state = stateOf(key, nowUs, false);
      if (state === undefined) return { released: false, nowUs, wake: 0 };
      return settle(key, state, nowUs, releasePermit(state, nowUs, args.leaseId, args.limit));
    },
    wait(key, a) {
      const nowUs = now(a.nowUs);
      const state = stateOf(key, nowUs, true) as PermitState;
      const reply = waitPermit(state, nowUs, a.limit, a.leaseUs, a.cost, a.leaseId, a.maxQueue, a.waiterUs);
      return settle(key, state, nowUs, reply);
    },
    leave(key, args) {
      const nowUs = now(args.nowUs);
      const state = stateOf(key, nowUs, false);
      if (state === undefined) return { left: false, nowUs, wake: 0 };
      return settle(key, state, nowUs, leaveQueue(state, nowUs, args.limit, args.leaseId));
    },
    watch(key, listener) {
      return wakes.watch(key, listener);
    },
    // A watch here is in place as soon as it is made.
    watching(key, listener) {
      return wakes.watch(key, listener);
    },
  };
}
