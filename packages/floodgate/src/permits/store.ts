import type { AcquireReply, LeaveReply, RefreshReply, ReleaseReply, WaitReply } from './model.js';

/** The arguments of {@link PermitStore.acquire}. */
export interface PermitAcquireArgs {
  readonly limit: number;
  readonly leaseUs: number;
  /** A whole number from 1 to `limit`. */
  readonly cost: number;
  readonly leaseId: string;
  /** The caller's time, µs; absent: the store's own clock. */
  readonly nowUs?: number | undefined;
}

/** The arguments of {@link PermitStore.wait}. */
export interface PermitWaitArgs extends PermitAcquireArgs {
  /** Most waiters the key's queue holds; a new one beyond them is refused (`full`). */
  readonly maxQueue: number;
  /** How long the waiter keeps its place without asking again, µs (a crashed waiter leaves after it). */
  readonly waiterUs: number;
}

/** The arguments of {@link PermitStore.leave}. */
export interface PermitLeaveArgs {
  readonly limit: number;
  /** The waiter's id (the `leaseId` it waited with). */
  readonly leaseId: string;
  readonly nowUs?: number | undefined;
}

/** The arguments of {@link PermitStore.refresh}. */
export interface PermitRefreshArgs {
  /** The policy's limit, to tell waiters when leases that expired made room (absent: tell nobody). */
  readonly limit?: number | undefined;
  readonly leaseUs: number;
  readonly leaseId: string;
  readonly nowUs?: number | undefined;
}

/** The arguments of {@link PermitStore.release}. */
export interface PermitReleaseArgs {
  /** The policy's limit, to tell waiters what the release let in (absent: tell nobody). */
  readonly limit?: number | undefined;
  readonly leaseId: string;
  readonly nowUs?: number | undefined;
}

/**
 * Where concurrency permits live: each method is one atomic operation on one key's leases (`key` is the
 * storage key of one user key under one policy), which first sweeps the leases that expired.
 * `memoryPermitStore()` (floodgate), `redisPermitStore()` (floodgate/redis), `postgresPermitStore()`
 * (floodgate/postgres) and `sqlitePermitStore()` (floodgate/sqlite) implement it, and
 * one conformance suite (the repository's test/permits/permit-conformance.ts) holds them to the same answers.
 */
export interface PermitStore {
  readonly name: string;
  acquire(key: string, args: PermitAcquireArgs): AcquireReply | Promise<AcquireReply>;
  refresh(key: string, args: PermitRefreshArgs): RefreshReply | Promise<RefreshReply>;
  release(key: string, args: PermitReleaseArgs): ReleaseReply | Promise<ReleaseReply>;
  /**
   * Waiting (`permits.acquire`), optional: asks for a lease as the waiter `leaseId` in the key's queue
   * (model: waitPermit). A store without it cannot serve `acquire`.
   */
  wait?(key: string, args: PermitWaitArgs): WaitReply | Promise<WaitReply>;
  /** Takes a waiter out of the key's queue (model: leaveQueue). With `wait`. */
  leave?(key: string, args: PermitLeaveArgs): LeaveReply | Promise<LeaveReply>;
  /**
   * Calls `listener` with the ticket of every wake on `key` (each operation's `wake` > 0), from every
   * process the store can hear (Redis, PostgreSQL: any; SQLite: this one), until the returned function is
   * called; resolves once the watch is in place. Optional: without it waiters only poll.
   */
  watch?(key: string, listener: (ticket: number) => void): PermitUnwatch | Promise<PermitUnwatch>;
  /**
   * Adds `listener` to a watch of `key` already in place (its subscription confirmed), at once; undefined
   * when there is none. Optional, with `watch`: a waiter that joins before it first asks hears every wake
   * after its ask, so it need not ask twice.
   */
  watching?(key: string, listener: (ticket: number) => void): PermitUnwatch | undefined;
}

/** Ends a {@link PermitStore.watch}. */
export type PermitUnwatch = () => void;

/**
 * A permit store over a network connection (Redis, PostgreSQL): every operation answers a promise, it can
 * wait, and it watches a key's wakes when given its notification connection.
 */
export interface NetworkPermitStore extends PermitStore {
  acquire(key: string, args: PermitAcquireArgs): Promise<AcquireReply>;
  refresh(key: string, args: PermitRefreshArgs): Promise<RefreshReply>;
  release(key: string, args: PermitReleaseArgs): Promise<ReleaseReply>;
  wait(key: string, args: PermitWaitArgs): Promise<WaitReply>;
  leave(key: string, args: PermitLeaveArgs): Promise<LeaveReply>;
  watch?(key: string, listener: (ticket: number) => void): Promise<PermitUnwatch>;
  watching?(key: string, listener: (ticket: number) => void): PermitUnwatch | undefined;
}
