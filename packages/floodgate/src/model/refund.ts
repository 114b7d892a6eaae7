import {
  type CompiledPolicy,
  KIND_FIXED_WINDOW,
  KIND_METER,
  KIND_SLIDING_LOG,
  KIND_SLIDING_WINDOW,
  KIND_TOKEN_INTERVAL,
} from './compile.js';
import { meterCharge } from './meter.js';
import type { State } from './types.js';

/**
 * Leases. A lease is an ordinary committed call of cost `leased` (so the store counts every leased unit
 * the moment it is granted, under every policy, all-or-nothing); the process then admits calls locally
 * from it. Giving back the units it did not use is the one extra operation, `refundPolicy`: it turns the
 * key's state into what it would be had the lease been for only the units used, and never into less.
 * Where the algorithm cannot tell that any more (the lease's window is over, a refill came in between),
 * it gives back nothing: units held too long are lost to everyone until they expire on their own, but
 * never handed out twice.
 */

/** Why a policy cannot be leased, or undefined when it can. */
export function leaseRefusal(c: CompiledPolicy): string | undefined {
  if (c.blockUs > 0) return 'a penalty box (blockMs) would start whenever a whole lease does not fit';
  if (c.kind === KIND_METER && c.c === 1) return 'a leaky bucket in queue mode gives every call its own delay';
  if (c.kind === KIND_SLIDING_LOG && c.b > 0)
    return 'a minimum gap (minGapMs) cannot hold between calls admitted locally';
  if ((c.kind === KIND_SLIDING_LOG && c.c === 1) || (c.kind === KIND_FIXED_WINDOW && c.b === 1))
    return 'counting denied attempts (countDenied) needs every call at the store';
  return undefined;
}

/**
 * The state of one policy after `unused` units of a lease are given back: the lease was a call of cost
 * `leased` committed at `leasedAtUs` (the clock reading of the decision that granted it). Undefined when
 * nothing changes. Pure; the caller checked `leaseRefusal`.
 *
 * - meter (GCRA, buckets): the lease pushed the TAT by `ceil(leased·T)`; what a lease of the used units
 *   would have pushed is kept, the rest comes off the TAT, but only the part of the lease that still
 *   lies ahead of `now` (measured from the grant, a lower bound of where the lease sits in the TAT): the
 *   part behind `now` has already drained, and taking it off would undo time that other calls used.
 * - token bucket, interval: while no refill boundary has passed since the grant, `used` drops by the
 *   units; after one, the refill cannot be told apart from the lease, and nothing is given back.
 * - fixed window: within the lease's window only (clock-aligned: the window of the grant; first-request:
 *   the live window that contains the grant), the count drops.
 * - sliding-window counter: the count of the grant's window drops, whether it is still the current
 *   window or has become the previous one.
 * - sliding log: the event logged at the grant's µs (merged with any logged at the same µs) loses the
 *   units, and goes when nothing is left of it.
 */
export function refundPolicy(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  leasedAtUs: number,
  leased: number,
  unused: number,
): State | undefined {
  if (s === undefined || !(unused > 0) || unused > leased) return undefined;
  switch (c.kind) {
    case KIND_METER: {
      const charged = meterCharge(leased, c.a);
      const ahead = leasedAtUs + charged - nowUs;
      const back = Math.min(charged - meterCharge(leased - unused, c.a), ahead);
      if (back <= 0) return undefined;
      return [s[0] as number, (s[1] as number) - back];
    }
    case KIND_TOKEN_INTERVAL: {
      const used = s[1] as number;
      const anchor = s[2] as number;
      if (used <= 0 || anchor > leasedAtUs) return undefined;
      if (Math.floor((nowUs - anchor) / c.b) !== Math.floor((leasedAtUs - anchor) / c.b)) return undefined;
      return [s[0] as number, Math.max(0, used - unused), anchor];
    }
    case KIND_FIXED_WINDOW: {
      const window = c.a;
      const start = s[1] as number;
      const count = s[2] as number;
      const leaseWindow = c.c === 0 ? leasedAtUs - (leasedAtUs % window) : start;
      if (start !== leaseWindow || leasedAtUs < start || leasedAtUs >= start + window) return undefined;
      if (nowUs >= start + window || count <= 0) return undefined;
      return [s[0] as number, start, Math.max(0, count - unused)];
    }
    case KIND_SLIDING_WINDOW: {
      const window = c.a;
      const leaseWindow = leasedAtUs - (leasedAtUs % window);
      if (s[1] === leaseWindow) {
        return [s[0] as number, leaseWindow, Math.max(0, (s[2] as number) - unused), s[3] as number];
      }
      if (s[1] === leaseWindow + window) {
        return [s[0] as number, s[1] as number, s[2] as number, Math.max(0, (s[3] as number) - unused)];
      }
      return undefined;
    }
    case KIND_SLIDING_LOG: {
      for (let i = 1; i < s.length; i += 2) {
        if (s[i] !== leasedAtUs) continue;
        const left = (s[i + 1] as number) - unused;
        const next = [...s];
        if (left > 0) next[i + 1] = left;
        else next.splice(i, 2);
        return next;
      }
      return undefined;
    }
  }
  return undefined;
}
