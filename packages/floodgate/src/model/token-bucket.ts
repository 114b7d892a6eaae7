import { describeValue, FloodgateError } from '../errors.js';
import type { AlgorithmDescriptor, PolicyBase, PolicyBaseOptions } from './algorithm.js';
import type { CompiledNumbers, Evaluate, KindDescriptor } from './descriptor.js';
import { count, duration, nameDuration, oneOf, positive, toUs, trimNumber } from './fields.js';
import { checkMeter, compileMeter } from './meter.js';
import { admit, deny, nextState3, type State } from './types.js';

/** Token bucket that starts full and refills `refillAmount` every `refillIntervalMs`. */
export interface TokenBucketPolicy extends PolicyBase {
  readonly algorithm: 'token-bucket';
  readonly capacity: number;
  readonly refillAmount: number;
  readonly refillIntervalMs: number;
  /** `continuous` refills smoothly; `interval` adds `refillAmount` at each interval boundary. */
  readonly refill: 'continuous' | 'interval';
}

/** Options of {@link tokenBucket}. */
export interface TokenBucketOptions extends PolicyBaseOptions {
  capacity: number;
  refillAmount: number;
  refillIntervalMs: number;
  /** @default 'continuous' */
  refill?: 'continuous' | 'interval';
}

/**
 * The longest an interval token bucket may take to refill from empty, µs: 2^52 (about 142 years), so
 * that a wait added to today's time (about 2^50.7 µs since 1970) stays below 2^53, exact in every store.
 */
const MAX_REFILL_US = 2 ** 52;

/**
 * A continuously refilled token bucket is the same machine as GCRA (the tokens missing from a full bucket
 * are the time owed, divided by T); an interval refill is a kind of its own.
 */
export const TOKEN_BUCKET: AlgorithmDescriptor<TokenBucketPolicy> = {
  algorithm: 'token-bucket',
  factory: 'tokenBucket',
  fields: {
    capacity: count(),
    refillAmount: positive(),
    refillIntervalMs: duration(),
    refill: oneOf('continuous', 'interval'),
  },
  check(p, path) {
    if (p.refill === 'continuous') {
      checkMeter(
        path,
        (p.refillIntervalMs * 1000) / p.refillAmount,
        p.capacity,
        `${path}.refillIntervalMs / ${path}.refillAmount`,
      );
      return;
    }
    // An interval token bucket's waits are whole intervals: one that takes longer than MAX_REFILL_US to
    // refill is refused, since its waits would no longer be numbers every store carries exactly (Redis
    // replies and PostgreSQL `bigint` overflow: 1e-9 per 2^47 µs would owe 10^23 µs).
    const refillUs = Math.ceil(p.capacity / p.refillAmount) * Math.round(p.refillIntervalMs * 1000);
    if (!(refillUs <= MAX_REFILL_US)) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `${path}.refillAmount ${describeValue(p.refillAmount)} per ${describeValue(p.refillIntervalMs)} ms takes ${describeValue(refillUs / 1000)} ms to refill ${path}.capacity ${describeValue(p.capacity)}; at most ${MAX_REFILL_US / 1000} ms (about 142 years) is supported`,
        { option: `${path}.refillAmount` },
      );
    }
  },
  derivedName: (p) =>
    `token-bucket-${trimNumber(p.capacity)}-refill-${trimNumber(p.refillAmount)}-per-${nameDuration(p.refillIntervalMs)}${p.refill === 'interval' ? '-interval' : ''}`,
  compile(p) {
    const intervalUs = toUs(p.refillIntervalMs);
    if (p.refill === 'continuous') return compileMeter(intervalUs / p.refillAmount, p.capacity, false);
    return { kind: TOKEN_INTERVAL.id, limit: p.capacity, a: p.refillAmount, b: intervalUs, c: 0 };
  },
  quota: (p) => ({
    burst: p.capacity,
    ratePerMs: p.refillAmount / p.refillIntervalMs,
    // An interval refill restores whole amounts at interval boundaries only.
    windowMs:
      p.refill === 'interval'
        ? Math.ceil(p.capacity / p.refillAmount) * p.refillIntervalMs
        : (p.capacity * p.refillIntervalMs) / p.refillAmount,
  }),
  gauge: () => ({ label: 'tokens in the bucket', axis: 'tokens', ceilingLabel: 'capacity', scale: 'left' }),
};

/**
 * What is left of `used` once `m` intervals have refilled it, relative to the capacity: float dust
 * (0.1 + 0.2 − 0.3 = 5.6e-17) is not a debt. Anything at or below this share of the capacity is an
 * empty bucket. Ports compute `capacity * 1e-12` and compare with `<=` the same way.
 */
export const TOKEN_DUST = 1e-12;

/** Nudges of the closed-form interval count, each way: it is off by one at most, outside absurd rates. */
const MAX_NUDGES = 4;

/** What `refillTo` found: tokens used and the anchor, after the refills due by then (scratch, reused). */
const refilled = { used: 0, anchor: 0 };

/**
 * The refills due at `nowUs` on a stored state: `used` drops by `refill` per whole interval since the
 * anchor, and what is left at or below `dust` is an empty bucket (a full bucket, anchored at `nowUs`).
 */
function refillTo(c: CompiledNumbers, s: State | undefined, nowUs: number, dust: number): void {
  let used = 0;
  let anchor = nowUs;
  if (s !== undefined && (s[1] as number) > 0) {
    used = s[1] as number;
    anchor = s[2] as number;
    const intervals = Math.floor((nowUs - anchor) / c.b);
    if (intervals > 0) {
      used = used - intervals * c.a;
      anchor = anchor + intervals * c.b;
      if (used <= dust) {
        used = 0;
        anchor = nowUs;
      }
    }
  }
  refilled.used = used;
  refilled.anchor = anchor;
}

