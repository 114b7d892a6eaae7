import { FloodgateError } from '../errors.js';
import { giveBack } from '../limiter/leasing.js';
import type { Limiter } from '../limiter/limiter.js';
import type { Policy } from '../model/index.js';
import { afterResponse, settleFailed } from './after-response.js';
import { optionalBoolean, type RateLimitOptions, type RateLimitOutcome } from './options.js';
import type { Shared } from './warnings.js';

/** Gives a request's cost back after its response, as `skipFailedRequests` and `skipSuccessfulRequests` say. */
export interface Refunds<Req> {
  /** Throws `ERR_INVALID_OPTION` when a policy's calls cannot be given back after the response. */
  check(policies: readonly Policy[]): void;
  /**
   * The `settle` of an admitted request whose cost was leased at `atUs`: decides once, after the response,
   * whether the cost comes back.
   */
  settler(
    request: Req,
    key: string,
    cost: number,
    policies: readonly Policy[] | undefined,
    atUs: number,
  ): NonNullable<RateLimitOutcome['settle']>;
}

/** Why a policy's calls cannot be given back after the response, or undefined when they can. */
function refundRefusal(policy: Policy): string | undefined {
  if (policy.algorithm === 'leaky-bucket' && policy.mode === 'queue') {
    return 'a leaky bucket in queue mode has booked the calls behind it by then';
  }
  return undefined;
}

/** The refunds of a middleware, or undefined when it gives nothing back (the default). */
export function refunds<Req>(
  options: RateLimitOptions<Req>,
  limiter: Limiter,
  shared: Shared,
): Refunds<Req> | undefined {
  const skipFailed = optionalBoolean(options.skipFailedRequests, 'skipFailedRequests');
  const skipSuccessful = optionalBoolean(options.skipSuccessfulRequests, 'skipSuccessfulRequests');
  if (!skipFailed && !skipSuccessful) return undefined;
  const option = skipSuccessful ? 'skipSuccessfulRequests' : 'skipFailedRequests';
  const wasSuccessful = options.requestWasSuccessful;
  // A throwing `requestWasSuccessful` leaves the request counted: the conservative side.
  const failed = settleFailed(shared, 'requestWasSuccessful threw, so the request stays counted');
  return {
    check(policies) {
      for (const policy of policies) {
        const reason = refundRefusal(policy);
        if (reason !== undefined) {
          throw new FloodgateError(
            'ERR_INVALID_OPTION',
            `${option} cannot give back a request under policy ${JSON.stringify(policy.name)}: ${reason}`,
            { option },
          );
        }
      }
    },
    settler(request, key, cost, policies, atUs) {
      const refund = (succeeded: boolean): Promise<void> | undefined => {
        if (!(succeeded ? skipSuccessful : skipFailed)) return undefined;
        const call = policies === undefined ? undefined : { policies };
        return giveBack(limiter, key, cost, atUs, cost, call).then(() => undefined);
      };
      // Cut short, nothing comes back: the work was done whoever hung up, and a refund would reward hanging up.
      return afterResponse(
        (statusCode) => (wasSuccessful === undefined ? statusCode < 400 : wasSuccessful(request, statusCode)),
        (ok) => refund(ok === true),
        failed,
      );
    },
  };
}
