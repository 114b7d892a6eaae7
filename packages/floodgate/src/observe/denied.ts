import { type Clock, systemClock } from '../clock.js';
import { invalid } from '../errors.js';
import { localKey } from '../keys.js';
import type { Limiter } from '../limiter/limiter.js';
import { TopKeys, type TopKeysOptions, type TopKeysReport } from './top-keys.js';

/** Options of {@link trackDenied}. */
export interface TrackDeniedOptions extends TopKeysOptions {
  /** The clock of the intervals. @default systemClock */
  clock?: Clock;
  /** The tenant of a key, to count denied tenants too (a tenant has the weight of its keys' denials). */
  tenantOf?: (key: string) => string | undefined;
}

/** The most denied keys (and tenants) of a limiter; see {@link trackDenied}. */
export interface DeniedTracker {
  readonly keys: TopKeys;
  readonly tenants: TopKeys | undefined;
  /** The `n` most denied keys (and tenants) over the current and the previous interval. */
  report(n?: number): { keys: TopKeysReport; tenants?: TopKeysReport };
  /** Stops counting. */
  stop(): void;
}

/**
 * Counts a limiter's denials per key (and per tenant) in fixed memory: two intervals of `capacity`
 * Space-Saving counters each, whatever the traffic. A reported count over-estimates the key's true
 * denials by at most its `error`, itself at most (denials in the report's span) / `capacity`; every key
 * denied more than that is listed. Keys longer than 200 characters are counted under their digest.
 * Only denials the store (or the blocked-key cache) made are counted, not those made without it.
 *
 * @example
 * ```ts
 * const denied = trackDenied(limiter, { capacity: 1000, intervalMs: 60_000 });
 * console.log(denied.report(10).keys.keys);
 * ```
 */
export function trackDenied(limiter: Limiter, options: TrackDeniedOptions = {}): DeniedTracker {
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', 'trackDenied(options)', options, 'an options object');
  }
  const { clock = systemClock, tenantOf, ...sizes } = options;
  if (tenantOf !== undefined && typeof tenantOf !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'tenantOf', tenantOf, 'a function');
  }
  const keys = new TopKeys(sizes);
  const tenants = tenantOf === undefined ? undefined : new TopKeys(sizes);
  const nowMs = () => clock.nowUs() / 1000;
  const stop = limiter.on('decision', (event) => {
    if (!event.commit || event.decision.allowed || event.source === 'degraded') return;
    const now = nowMs();
    keys.record(localKey(event.key), now);
    const tenant = tenantOf?.(event.key);
    if (tenants !== undefined && typeof tenant === 'string' && tenant !== '') tenants.record(localKey(tenant), now);
  });
  return {
    keys,
    tenants,
    report(n = 10) {
      const now = nowMs();
      const out: { keys: TopKeysReport; tenants?: TopKeysReport } = { keys: keys.top(n, now) };
      if (tenants !== undefined) out.tenants = tenants.top(n, now);
      return out;
    },
    stop,
  };
}
