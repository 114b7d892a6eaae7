import { describeValue, FloodgateError } from '../errors.js';
import type { CompiledNumbers, Evaluate, KindDescriptor, StateField } from './descriptor.js';
import { MAX_DURATION_US, wholeUsUp } from './fields.js';
import { admit, deny, nextState2 } from './types.js';

/**
 * GCRA, the continuous token bucket and the drip-free leaky bucket are one machine, kept as a single
 * number per key: the theoretical arrival time (TAT), the moment the key will again be untouched.
 *
 * Each unit of cost pushes the TAT T µs further (T is the emission interval: one unit every T µs).
 * `TAT − now` is what the key owes; a call is admitted while what it would owe stays within the
 * tolerance τ = burst · T. In bucket words: the level is `(TAT − now) / T` and the capacity is `burst`.
 *
 * Everything here is an integer number of µs (T and τ are whole µs, see `compileMeter`; a fractional cost
 * is charged `ceil(cost · T)` µs), so every store computes exactly the same numbers, below 2^53.
 *
 * Queue mode (a shaper) admits on the same test but tells each call to wait until the calls before it
 * have drained (`delayUs = TAT − now`), so admitted calls leave evenly spaced.
 */
export const evaluateMeter: Evaluate = (c, s, nowUs, cost, maxDelayUs, out) => {
  const t = c.a;
  const tau = c.b;
  const tat = s === undefined ? nowUs : (s[1] as number);
  const base = Math.max(tat, nowUs);
  const newTat = base + meterCharge(cost, t);
  const owed = newTat - nowUs;
  const owedBefore = base - nowUs;
  const queue = c.c === 1;
  const slack = queue ? 0 : maxDelayUs;
  if (owed - tau <= slack) {
    const next = cost === 0 ? undefined : nextState2(out, 0, newTat);
    admit(out, (tau - owed) / t, c.limit, owed, next, queue ? owedBefore : owed > tau ? owed - tau : 0);
  } else {
    deny(out, (tau - owedBefore) / t, c.limit, owed - tau - slack, owedBefore);
  }
};

/**
 * Whether the memory store's meter fast path may decide this policy's cost-1 calls with no reservation (see
 * `MeterFastPath`): a meter not in queue mode (GCRA, the continuous token bucket, the leaky bucket as a
 * meter) whose charge for one unit is its emission interval T and fits its tolerance.
 */
export function isPlainMeter(c: CompiledNumbers): boolean {
  return c.kind === METER.id && c.c === 0 && meterCharge(1, c.a) === c.a && c.a <= c.b;
}

/**
 * What a cost adds to the TAT: whole µs, rounded up. A product within a few ulps above a whole number is
 * that number: 184.58 × 2 592 000 000 is exactly 478 431 360 000 in decimal but 478 431 360 000.00006 in
 * binary, and decimal amounts that add up to a budget must fit it. (Ports repeat `x − x·1e-15`.)
 */
export function meterCharge(cost: number, t: number): number {
  const x = cost * t;
  return Math.ceil(x - x * 1e-15);
}

/**
 * The numbers of a meter: T, one unit of cost every `intervalUs` (rounded up to whole µs), and τ, the
 * charge of `burst`, rounded as every charge is (`meterCharge`): a cost equal to the burst always fits a
 * fresh key, even when burst · T is not a whole number of µs (1.5 per second: T = 666 667 µs, burst · T =
 * 1 000 000.5 µs, τ = 1 000 001 µs). That is at most 1 µs more tolerance.
 */
export function compileMeter(intervalUs: number, burst: number, queue: boolean): CompiledNumbers {
  const t = wholeUsUp(intervalUs);
  return { kind: METER.id, limit: burst, a: t, b: meterCharge(burst, t), c: queue ? 1 : 0 };
}

/** A meter's interval per unit must be a µs or more, and its burst must drain within MAX_DURATION_US. */
export function checkMeter(path: string, intervalUs: number, burst: number, what: string): void {
  if (intervalUs < 1) {
    throw new FloodgateError(
      'ERR_INVALID_POLICY',
      `${path} admits more than one unit of cost per microsecond (${what} = ${describeValue(intervalUs)} µs); count cost in larger units`,
      { option: path },
    );
  }
  const toleranceUs = intervalUs * burst;
  if (!(toleranceUs <= MAX_DURATION_US)) {
    throw new FloodgateError(
      'ERR_INVALID_POLICY',
      `${path} describes a burst that takes ${describeValue(toleranceUs / 1000)} ms to drain; at most ${MAX_DURATION_US / 1000} ms is supported`,
      { option: path },
    );
  }
}

/**
 * The meter: GCRA, the continuous token bucket and the leaky bucket. State `[blockedUntil, tat]`.
 *
 * Refund: the lease pushed the TAT by `ceil(leased·T)`; what a lease of the used units would have pushed
 * is kept, the rest comes off the TAT, but only the part of the lease that still lies ahead of `now`
 * (measured from the grant, a lower bound of where the lease sits in the TAT): the part behind `now` has
 * already drained, and taking it off would undo time that other calls used.
 */
export const METER: KindDescriptor<1, 'meter'> = {
  id: 1,
  name: 'meter',
  tag: '',
  layout: { fields: ['tat'], untouchedAtLatest: true },
  params: {
    a: 'T: whole µs per unit of cost',
    b: 'τ: tolerance, whole µs (the charge of `burst`)',
    c: '1 = queue mode',
  },
  flags: { c: [0, 1] },
  capacity: 'charge',
  leaseEndsAtReset: false,
  evaluate: evaluateMeter,
  refund(c, s, nowUs, leasedAtUs, leased, unused) {
    const charged = meterCharge(leased, c.a);
    const ahead = leasedAtUs + charged - nowUs;
    const back = Math.min(charged - meterCharge(leased - unused, c.a), ahead);
    if (back <= 0) return undefined;
    return [s[0] as number, (s[1] as number) - back];
  },
  leaseRefusal: (c) => (c.c === 1 ? 'a leaky bucket in queue mode gives every call its own delay' : undefined),
  countsDenied: () => false,
  read(c, s, nowUs) {
    const tat = s === undefined ? nowUs : (s[1] as number);
    const owedUs = Math.max(0, tat - nowUs);
    const fields: StateField[] = [];
    if (s !== undefined) fields.push({ label: 'TAT (theoretical arrival time)', value: tat, unit: 'time' });
    fields.push(
      { label: 'TAT − now', value: owedUs, unit: 'duration' },
      { label: 'emission interval T', value: c.a, unit: 'duration' },
      { label: 'tolerance τ', value: c.b, unit: 'duration' },
    );
    return { used: owedUs / c.a, blockedUntilUs: s === undefined ? 0 : (s[0] as number), fields };
  },
};
