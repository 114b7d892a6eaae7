export { addressKey, type Cidr, formatIp, type IpAddress, NAMED_NETWORKS, parseIp } from './address.js';
export { clientAddress, type ForwardedHeader, forwardedFor, type TrustProxy } from './client-address.js';
export {
  createHttpRateLimiter,
  type DenialBody,
  type DenialMessage,
  type FloodgateWarningCode,
  type HttpRateLimiter,
  type MaybePromise,
  type PoliciesOption,
  PROBLEM_CONTENT_TYPE,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  type RequestAccess,
  withLimiter,
} from './core.js';
export {
  deniedProblem,
  type HeaderFormat,
  type HeaderWriter,
  headerWriter,
  type Problem,
  policyLimit,
  QUOTA_EXCEEDED,
  TEMPORARY_REDUCED_CAPACITY,
  windowSeconds,
} from './headers.js';
