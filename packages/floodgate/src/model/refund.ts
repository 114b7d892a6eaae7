import type { CompiledPolicy } from './compile.js';
import { kindOf } from './kinds.js';
import type { State } from './types.js';

/**
 * Leases. A lease is an ordinary committed call of cost `leased` (so the store counts every leased unit
 * the moment it is granted, under every policy, all-or-nothing); the process then admits calls locally
 * from it. Giving back the units it did not use is the one extra operation, `refundPolicy`: it turns the
 * key's state into what it would be had the lease been for only the units used, and never into less.
 * Where the algorithm cannot tell that any more (the lease's window is over, a refill came in between),
 * it gives back nothing: units held too long are lost to everyone until they expire on their own, but
 * never handed out twice. Each kind says how in its descriptor's `refund`.
 */

/** Why a policy cannot be leased, or undefined when it can. */
export function leaseRefusal(c: CompiledPolicy): string | undefined {
  if (c.blockUs > 0) return 'a penalty box (blockMs) would start whenever a whole lease does not fit';
  return kindOf(c).leaseRefusal(c);
}

/**
 * The state of one policy after `unused` units of a lease are given back: the lease was a call of cost
 * `leased` committed at `leasedAtUs` (the clock reading of the decision that granted it). Undefined when
 * nothing changes. Pure; the caller checked `leaseRefusal`.
 */
export function refundPolicy(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  leasedAtUs: number,
  leased: number,
  unused: number,
): State | undefined {
  const k = kindOf(c);
  if (s === undefined || !(unused > 0) || unused > leased) return undefined;
  return k.refund(c, s, nowUs, leasedAtUs, leased, unused);
}
