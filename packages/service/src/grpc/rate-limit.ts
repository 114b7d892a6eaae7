import type { Policy } from 'floodgate';
import { windowSeconds } from 'floodgate/http';
import type { DecisionRequest, DescriptorOutcome, DescriptorRequest } from '../engine.js';
import type { RateLimitHeaders } from '../headers.js';
import type { RateLimitRequestMessage, Writer } from './codec.js';

/** Envoy's RateLimitUnit numbers, by the names the engine uses for request overrides. */
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

/** RateLimitResponse.RateLimit.Unit numbers with their length in seconds, largest first. */
const UNITS: readonly [number, number][] = [
  [6, 31_536_000],
  [5, 2_592_000],
  [7, 604_800],
  [4, 86_400],
  [3, 3600],
  [2, 60],
  [1, 1],
];

const CODE_OK = 1;
const CODE_OVER_LIMIT = 2;

/** Envoy's request as the engine's: `hits_addend` 0 means 1; a descriptor's own `hits_addend` wins. */
export function toDecisionRequest(message: RateLimitRequestMessage): DecisionRequest {
  const list = message.descriptors;
  const descriptors = new Array<DescriptorRequest>(list.length);
  for (let i = 0; i < list.length; i++) {
    const d = list[i] as RateLimitRequestMessage['descriptors'][number];
    const limit =
      d.requestsPerUnit > 0
        ? { requestsPerUnit: d.requestsPerUnit, unit: UNIT_NAMES[d.unit] ?? `unit ${d.unit}` }
        : undefined;
    descriptors[i] = { entries: d.entries, cost: d.hitsAddend, limit };
  }
  return { domain: message.domain, descriptors, cost: message.hitsAddend === 0 ? 1 : message.hitsAddend };
}

/**
 * Writes Envoy's RateLimitResponse for the engine's outcomes: the overall code, one status per
 * descriptor in order, and the IETF rate limit headers to add to the response.
 */
export function encodeRateLimitResponse(
  w: Writer,
  outcomes: readonly DescriptorOutcome[],
  headerMaker: RateLimitHeaders,
): void {
  let over = false;
  for (let i = 0; i < outcomes.length; i++) if ((outcomes[i] as DescriptorOutcome).code === 'OVER_LIMIT') over = true;
  w.uint(1, over ? CODE_OVER_LIMIT : CODE_OK);
  for (let i = 0; i < outcomes.length; i++) {
    const o = outcomes[i] as DescriptorOutcome;
    const status = w.open(2);
    w.uint(1, o.code === 'OVER_LIMIT' ? CODE_OVER_LIMIT : CODE_OK);
    const d = o.decision;
    if (d !== undefined) {
      const policies = o.policies as readonly Policy[];
      let policy: Policy | undefined;
      for (let j = 0; j < policies.length; j++) if ((policies[j] as Policy).name === d.policy) policy = policies[j];
      const limit = w.open(2);
      writeCurrentLimit(w, policy, d.limit);
      w.string(3, d.policy);
      w.close(limit);
      w.uint(3, Math.min(Math.max(0, Math.floor(d.remaining)), 0xffffffff));
      const resetMs = Number.isFinite(d.resetAfterMs) ? d.resetAfterMs : 0;
      const duration = w.open(4);
      w.uint(1, Math.floor(resetMs / 1000));
      w.uint(2, (resetMs % 1000) * 1_000_000);
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
}

/** `requests_per_unit` and `unit`: the policy's quota per the largest unit that fits in its window. */
function writeCurrentLimit(w: Writer, policy: Policy | undefined, limit: number): void {
  const seconds = policy === undefined ? 1 : windowSeconds(policy);
  for (const [unit, unitSeconds] of UNITS) {
    if (unitSeconds <= seconds) {
      w.uint(1, Math.min(Math.max(1, Math.floor((limit * unitSeconds) / seconds)), 0xffffffff));
      w.uint(2, unit);
      return;
    }
  }
}
