import { describeValue, FloodgateError } from '../../errors.js';
import type { AcquireReply } from '../../permits/model.js';
import { checkClaim } from '../kit/holding.js';
import type { PermitClaim, StoreRequest } from '../store.js';
import { DECIDE_WIRE } from './wire.js';

/** The expiry grace of a Redis store's own permit store (`store.permits`), ms: the permit store's default. */
export const OWN_PERMIT_GRACE_MS = 5000;

/** The channel command of a Redis store's own permit store: it has no subscriber, so plain PUBLISH. */
const PUBLISH = 'PUBLISH';

/**
 * The permit's storage key of a claim, checked to be the request's user key's: its keys then share the
 * decision's hash tag (one cluster slot), and a claim on another key is refused before any call.
 */
function claimKey(request: StoreRequest, claim: PermitClaim): string {
  checkClaim(request, claim);
  return claim.key;
}

/**
 * KEYS and ARGV of the holding script (holding-lua.ts) for one `limit` (`decision`: its KEYS and ARGV of
 * the decision script, one call of `n` policies) and the permit of `claim`.
 */
export function holdingArguments(
  request: StoreRequest,
  claim: PermitClaim,
  decision: { keys: string[]; args: string[] },
): { keys: string[]; args: string[] } {
  const base = claimKey(request, claim);
  const a = claim.args;
  const now = a.nowUs === undefined ? '' : String(a.nowUs);
  const grace = String(OWN_PERMIT_GRACE_MS);
  // The argument lists of the permit scripts (permit-store.ts builds the same).
  const acquire = [now, String(a.leaseUs), String(a.limit), String(a.cost), a.leaseId, grace, PUBLISH];
  const release = [now, a.leaseId, grace, String(a.limit), PUBLISH];
  // One call: its run is the last `size + n` arguments, its op at `op` within them (Lua counts from 1).
  const run = DECIDE_WIRE.run;
  const opAt = decision.args.length - (run.size + request.policies.length) + 1 + run.op;
  const keys = [`${base}:l`, `${base}:c`, `${base}:f`, `${base}:q`, `${base}:x`, `${base}:w`, `${base}:n`];
  return {
    keys: keys.concat(decision.keys),
    args: [String(acquire.length), String(release.length), String(opAt), ...acquire, ...release, ...decision.args],
  };
}

/** The holding script's reply: the acquire's (its first 8 numbers) and the rest, the decision script's. */
export function holdingReply(reply: unknown): { permit: AcquireReply; decided: unknown[] } {
  if (!Array.isArray(reply) || reply.length < 9) {
    throw new FloodgateError('ERR_STORE_PROTOCOL', `the holding script answered ${describeValue(reply)}`);
  }
  const r = reply.slice(0, 8).map((value: unknown) => {
    const n = Number(value);
    if (!Number.isSafeInteger(n)) {
      throw new FloodgateError('ERR_STORE_PROTOCOL', `the holding script answered ${describeValue(value)}`);
    }
    return n;
  });
  const [granted, inFlight, fence, expiresAtUs, nowUs, retryAfterUs, resetAfterUs, wake] = r as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return {
    permit: { granted: granted === 1, inFlight, fence, expiresAtUs, nowUs, retryAfterUs, resetAfterUs, wake },
    decided: reply.slice(8),
  };
}
