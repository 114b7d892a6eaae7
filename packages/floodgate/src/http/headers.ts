import { invalid } from '../errors.js';
import { type Decision, type Policy, type PolicyDecision, quotaOf } from '../model/index.js';
import type { ConcurrencyPolicy } from '../permits/policy.js';

/**
 * Which rate-limit headers a response carries:
 * - `'ietf'`: `RateLimit-Policy` and `RateLimit` of the current IETF HTTPAPI draft (the structured-field
 *   lists of named policies introduced in draft-08 and kept through draft-11):
 *   `RateLimit-Policy: "name";q=100;w=60` and `RateLimit: "name";r=42;t=18`, one item per policy.
 * - `'draft-7'`: `RateLimit: limit=100, remaining=42, reset=18` (a dictionary for the binding policy) and
 *   `RateLimit-Policy: 100;w=60`.
 * - `'draft-6'`: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` and `RateLimit-Policy`.
 * - `'legacy'`: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (epoch seconds, as
 *   GitHub sends them).
 * - `'none'`: no rate-limit headers (denials still carry `Retry-After`).
 */
export type HeaderFormat = 'ietf' | 'draft-7' | 'draft-6' | 'legacy' | 'none';

const FORMATS: readonly HeaderFormat[] = ['ietf', 'draft-7', 'draft-6', 'legacy', 'none'];

/** Validates a {@link HeaderFormat}. */
export function validateHeaderFormat(format: unknown): HeaderFormat {
  if (format === undefined) return 'ietf';
  if (!(FORMATS as readonly unknown[]).includes(format)) {
    throw invalid('ERR_INVALID_OPTION', 'headers', format, FORMATS.map((f) => `'${f}'`).join(', '));
  }
  return format as HeaderFormat;
}

/** Whole seconds, rounded up, from milliseconds. */
export function seconds(ms: number): number {
  return ms <= 0 ? 0 : Math.ceil(ms / 1000);
}

/**
 * The window of a policy in whole seconds (at least 1), for `w`: how long a key takes to go from fully
 * spent back to untouched, so `q` per `w` is the policy's sustained rate and `q` its largest burst.
 */
export function windowSeconds(policy: Policy): number {
  return Math.max(1, seconds(Math.round(quotaOf(policy).windowMs * 1000) / 1000));
}

/** Largest cost a policy admits at once: `q`. */
export function policyLimit(policy: Policy): number {
  return quotaOf(policy).burst;
}

const quoted = new Map<string, string>();

/** A structured-field string (RFC 9651 §3.3.3): quotes and backslashes escaped; names repeat, so remembered. */
function sfString(value: string): string {
  let text = quoted.get(value);
  if (text === undefined) {
    text = `"${value.replace(/[\\"]/g, '\\$&')}"`;
    if (quoted.size < 10_000) quoted.set(value, text);
  }
  return text;
}

/** The `t`/`reset` of a policy: until this call could pass when it denied, else until fully restored. */
function resetSeconds(part: PolicyDecision | Decision): number {
  return !part.allowed && Number.isFinite(part.retryAfterMs) ? seconds(part.retryAfterMs) : seconds(part.resetAfterMs);
}

/** Options of {@link headerWriter}. */
export interface HeaderWriterOptions {
  format: HeaderFormat;
  /** `qu` of `RateLimit-Policy` (`'requests'`, `'content-bytes'`, …); omitted when unset. */
  quotaUnit?: string | undefined;
  /**
   * The concurrency policy decided beside the rate policies, if any. In the `'ietf'` format it is an item
   * of its own: `RateLimit-Policy: "concurrency";q=2;qu="concurrent-requests"` (no window: the quota is
   * of requests in flight, not per period) and `RateLimit: "concurrency";r=1` (`t`, the seconds until a
   * lease is sure to have run out, only on a refusal).
   */
  concurrency?: ConcurrencyPolicy | undefined;
}

/** The quota unit of a concurrency policy (the draft's RateLimit Quota Units registry). */
export const CONCURRENT_REQUESTS = 'concurrent-requests';

/**
 * Appends the rate-limit headers of a decision to `out` as name, value pairs. `policies` are the
 * policies the decision was made under, in order; `nowMs` (wall clock) is used by the legacy epoch reset.
 */
export type HeaderWriter = (decision: Decision, policies: readonly Policy[], nowMs: number, out: string[]) => void;

