import type { CompiledPolicy } from './compile.js';
import { MAX_DURATION_US } from './fields.js';
import { KIND_METER, kindOf } from './kinds.js';
import { meterCharge } from './meter.js';
import { refundPolicy } from './refund.js';
import type { State } from './types.js';

// Settling: a call admitted with an estimated cost is charged its actual cost afterwards.
//
// - **Less than the estimate**: the difference comes back exactly as a lease's unused units do
//   (`refundPolicy`): as far as the policy can still give it back without handing a unit out twice.
// - **More than the estimate**: the difference is charged whatever the state, past the limit if need be.
//   It is a debt: calls after it wait until it has drained.
//
// Settling has a meaning for the meter (GCRA, the continuous token bucket, the leaky bucket as a meter):
// its one number, the TAT, is what the key owes, and a debt is simply owed time, kept for as long as it
// takes to drain however large it is, so no debt is ever forgotten. The other kinds count a span of time
// (fixed, sliding and bucketed windows, the sliding log, the interval token bucket whose refill puts the
// bucket back to full): a debt charged to them past the limit is dropped when its window closes or its
// bucket refills, so a debt larger than one window's limit would be partly forgotten. Carrying it over
// needs another state layout (a new kind id), which these kinds do not have: settling refuses them, as
// does a leaky bucket in queue mode (every call booked behind a settled one already has its own delay,
// which a refund would not move) and a penalty box (`blockMs`, the same reason leases refuse it).

/**
 * What a call admitted with an estimated cost (`limit(key, { cost, settle: true })`) carries for
 * `limiter.settle`: plain data, signed by the limiter that issued it, for its key; treat it as opaque.
 */
export interface Settlement {
  /** Unique among the settlements of the limiter that issued it. */
  readonly id: string;
  /** The estimate the call was admitted with. */
  readonly cost: number;
  /** The call's policies, by name, in call order. */
  readonly policies: readonly string[];
  /** When the store decided the call, µs on the clock that decided it. */
  readonly atUs: number;
  /**
   * Until when (ms, on the limiter's clock) the settlement may give anything back. Past it, a settle
   * still charges a debt but gives nothing back, so no limiter needs to remember it any longer.
   */
  readonly expiresAtMs: number;
  /** The issuing limiter's keyed digest of the fields above, its prefix and the key. */
  readonly signature: string;
}

/**
 * The largest debt a key may owe, µs: a debt past it is kept at it (the key is then blocked for years),
 * so that every TAT stays an exact integer below 2^53 in every store.
 */
export const MAX_DEBT_US = MAX_DURATION_US;

/** Why a policy's calls cannot be settled, or undefined when they can. */
export function settleRefusal(c: CompiledPolicy): string | undefined {
  if (c.blockUs > 0) return 'a penalty box (blockMs) would start on a settled debt as on a denial';
  if (c.kind !== KIND_METER) {
    return `a ${kindOf(c).name} counts calls in a span of time and forgets a debt past its limit when the span ends; settling needs a meter (gcra, a continuous tokenBucket, a leakyBucket)`;
  }
  if (c.c === 1) return 'a leaky bucket in queue mode has booked the calls behind it by then';
  return undefined;
}

/**
 * The meter after a debt: `extra` more µs owed, counted from now if the key owed nothing, and at most
 * {@link MAX_DEBT_US} owed in all. The penalty slot stays.
 */
function meterDebt(s: State | undefined, nowUs: number, extraUs: number): State {
  const blockedUntil = s === undefined ? 0 : (s[0] as number);
  const tat = s === undefined ? nowUs : (s[1] as number);
  const base = Math.max(tat, nowUs);
  const cap = nowUs + MAX_DEBT_US;
  const next = base + extraUs;
  return [blockedUntil, next > cap ? Math.max(base, cap) : next];
}

/**
 * The state of one policy after a call admitted at `atUs` with an estimate of `estimate` is settled at
 * `actual`; undefined when nothing changes. Pure; the caller checked `settleRefusal`.
 *
 * A debt is the difference of the two charges (`meterCharge(actual) − meterCharge(estimate)`, whole µs),
 * so a call settled at its actual cost has paid exactly what a call of that cost pays up front.
 */
export function settlePolicy(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  atUs: number,
  estimate: number,
  actual: number,
): State | undefined {
  if (actual < estimate) return refundPolicy(c, s, nowUs, atUs, estimate, estimate - actual);
  if (!(actual > estimate)) return undefined;
  const extraUs = meterCharge(actual, c.a) - meterCharge(estimate, c.a);
  if (extraUs <= 0) return undefined;
  return meterDebt(s, nowUs, extraUs);
}