/**
 * Token bucket with interval refill: the bucket starts full and `refillAmount` tokens come back at each
 * interval boundary. State is what has been used and the anchor the intervals count from; the anchor is
 * the moment the bucket last left its full state, so a full bucket is the same as an untouched key.
 * (The continuous token bucket runs on the meter; see meter.ts.)
 *
 * `used` is a double (fractional costs and refills), so it carries dust. Two rules keep every answer
 * exact anyway, in every port:
 * - after a refill, what is left at or below `capacity · TOKEN_DUST` is taken as 0 (the bucket is full);
 * - a wait (`retryAfter`, `resetAfter`) is a whole number of intervals after the *stored* anchor, found
 *   by asking the same question the evaluation at that moment will ask (`used − m · refill`, snapped,
 *   plus the cost, against the capacity) instead of dividing: so the call fits exactly when promised,
 *   and not one interval earlier.
 */
export const evaluateTokenInterval: Evaluate = (c, s, nowUs, cost, _maxDelayUs, out) => {
  const capacity = c.limit;
  const refill = c.a;
  const interval = c.b;
  const dust = capacity * TOKEN_DUST;
  refillTo(c, s, nowUs, dust);
  const used = refilled.used;
  const anchor = refilled.anchor;
  const after = used + cost;
  if (after <= capacity) {
    if (cost > 0) {
      // The state stored is (after, anchor): the bucket is full once it has refilled `after`.
      const reset = anchor + intervalsUntil(after, 0, 0, refill, dust) * interval - nowUs;
      admit(out, capacity - after, capacity, reset, nextState3(out, 0, after, anchor));
    } else {
      admit(
        out,
        capacity - after,
        capacity,
        used > 0 ? untilFull(s as State, refill, interval, dust, nowUs) : 0,
        undefined,
      );
    }
  } else {
    // Denied: the stored state holds `used` (a bucket that had emptied always admits a cost it can hold).
    const st = s as State;
    const retry = (st[2] as number) + intervalsUntil(st[1] as number, cost, capacity, refill, dust) * interval - nowUs;
    deny(out, capacity - used, capacity, retry, untilFull(st, refill, interval, dust, nowUs));
  }
};

/** µs until the stored state `s` (which still holds more than dust) has refilled completely. */
function untilFull(s: State, refill: number, interval: number, dust: number, nowUs: number): number {
  return (s[2] as number) + intervalsUntil(s[1] as number, 0, 0, refill, dust) * interval - nowUs;
}

/**
 * The fewest whole intervals `m ≥ 1` after a state holding `used` for which the evaluation admits `cost`
 * against `target` (`capacity` for a call; 0 with cost 0 for a full bucket): `left + cost ≤ target`,
 * where `left = used − m · refill`, and 0 when that is at most `dust`. Starts from the closed form and
 * nudges it with the very test the evaluation runs (the test only ever passes more as `m` grows).
 */
export function intervalsUntil(used: number, cost: number, target: number, refill: number, dust: number): number {
  let m = Math.max(1, Math.ceil((used + cost - target) / refill));
  for (let k = 0; k < MAX_NUDGES && m > 1 && fitsAfter(used, m - 1, cost, target, refill, dust); k++) m--;
  for (let k = 0; k < MAX_NUDGES && !fitsAfter(used, m, cost, target, refill, dust); k++) m++;
  return m;
}

/** The evaluation's test after `m ≥ 1` refills of a state holding `used`. */
function fitsAfter(used: number, m: number, cost: number, target: number, refill: number, dust: number): boolean {
  let left = used - m * refill;
  if (left <= dust) left = 0;
  return left + cost <= target;
}

/**
 * The token bucket with interval refill. State `[blockedUntil, used, anchor]`.
 *
 * Refund: while no refill boundary has passed since the grant, `used` drops by the units; after one, the
 * refill cannot be told apart from the lease, and nothing is given back.
 */
export const TOKEN_INTERVAL: KindDescriptor<2, 'token-interval'> = {
  id: 2,
  name: 'token-interval',
  tag: 'i',
  layout: { fields: ['used', 'anchor'] },
  params: { a: 'refill amount', b: 'interval, µs', c: '–' },
  flags: {},
  capacity: 'count',
  leaseEndsAtReset: false,
  evaluate: evaluateTokenInterval,
  refund(c, s, nowUs, leasedAtUs, _leased, unused) {
    const used = s[1] as number;
    const anchor = s[2] as number;
    if (used <= 0 || anchor > leasedAtUs) return undefined;
    if (Math.floor((nowUs - anchor) / c.b) !== Math.floor((leasedAtUs - anchor) / c.b)) return undefined;
    return [s[0] as number, Math.max(0, used - unused), anchor];
  },
  leaseRefusal: () => undefined,
  countsDenied: () => false,
  read(c, s, nowUs) {
    refillTo(c, s, nowUs, c.limit * TOKEN_DUST);
    const { used, anchor } = refilled;
    return {
      used,
      blockedUntilUs: s === undefined ? 0 : (s[0] as number),
      fields: [
        { label: 'tokens used', value: used, unit: 'number' },
        ...(used > 0 ? [{ label: 'next refill', value: anchor + c.b, unit: 'time' as const }] : []),
      ],
    };
  },
};