/** Builds the writer of one header format; policy headers are computed once per list of policies. */
export function headerWriter(options: HeaderWriterOptions): HeaderWriter {
  const { format } = options;
  const unit = options.quotaUnit === undefined ? '' : `;qu=${sfString(options.quotaUnit)}`;
  const concurrency = options.concurrency;
  const concurrencyItem =
    concurrency === undefined
      ? ''
      : `${sfString(concurrency.name)};q=${concurrency.limit};qu=${sfString(CONCURRENT_REQUESTS)}`;
  const policyHeaders = new WeakMap<readonly Policy[], string>();
  const policyHeader = (policies: readonly Policy[]): string => {
    let value = policyHeaders.get(policies);
    if (value === undefined) {
      value = policies
        .map((policy) => {
          const limit = Math.floor(policyLimit(policy));
          return format === 'ietf'
            ? `${sfString(policy.name)};q=${limit};w=${windowSeconds(policy)}${unit}`
            : `${limit};w=${windowSeconds(policy)}`;
        })
        .join(', ');
      if (format === 'ietf' && concurrencyItem !== '')
        value = value === '' ? concurrencyItem : `${value}, ${concurrencyItem}`;
      policyHeaders.set(policies, value);
    }
    return value;
  };

  switch (format) {
    case 'none':
      return () => {};
    case 'ietf':
      return (decision, policies, _nowMs, out) => {
        const parts = decision.policies;
        let value = '';
        for (let i = 0; i < parts.length; i++) {
          const part = parts[i] as PolicyDecision;
          if (i > 0) value += ', ';
          if (concurrency !== undefined && part.policy === concurrency.name) {
            value += `${sfString(part.policy)};r=${part.remaining}`;
            if (!part.allowed && Number.isFinite(part.retryAfterMs)) value += `;t=${seconds(part.retryAfterMs)}`;
          } else {
            value += `${sfString(part.policy)};r=${part.remaining};t=${resetSeconds(part)}`;
          }
        }
        out.push('RateLimit-Policy', policyHeader(policies), 'RateLimit', value);
      };
    case 'draft-7':
      return (decision, policies, _nowMs, out) => {
        out.push(
          'RateLimit-Policy',
          policyHeader(policies),
          'RateLimit',
          `limit=${Math.floor(decision.limit)}, remaining=${decision.remaining}, reset=${resetSeconds(decision)}`,
        );
      };
    case 'draft-6':
      return (decision, policies, _nowMs, out) => {
        out.push(
          'RateLimit-Policy',
          policyHeader(policies),
          'RateLimit-Limit',
          String(Math.floor(decision.limit)),
          'RateLimit-Remaining',
          String(decision.remaining),
          'RateLimit-Reset',
          String(resetSeconds(decision)),
        );
      };
    case 'legacy':
      return (decision, _policies, nowMs, out) => {
        out.push(
          'X-RateLimit-Limit',
          String(Math.floor(decision.limit)),
          'X-RateLimit-Remaining',
          String(decision.remaining),
          'X-RateLimit-Reset',
          String(Math.ceil((nowMs + resetSeconds(decision) * 1000) / 1000)),
        );
      };
  }
}

/** Problem type of a request denied by a quota policy (draft-ietf-httpapi-ratelimit-headers §5.1). */
export const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
/** Problem type of a request refused while the limiter works without its store (§5.2). */
export const TEMPORARY_REDUCED_CAPACITY = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';

/** An RFC 9457 problem details object, as the middleware sends it. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  'violated-policies': string[];
}

/** The problem details of a denial: which policies refused, and why. */
export function deniedProblem(
  decision: Decision,
  status: number,
  cost: number,
  policies: readonly Policy[],
  concurrency?: ConcurrencyPolicy,
): Problem {
  const violated = decision.policies.filter((p) => !p.allowed).map((p) => p.policy);
  if (violated.length === 0) violated.push(decision.policy);
  if (decision.reason === 'degraded') {
    return {
      type: TEMPORARY_REDUCED_CAPACITY,
      title: 'Request cannot be satisfied due to temporary server capacity constraints',
      status,
      detail: 'The rate limiter cannot reach its store and refuses requests until it can; retry shortly.',
      'violated-policies': violated,
    };
  }
  let detail: string;
  const policy = JSON.stringify(decision.policy);
  const bound = policies.find((p) => p.name === decision.policy);
  const rate = bound === undefined ? `${decision.limit}` : `${policyLimit(bound)} per ${windowSeconds(bound)} s`;
  if (concurrency !== undefined && decision.policy === concurrency.name && decision.reason !== 'exceeds-capacity') {
    detail = `Policy ${policy} admits ${concurrency.limit} in flight at once and has ${decision.remaining} free, fewer than this request needs (${cost}); retry when one ends (within ${seconds(decision.retryAfterMs)} s at most).`;
  } else if (decision.reason === 'exceeds-capacity') {
    detail = `This request costs ${cost}, more than policy ${policy} admits at once (${decision.limit}); it can never pass as it is.`;
  } else if (decision.reason === 'blocked') {
    detail = `Policy ${policy} blocks this client; retry in ${seconds(decision.retryAfterMs)} s.`;
  } else if (decision.remaining > 0) {
    // Part of the quota is left, less than this request costs: it is not used up.
    detail = `This request costs ${cost}, more than the ${decision.remaining} that remain of policy ${policy} (${rate}); retry in ${seconds(decision.retryAfterMs)} s.`;
  } else {
    detail = `Policy ${policy} (${rate}) is used up; retry in ${seconds(decision.retryAfterMs)} s.`;
  }
  return {
    type: QUOTA_EXCEEDED,
    title: 'Request cannot be satisfied as assigned quota has been exceeded',
    status,
    detail,
    'violated-policies': violated,
  };
}
