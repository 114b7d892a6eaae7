import { invalid } from '../../errors.js';
import type { AcquireReply, ReleaseReply } from '../../permits/model.js';
import type { PermitAcquireArgs, PermitReleaseArgs, PermitStore } from '../../permits/store.js';
import { checkPermitCall } from '../../permits/store-args.js';
import type { HeldResult, PermitClaim, StoreRequest, StoreResult } from '../store.js';
import { recordKey } from './keys.js';

/**
 * Checks a claim of `Store.decideWithPermit` before any store call, alike on every store: its arguments
 * as the permit store's acquire checks them, and its key a permit storage key of the request's user key
 * under its prefix (`<prefix>:{<encoded key>}:<policy name>`: on Redis Cluster, the request's slot).
 * Each refusal is a FloodgateError naming the argument.
 */
export function checkClaim(request: StoreRequest, claim: PermitClaim): void {
  if (typeof claim !== 'object' || claim === null) throw invalid('ERR_INVALID_OPTION', 'claim', claim, 'an object');
  checkPermitCall(claim.key, claim.args, 'acquire');
  if (!claim.key.startsWith(`${recordKey(request.prefix, request.key)}:`)) {
    throw invalid('ERR_INVALID_KEY', 'claim.key', claim.key, "a permit storage key of the request's key and prefix");
  }
  if (request.commit !== true) throw invalid('ERR_INVALID_OPTION', 'request.commit', request.commit, 'true (a limit)');
}

/** A permit store whose operations answer synchronously (the memory and SQLite permit stores). */
export interface SyncPermitStore extends PermitStore {
  acquire(key: string, args: PermitAcquireArgs): AcquireReply;
  release(key: string, args: PermitReleaseArgs): ReleaseReply;
}

/**
 * `Store.decideWithPermit` on a store that decides synchronously, beside a permit store that does too:
 * nothing else runs between the steps, so the sequence is one atomic step in this process (a store
 * shared between processes wraps it in one transaction). `decide` must hand out a result the next call
 * does not reuse.
 */
export function decideWithPermitSync(
  decide: (request: StoreRequest) => StoreResult,
  permits: SyncPermitStore,
  request: StoreRequest,
  claim: PermitClaim,
): HeldResult {
  checkClaim(request, claim);
  const { key, args } = claim;
  const permit = permits.acquire(key, args);
  if (!permit.granted) return { permit, result: decide({ ...request, commit: false }) };
  let result: StoreResult;
  try {
    result = decide(request);
  } catch (error) {
    permits.release(key, { limit: args.limit, leaseId: args.leaseId, nowUs: args.nowUs });
    throw error;
  }
  // A denial holds no permit: the lease goes back before the answer leaves.
  if (!result.allowed) permits.release(key, { limit: args.limit, leaseId: args.leaseId, nowUs: args.nowUs });
  return { permit, result };
}

/** A result the next call of a store that reuses its result objects (`decideSync`) does not touch. */
export function detachedResult(result: StoreResult): StoreResult {
  return {
    allowed: result.allowed,
    evaluations: result.evaluations.map((e) => ({ ...e, next: e.next && [...e.next] })),
    ...(result.nowUs === undefined ? {} : { nowUs: result.nowUs }),
  };
}
