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

/** One key's state. */
export interface PermitState {
  readonly leases: Map<string, PermitLease>;
  /** The last fence granted (0 before the first). */
  fence: number;
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
}

/** What a refresh answers: the new expiry, or 0 when the lease was not live (never re-acquired). */
export interface RefreshReply {
  refreshed: boolean;
  expiresAtUs: number;
  nowUs: number;
}

/** What a release answers: whether this call ended a live lease. */
export interface ReleaseReply {
  released: boolean;
  nowUs: number;
}

export function emptyPermitState(): PermitState {
  return { leases: new Map(), fence: 0 };
}

/** Drops the leases that expired by `nowUs`. */
export function sweepLeases(state: PermitState, nowUs: number): void {
  for (const [id, lease] of state.leases) if (lease.expiresAtUs <= nowUs) state.leases.delete(id);
}

function inFlightOf(state: PermitState): number {
  let sum = 0;
  for (const lease of state.leases.values()) sum += lease.cost;
  return sum;
}

function lastExpiryUs(state: PermitState): number {
  let last = 0;
  for (const lease of state.leases.values()) if (lease.expiresAtUs > last) last = lease.expiresAtUs;
  return last;
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
  sweepLeases(state, nowUs);
  const inFlight = inFlightOf(state);
  if (inFlight + cost <= limit) {
    const expiresAtUs = nowUs + leaseUs;
    state.leases.set(leaseId, { cost, expiresAtUs });
    state.fence = Math.max(state.fence + 1, nowUs);
    const resetAfterUs = lastExpiryUs(state) - nowUs;
    return {
      granted: true,
      inFlight: inFlight + cost,
      fence: state.fence,
      expiresAtUs,
      nowUs,
      retryAfterUs: 0,
      resetAfterUs,
    };
  }
  // Leases in the order they run out (ties by id, as a Redis sorted set orders them): the first expiry
  // after which the rest leaves room for this cost.
  const byExpiry = [...state.leases].sort(
    ([a, x], [b, y]) => x.expiresAtUs - y.expiresAtUs || (a < b ? -1 : a > b ? 1 : 0),
  );
  let left = inFlight;
  let retryAfterUs = 0;
  for (const [, lease] of byExpiry) {
    left -= lease.cost;
    if (left + cost <= limit) {
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
    resetAfterUs: lastExpiryUs(state) - nowUs,
  };
}

/** Extends a live lease to now + `leaseUs` (never shortens it); a lease that expired stays gone. */
export function refreshPermit(state: PermitState, nowUs: number, leaseUs: number, leaseId: string): RefreshReply {
  sweepLeases(state, nowUs);
  const lease = state.leases.get(leaseId);
  if (lease === undefined) return { refreshed: false, expiresAtUs: 0, nowUs };
  lease.expiresAtUs = Math.max(lease.expiresAtUs, nowUs + leaseUs);
  return { refreshed: true, expiresAtUs: lease.expiresAtUs, nowUs };
}

/** Ends a live lease; true only for the call that ended it. */
export function releasePermit(state: PermitState, nowUs: number, leaseId: string): ReleaseReply {
  sweepLeases(state, nowUs);
  return { released: state.leases.delete(leaseId), nowUs };
}

/** True when the state can be forgotten without changing any answer: no live lease, the clock past its fence. */
export function isForgettable(state: PermitState, nowUs: number): boolean {
  sweepLeases(state, nowUs);
  return state.leases.size === 0 && state.fence < nowUs;
}
