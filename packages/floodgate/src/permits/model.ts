/**
 * The permit model: pure and synchronous, time an argument (integer µs on the store's clock). The memory
 * permit store runs it as it is; the Redis scripts (stores/redis/permits-lua.ts) are its port, and a
 * randomized comparison keeps them equal.
 *
 * A key's state is its live leases (id → cost and expiry) and its last fence. What is in flight is the
 * sum of the costs of the live leases, derived from them on every call: there is no counter to drift.
 * Every operation first sweeps the leases that expired (expiry ≤ now), in the same atomic step.
 */

/** One lease: a permit of `cost` held until `expiresAtUs` (exclusive) unless refreshed or released. */
export interface PermitLease {
  cost: number;
  expiresAtUs: number;
}

/**
 * One waiter in a key's queue: it asked for `cost`, holds its place (`ticket`, increasing in arrival
 * order) until `expiresAtUs` unless it asks again (each ask extends it), and is granted when it and every
 * waiter ahead of it fit beside the leases.
 */
export interface PermitWaiter {
  cost: number;
  ticket: number;
  expiresAtUs: number;
}

/** One key's state. */
export interface PermitState {
  readonly leases: Map<string, PermitLease>;
  /** The last fence granted (0 before the first). */
  fence: number;
  /**
   * The waiters, in ticket order (a Map keeps insertion order; tickets only grow). Absent in a store
   * that does not wait (no waiter then).
   */
  queue?: Map<string, PermitWaiter>;
}

const NO_WAITERS: ReadonlyMap<string, PermitWaiter> = new Map();

function waitersOf(state: PermitState): ReadonlyMap<string, PermitWaiter> {
  return state.queue ?? NO_WAITERS;
}

/** What an acquire answers, in µs on the store's clock. */
export interface AcquireReply {
  granted: boolean;
  /** Cost in flight after the call. */
  inFlight: number;
  /** The grant's fence; 0 when refused. */
  fence: number;
  /** When the granted lease expires; 0 when refused. */
  expiresAtUs: number;
  /** The store's time of the decision. */
  nowUs: number;
  /** When refused: until enough leases run out for this cost, if none is released first. 0 when granted. */
  retryAfterUs: number;
  /** Until every lease now live has run out (0 when none is). */
  resetAfterUs: number;
  /** {@link Wake}: the last ticket of the waiters now free to claim a grant, or 0 (absent: 0). */
  wake?: number;
}

/**
 * Every operation answers `wake`: when it freed room (a release, a waiter leaving, leases or waiters that
 * expired), the ticket of the last waiter of the longest head of the queue that now fits, so the store
 * tells those waiters (Redis: a PUBLISH of the ticket); 0 when there is nobody new to tell.
 */
export type Wake = number;

/** What a refresh answers: the new expiry, or 0 when the lease was not live (never re-acquired). */
export interface RefreshReply {
  refreshed: boolean;
  expiresAtUs: number;
  nowUs: number;
  wake?: Wake;
}

/** What a release answers: whether this call ended a live lease. */
export interface ReleaseReply {
  released: boolean;
  nowUs: number;
  wake?: Wake;
}

/**
 * What a wait answers: the grant (fields of {@link AcquireReply}), or the waiter's place (`queued`,
 * `ticket`, `ahead`: the cost queued ahead of it), or `full`: the queue held `maxQueue` waiters.
 */
export interface WaitReply extends AcquireReply {
  queued: boolean;
  full: boolean;
  ticket: number;
  ahead: number;
}

/** What a leave answers: whether the waiter was still queued. */
export interface LeaveReply {
  left: boolean;
  nowUs: number;
  wake: Wake;
}

export function emptyPermitState(): PermitState {
  return { leases: new Map(), fence: 0, queue: new Map() };
}

/** Drops the leases and the waiters that expired by `nowUs`; true when it dropped any. */
export function sweepLeases(state: PermitState, nowUs: number): boolean {
  let swept = false;
  for (const [id, lease] of state.leases) {
    if (lease.expiresAtUs <= nowUs) {
      state.leases.delete(id);
      swept = true;
    }
  }
  const queue = state.queue;
  if (queue !== undefined) {
    for (const [id, waiter] of queue) {
      if (waiter.expiresAtUs <= nowUs) {
        queue.delete(id);
        swept = true;
      }
    }
  }
  return swept;
}

