import type { Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import type { Decision, Policy } from '../model/index.js';
import type { ConcurrencyPolicy } from '../permits/policy.js';
import { deniedProblem, headerWriter, seconds, validateHeaderFormat } from './headers.js';
import {
  isThenable,
  type MaybePromise,
  PROBLEM_CONTENT_TYPE,
  type RateLimitOptions,
  type RateLimitOutcome,
  statusCode,
} from './options.js';

/** Content types of a `message` option's body. */
const TEXT_CONTENT_TYPE = 'text/plain; charset=utf-8';
const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** Turns a decision into the response: status, rate-limit headers, and for a denial its body. */
export type Respond<Req> = (
  request: Req,
  key: string,
  cost: number,
  decision: Decision,
  policies: readonly Policy[],
  settle: RateLimitOutcome['settle'],
) => MaybePromise<RateLimitOutcome>;

/**
 * The second half of a middleware: the decision, computed first, becomes a status, headers and a body.
 * Validates the options it reads (`headers`, `quotaUnit`, `statusCode`, `degradedStatusCode`, `message`).
 */
export function responder<Req>(
  options: RateLimitOptions<Req>,
  clock: Clock,
  concurrency?: ConcurrencyPolicy,
): Respond<Req> {
  const format = validateHeaderFormat(options.headers);
  const unit = options.quotaUnit;
  if (unit !== undefined && (typeof unit !== 'string' || !/^[a-z][a-z0-9-]*$/.test(unit))) {
    throw invalid('ERR_INVALID_OPTION', 'quotaUnit', unit, "a lower-case unit name such as 'content-bytes'");
  }
  const writeHeaders = headerWriter({ format, quotaUnit: unit, concurrency });
  const deniedStatus = statusCode(options.statusCode, 'statusCode', 429);
  const busyStatus = statusCode(options.concurrencyStatusCode, 'concurrencyStatusCode', deniedStatus);
  const busyName = concurrency?.name;
  const degradedStatus = statusCode(options.degradedStatusCode, 'degradedStatusCode', 503);
  const message = options.message;
  if (message === null || (message !== undefined && !['string', 'object', 'function'].includes(typeof message))) {
    throw invalid('ERR_INVALID_OPTION', 'message', message, 'a string, a JSON value or a function');
  }
  const fixedMessage = message === undefined || typeof message === 'function' ? undefined : denialBody(message);
  const messageOf = typeof message === 'function' ? message : undefined;

  return (request, key, cost, decision, policies, settle) => {
    const headers: string[] = [];
    const degraded = decision.reason === 'degraded';
    // A decision made without the store knows nothing of the client's quota: no numbers to advertise.
    if (!degraded) writeHeaders(decision, policies, clock.nowUs() / 1000, headers);
    if (decision.allowed) return { key, cost, decision, allowed: true, status: 200, headers, body: undefined, settle };
    if (Number.isFinite(decision.retryAfterMs)) headers.push('Retry-After', String(seconds(decision.retryAfterMs)));
    headers.push('Cache-Control', 'no-store');
    const status = degraded ? degradedStatus : decision.policy === busyName ? busyStatus : deniedStatus;
    const denied = ({ body, contentType }: { body: string; contentType: string }): RateLimitOutcome => {
      headers.push('Content-Type', contentType);
      return { key, cost, decision, allowed: false, status, headers, body, settle: undefined };
    };
    if (fixedMessage !== undefined) return denied(fixedMessage);
    if (messageOf !== undefined) {
      const custom = messageOf(request, { key, cost, decision });
      return isThenable(custom) ? custom.then((value) => denied(denialBody(value))) : denied(denialBody(custom));
    }
    const problem = JSON.stringify(deniedProblem(decision, status, cost, policies, concurrency));
    return denied({ body: problem, contentType: PROBLEM_CONTENT_TYPE });
  };
}

/** The body and content type of a `message` option's value. */
function denialBody(value: unknown): { body: string; contentType: string } {
  if (typeof value === 'string') return { body: value, contentType: TEXT_CONTENT_TYPE };
  let body: string | undefined;
  try {
    body = JSON.stringify(value);
  } catch (error) {
    throw new FloodgateError('ERR_INVALID_OPTION', 'message cannot be sent as JSON', {
      option: 'message',
      cause: error,
    });
  }
  if (body === undefined) throw invalid('ERR_INVALID_OPTION', 'message', value, 'a string or a JSON value');
  return { body, contentType: JSON_CONTENT_TYPE };
}
