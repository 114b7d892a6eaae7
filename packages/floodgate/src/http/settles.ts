import { FloodgateError } from '../errors.js';
import type { Limiter } from '../limiter/limiter.js';
import { requireSettleable } from '../limiter/settle.js';
import { compilePolicy } from '../model/compile.js';
import type { Decision, Policy } from '../model/index.js';
import { afterResponse, settleFailed } from './after-response.js';
import { optionalFunction, type RateLimitOptions, type RateLimitOutcome } from './options.js';
import type { Shared } from './warnings.js';

// The `settle` option: a request's `cost` is an estimate, charged when it is admitted, and once its
// response is over the request is charged what `settle` says it really cost (`limiter.settle`: above the
// estimate a debt, below it the difference back). A response cut short stays at its estimate, never at zero:
// hanging up must not make a request cheaper.
export interface Settles<Req> {
  // Throws `ERR_INVALID_OPTION` when a policy's calls cannot be settled (meters only).
  check(policies: readonly Policy[]): void;
  // Decides a request with its cost as an estimate: the decision, and the outcome's `settle` when admitted.
  limit(
    request: Req,
    key: string,
    cost: number,
    policies: readonly Policy[] | undefined,
  ): Promise<[Decision, RateLimitOutcome['settle']]>;
  // The outcome's `settle` of an admitted request: settles it once, after the response.
  settler(
    request: Req,
    key: string,
    decision: Decision,
    policies: readonly Policy[] | undefined,
  ): RateLimitOutcome['settle'];
}

// The settles of a middleware, or undefined without the `settle` option.
export function settles<Req>(
  options: RateLimitOptions<Req>,
  limiter: Limiter,
  shared: Shared,
): Settles<Req> | undefined {
  const actualOf = options.settle;
  if (actualOf === undefined) return undefined;
  optionalFunction(actualOf, 'settle');
  if (options.skipFailedRequests === true || options.skipSuccessfulRequests === true) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      'settle cannot be combined with skipFailedRequests or skipSuccessfulRequests: return 0 from settle for a request that should not count',
      { option: 'settle' },
    );
  }
  const failed = settleFailed(shared, 'settle failed, so the request stays charged its estimate');
  return {
    limit(request, key, cost, policies) {
      const estimated = policies === undefined ? { cost, settle: true } : { cost, policies, settle: true };
      return limiter.limit(key, estimated).then((d) => [d, this.settler(request, key, d, policies)]);
    },
    check(policies) {
      requireSettleable(policies.map(compilePolicy), 'settle');
    },
    settler(request, key, decision, policies) {
      if (decision.settlement === undefined) return undefined;
      const charge = (actual: number): Promise<void> =>
        limiter
          .settle(key, decision, policies === undefined ? { cost: actual } : { cost: actual, policies })
          .then(() => undefined, failed);
      // Cut short: the work may have been done; the estimate stays charged.
      return afterResponse((statusCode) => actualOf(request, statusCode), charge, failed);
    },
  };
}
