import { definePolicy, type Policy, quotaOf } from 'floodgate';
import { type DecisionRequest, type DescriptorOutcome, type DescriptorRequest, overLimit } from '../engine.js';
import type { RateLimitHeaders } from '../headers.js';
import type { RateLimitRequestMessage, Writer } from './codec.js';

/**
 * Unit names by number, for the limits Envoy sends with descriptors. Their type, RateLimitUnit, stops at
 * YEAR (6); 7 is read as WEEK, the number RateLimitResponse's own unit enum gives it, as
 * envoyproxy/ratelimit reads it.
 */
const UNIT_NAMES: readonly (string | undefined)[] = [
  undefined,
  'second',
  'minute',
  'hour',
  'day',
  'month',
  'year',
  'week',
];

/**
 * The RateLimitResponse.RateLimit.Unit numbers `current_limit` is written in, smallest first, with their
 * length in milliseconds as Envoy counts them (a week is 7 days, a month 30, a year 365). WEEK is 7 in
 * rls.proto since December 2024; an older Envoy reads it as an unknown unit.
 */
const REPORT_UNITS: readonly (readonly [unit: number, ms: number])[] = [
  [1, 1000],
  [2, 60_000],
  [3, 3_600_000],
  [4, 86_400_000],
  [7, 604_800_000],
  [5, 2_592_000_000],
  [6, 31_536_000_000],
];

/** `limit_remaining` of an unlimited descriptor: the largest uint32, as envoyproxy/ratelimit answers it. */
const UNLIMITED_REMAINING = 0xffffffff;

/** How far below the true rate a rounded-down `requests_per_unit` may fall before a larger unit is tried. */
const ROUNDING_LOSS = 0.01;

const CODE_OK = 1;
const CODE_OVER_LIMIT = 2;

/**
 * Envoy's request as the engine's, decided as leniently as Envoy's protocol allows: `hits_addend` 0 means
 * 1; a descriptor's own `hits_addend` wins (0 checks without counting).
 */
export function toDecisionRequest(message: RateLimitRequestMessage): DecisionRequest {
  const list = message.descriptors;
  const descriptors = new Array<DescriptorRequest>(list.length);
  for (let i = 0; i < list.length; i++) {
    const d = list[i] as RateLimitRequestMessage['descriptors'][number];
    const limit = d.hasLimit
      ? { requestsPerUnit: d.requestsPerUnit, unit: UNIT_NAMES[d.unit] ?? `unit ${d.unit}` }
      : undefined;
    descriptors[i] = { entries: d.entries, cost: d.hitsAddend, limit };
  }
  return {
    domain: message.domain,
    descriptors,
    cost: message.hitsAddend === 0 ? 1 : message.hitsAddend,
    lenient: true,
  };
}

/**
 * Writes Envoy's RateLimitResponse for the engine's outcomes: the overall code, one status per
 * descriptor in order, and the rate limit headers to add to the response. With `shadowAll`
 * (envoyproxy/ratelimit's global `SHADOW_MODE`), the overall code is OK whatever the statuses say.
 * Returns true when some descriptor is over its limit.
 */
export function encodeRateLimitResponse(
  w: Writer,
  outcomes: readonly DescriptorOutcome[],
  headerMaker: RateLimitHeaders,
  shadowAll = false,
): boolean {
  const over = overLimit(outcomes);
  w.uint(1, over && !shadowAll ? CODE_OVER_LIMIT : CODE_OK);
  for (let i = 0; i < outcomes.length; i++) {
    const o = outcomes[i] as DescriptorOutcome;
    const status = w.open(2);
    w.uint(1, o.code === 'OVER_LIMIT' ? CODE_OVER_LIMIT : CODE_OK);
    const d = o.decision;
    if (o.unlimited) {
      w.uint(3, UNLIMITED_REMAINING);
    } else if (d !== undefined) {
      const limit = w.open(2);
      let resetMs: number;
      if (o.envoy !== undefined) {
        // As configured (or sent): requests_per_unit, unit and the name when given.
        w.uint(1, o.envoy.requestsPerUnit);
        w.uint(2, o.envoy.unit);
        w.string(3, o.envoy.name ?? '');
        resetMs = o.envoyResetMs ?? 0;
      } else {
        // A permit's outcome has no rate policies: only its quota (the concurrency limit) is known.
        const policies = o.policies ?? [];
        let policy: Policy | undefined;
        for (let j = 0; j < policies.length; j++) if ((policies[j] as Policy).name === d.policy) policy = policies[j];
        writeCurrentLimit(w, policy, d.limit);
        if (policy !== undefined && !o.requestLimit && nameWasGiven(policy)) w.string(3, policy.name);
        resetMs = Number.isFinite(d.resetAfterMs) ? d.resetAfterMs : 0;
      }
      w.close(limit);
      w.uint(3, Math.min(Math.max(0, Math.floor(d.remaining)), 0xffffffff));
      // Whole seconds, rounded up: Envoy turns them into X-RateLimit-Reset, and a client that waits that
      // long never retries before the limit has reset.
      const duration = w.open(4);
      w.uint(1, Math.ceil(resetMs / 1000));
      w.close(duration);
    }
    w.close(status);
  }
  const headers = headerMaker.of(outcomes);
  for (let i = 0; i < headers.length; i++) {
    const h = headers[i] as { key: string; value: string };
    const header = w.open(3);
    w.string(1, h.key);
    w.string(2, h.value);
    w.close(header);
  }
  return over;
}