/**
 * The cost queued ahead of `waiterId` (all of the queue when it is not queued), summing no further than
 * `cap`: the walk stops once the sum passes it, so it reads at most `cap` + 1 waiters (each costs ≥ 1).
 */
function costAhead(state: PermitState, waiterId: string | undefined, cap: number): number {
  let sum = 0;
  for (const [id, waiter] of waitersOf(state)) {
    if (id === waiterId || sum > cap) break;
    sum += waiter.cost;
  }
  return sum;
}

/** The ticket of the last waiter of the longest head of the queue that fits beside the leases; 0 when none. */
function fittingTicket(state: PermitState, limit: number): number {
  let sum = inFlightOf(state);
  let ticket = 0;
  for (const waiter of waitersOf(state).values()) {
    sum += waiter.cost;
    if (sum > limit) break;
    ticket = waiter.ticket;
  }
  return ticket;
}

function wakeOf(state: PermitState, limit: number, freed: boolean): Wake {
  return freed && waitersOf(state).size > 0 ? fittingTicket(state, limit) : 0;
}

function inFlightOf(state: PermitState): number {
  let sum = 0;
  for (const lease of state.leases.values()) sum += lease.cost;
  return sum;
}

/** Until every live lease has run out: 0 when none is live. */
function resetAfterUs(state: PermitState, nowUs: number): number {
  let last = 0;
  for (const lease of state.leases.values()) if (lease.expiresAtUs > last) last = lease.expiresAtUs;
  return last === 0 ? 0 : last - nowUs;
}

/**
 * Grants a lease of `cost` (a whole number from 1 to `limit`) when the cost in flight leaves room for it.
 * The fence is max(last fence + 1, now): it strictly increases while the state lives, and stays above
 * every earlier fence after the state expired (its expiry waits until the clock passed the last fence).
 */
export function acquirePermit(
  state: PermitState,
  nowUs: number,
  limit: number,
  leaseUs: number,
  cost: number,
  leaseId: string,
): AcquireReply {
  const freed = sweepLeases(state, nowUs);
  const inFlight = inFlightOf(state);
  // A call that does not wait goes behind every waiter: it passes only if they all fit as well.
  const queued = costAhead(state, undefined, limit - inFlight - cost);
  if (inFlight + queued + cost <= limit) {
    // The waiters were ahead of it and fit as well: tell them if the sweep made their room.
    return grant(state, nowUs, leaseUs, cost, leaseId, inFlight, wakeOf(state, limit, freed));
  }
  // Leases in the order they run out (ties by id, as a Redis sorted set orders them): the first expiry
  // after which the rest leaves room for this cost (and the cost queued ahead).
  const byExpiry = [...state.leases].sort(
    ([a, x], [b, y]) => x.expiresAtUs - y.expiresAtUs || (a < b ? -1 : a > b ? 1 : 0),
  );
  let left = inFlight;
  let retryAfterUs = 0;
  for (const [, lease] of byExpiry) {
    left -= lease.cost;
    if (left + queued + cost <= limit) {
      retryAfterUs = lease.expiresAtUs - nowUs;
      break;
    }
  }
  return {
    granted: false,
    inFlight,
    fence: 0,
    expiresAtUs: 0,
    nowUs,
    retryAfterUs,
    resetAfterUs: resetAfterUs(state, nowUs),
    wake: wakeOf(state, limit, freed),
  };
}

function grant(
  state: PermitState,
  nowUs: number,
  leaseUs: number,
  cost: number,
  leaseId: string,
  inFlight: number,
  wake: Wake,
): AcquireReply {
  const expiresAtUs = nowUs + leaseUs;
  state.leases.set(leaseId, { cost, expiresAtUs });
  state.fence = Math.max(state.fence + 1, nowUs);
  return {
    granted: true,
    inFlight: inFlight + cost,
    fence: state.fence,
    expiresAtUs,
    nowUs,
    retryAfterUs: 0,
    resetAfterUs: resetAfterUs(state, nowUs),
    wake,
  };
}

