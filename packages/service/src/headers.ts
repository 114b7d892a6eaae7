import type { Policy, PolicyDecision } from 'floodgate';
import type { DescriptorOutcome } from './engine.js';

/** A response header, as Envoy's `HeaderValue` carries it. */
export interface Header {
  readonly key: string;
  readonly value: string;
}

/** Seconds a policy's quota refers to: its period, window, or the time an empty bucket takes to fill. */
export function windowSeconds(policy: Policy): number {
  let ms: number;
  switch (policy.algorithm) {
    case 'gcra':
      ms = policy.periodMs;
      break;
    case 'token-bucket':
      ms = (policy.capacity / policy.refillAmount) * policy.refillIntervalMs;
      break;
    case 'leaky-bucket':
      ms = (policy.capacity / policy.leakPerSecond) * 1000;
      break;
    default:
      ms = policy.windowMs;
  }
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * The IETF rate limit headers of a set of outcomes (draft-ietf-httpapi-ratelimit-headers):
 * `RateLimit-Policy: "per-ip";q=100;w=60` and `RateLimit: "per-ip";r=42;t=17`, one item per policy of
 * every descriptor that was decided outside shadow mode, plus `Retry-After` (whole seconds, rounded up)
 * when the request is over the limit and waiting can help.
 */
export function rateLimitHeaders(outcomes: readonly DescriptorOutcome[]): Header[] {
  // By policy name: when two descriptors share a name, the one with least left is what a client meets.
  const items = new Map<string, { policy: Policy; part: PolicyDecision }>();
  let retryAfterMs = 0;
  let over = false;
  for (const o of outcomes) {
    const decision = o.decision;
    if (decision === undefined || o.shadow || o.policies === undefined) continue;
    if (!decision.allowed) {
      over = true;
      if (decision.retryAfterMs > retryAfterMs) retryAfterMs = decision.retryAfterMs;
    }
    const parts = decision.policies;
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as PolicyDecision;
      const seen = items.get(part.policy);
      if (seen === undefined || part.remaining < seen.part.remaining) {
        items.set(part.policy, { policy: o.policies[i] as Policy, part });
      }
    }
  }
  if (items.size === 0) return [];
  let policyField = '';
  let stateField = '';
  for (const [name, { policy, part }] of items) {
    const sep = policyField === '' ? '' : ', ';
    policyField += `${sep}"${name}";q=${Math.floor(part.limit)};w=${windowSeconds(policy)}`;
    const waitMs = part.allowed ? part.resetAfterMs : part.retryAfterMs;
    const t = Number.isFinite(waitMs) ? Math.ceil(waitMs / 1000) : Math.ceil(part.resetAfterMs / 1000);
    stateField += `${sep}"${name}";r=${Math.max(0, Math.floor(part.remaining))};t=${t}`;
  }
  const headers: Header[] = [
    { key: 'RateLimit-Policy', value: policyField },
    { key: 'RateLimit', value: stateField },
  ];
  if (over && Number.isFinite(retryAfterMs)) {
    headers.push({ key: 'Retry-After', value: String(Math.max(1, Math.ceil(retryAfterMs / 1000))) });
  }
  return headers;
}