/** Whether each policy's name was given in the config, rather than derived from its options. */
const GIVEN_NAMES = new WeakMap<Policy, boolean>();

/**
 * True when the policy's name is one the config gave (`current_limit.name` carries it, and Envoy puts it
 * in `X-RateLimit-Limit`), false for the name floodgate derives from the options.
 */
export function nameWasGiven(policy: Policy): boolean {
  let given = GIVEN_NAMES.get(policy);
  if (given === undefined) {
    given = definePolicy({ ...policy, name: undefined }).name !== policy.name;
    GIVEN_NAMES.set(policy, given);
  }
  return given;
}

/** The policy's sustained rate, in requests per millisecond: what it admits over a long time, whatever its burst. */
export function sustainedRate(policy: Policy): number {
  return quotaOf(policy).ratePerMs;
}

/** Envoy's `current_limit` for a policy: `requests_per_unit` and the RateLimitUnit number. */
export interface CurrentLimit {
  requestsPerUnit: number;
  unit: number;
}

/**
 * The policy's sustained rate as Envoy's `requests_per_unit` and `unit`: the smallest unit in which the
 * rate is a whole number of at least 1 (5 per 30 s is 10 per MINUTE, 14 per 7 days 14 per WEEK); otherwise
 * the smallest unit in which rounding down loses under 1%, else the one that loses least. Rounding is
 * always down, so the limit is never overstated, and never to 0: a rate below 1 per unit moves to a
 * larger unit. Only a rate below 1 per year is reported as 1 per YEAR.
 */
export function currentLimit(policy: Policy): CurrentLimit {
  const perMs = sustainedRate(policy);
  let best: CurrentLimit | undefined;
  let bestLoss = Number.POSITIVE_INFINITY;
  for (const [unit, ms] of REPORT_UNITS) {
    const exact = perMs * ms;
    const whole = Math.round(exact);
    if (whole >= 1 && Math.abs(exact - whole) <= 1e-9 * exact) return { requestsPerUnit: clampUint32(whole), unit };
    const down = Math.floor(exact);
    if (down < 1) continue;
    const loss = (exact - down) / exact;
    if (loss < bestLoss) {
      bestLoss = loss;
      best = { requestsPerUnit: clampUint32(down), unit };
    }
  }
  if (best === undefined) return { requestsPerUnit: 1, unit: 6 };
  // The smallest unit close enough, rather than the most precise one: 1542 per HOUR reads better than
  // 13515428 per YEAR for 3 per 7 s.
  for (const [unit, ms] of REPORT_UNITS) {
    const exact = perMs * ms;
    const down = Math.floor(exact);
    if (down >= 1 && (exact - down) / exact < ROUNDING_LOSS) return { requestsPerUnit: clampUint32(down), unit };
  }
  return best;
}

function clampUint32(n: number): number {
  return Math.min(n, 0xffffffff);
}

/** Writes `requests_per_unit` and `unit` of `current_limit`. */
function writeCurrentLimit(w: Writer, policy: Policy | undefined, limit: number): void {
  // Every decision names one of the descriptor's policies; without it only the quota is known.
  const { requestsPerUnit, unit } =
    policy === undefined
      ? { requestsPerUnit: clampUint32(Math.max(1, Math.floor(limit))), unit: 1 }
      : currentLimit(policy);
  w.uint(1, requestsPerUnit);
  w.uint(2, unit);
}