/**
 * Waits for a lease of `cost` in the key's queue (model of `permits.acquire`): `waiterId` is also the id
 * of the lease it is granted. Not queued yet: granted at once when the queue is empty and the cost fits,
 * refused (`full`) when `maxQueue` waiters wait, queued at the tail otherwise. Queued: its place is kept
 * for `waiterUs` more, and it is granted (and leaves the queue) once it and every waiter ahead of it fit
 * beside the leases: first come, first served, and a large cost at the head holds back the small ones
 * behind it. Reads at most `limit` + 1 waiters (each costs ≥ 1) besides the sweep.
 */
export function waitPermit(
  state: PermitState,
  nowUs: number,
  limit: number,
  leaseUs: number,
  cost: number,
  waiterId: string,
  maxQueue: number,
  waiterUs: number,
): WaitReply {
  const freed = sweepLeases(state, nowUs);
  const inFlight = inFlightOf(state);
  state.queue ??= new Map();
  const queue = state.queue;
  const me = queue.get(waiterId);
  const ahead = costAhead(state, waiterId, limit - inFlight - cost);
  const base = { fence: 0, expiresAtUs: 0, nowUs, retryAfterUs: 0, resetAfterUs: resetAfterUs(state, nowUs) };
  if (inFlight + ahead + cost <= limit) {
    queue.delete(waiterId);
    // Those behind it fit no less than before: only what the sweep freed is news to them.
    const reply = grant(state, nowUs, leaseUs, cost, waiterId, inFlight, 0);
    reply.wake = wakeOf(state, limit, freed);
    return { ...reply, queued: false, full: false, ticket: me?.ticket ?? 0, ahead };
  }
  let ticket: number;
  if (me !== undefined) {
    me.expiresAtUs = nowUs + waiterUs;
    ticket = me.ticket;
  } else if (queue.size >= maxQueue) {
    const wake = wakeOf(state, limit, freed);
    return { ...base, granted: false, inFlight, wake, queued: false, full: true, ticket: 0, ahead };
  } else {
    let last = 0;
    for (const waiter of queue.values()) last = waiter.ticket;
    ticket = last + 1;
    queue.set(waiterId, { cost, ticket, expiresAtUs: nowUs + waiterUs });
  }
  const wake = wakeOf(state, limit, freed);
  return { ...base, granted: false, inFlight, wake, queued: true, full: false, ticket, ahead };
}

/** Takes a waiter out of the queue (a wait that timed out or was aborted). */
export function leaveQueue(state: PermitState, nowUs: number, limit: number, waiterId: string): LeaveReply {
  const swept = sweepLeases(state, nowUs);
  const left = state.queue?.delete(waiterId) === true;
  return { left, nowUs, wake: wakeOf(state, limit, swept || left) };
}

/** Extends a live lease to now + `leaseUs` (never shortens it); a lease that expired stays gone. */
export function refreshPermit(
  state: PermitState,
  nowUs: number,
  leaseUs: number,
  leaseId: string,
  /** The policy's limit, to tell waiters what the sweep let in (0: tell nobody). */
  limit = 0,
): RefreshReply {
  const wake = wakeOf(state, limit, sweepLeases(state, nowUs));
  const lease = state.leases.get(leaseId);
  if (lease === undefined) return { refreshed: false, expiresAtUs: 0, nowUs, wake };
  lease.expiresAtUs = Math.max(lease.expiresAtUs, nowUs + leaseUs);
  return { refreshed: true, expiresAtUs: lease.expiresAtUs, nowUs, wake };
}

/** Ends a live lease; true only for the call that ended it. */
export function releasePermit(state: PermitState, nowUs: number, leaseId: string, limit = 0): ReleaseReply {
  const swept = sweepLeases(state, nowUs);
  const released = state.leases.delete(leaseId);
  return { released, nowUs, wake: wakeOf(state, limit, swept || released) };
}

/**
 * True when the state can be forgotten without changing any answer: no live lease, nobody waiting, the
 * clock past its fence.
 */
export function isForgettable(state: PermitState, nowUs: number): boolean {
  sweepLeases(state, nowUs);
  return state.leases.size === 0 && waitersOf(state).size === 0 && state.fence < nowUs;
}
