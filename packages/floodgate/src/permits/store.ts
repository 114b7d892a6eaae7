import type { AcquireReply, RefreshReply, ReleaseReply } from './model.js';

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

/** The arguments of {@link PermitStore.refresh}. */
export interface PermitRefreshArgs {
  readonly leaseUs: number;
  readonly leaseId: string;
  readonly nowUs?: number | undefined;
}

/** The arguments of {@link PermitStore.release}. */
export interface PermitReleaseArgs {
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
}
