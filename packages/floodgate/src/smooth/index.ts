export {
  type SmoothAcquireOptions,
  SmoothLimiter,
  type SmoothLimiterOptions,
  smoothLimiter,
} from './smooth-limiter.js';
