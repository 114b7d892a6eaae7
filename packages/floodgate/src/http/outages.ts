import type { FailurePolicy, Limiter, LimiterEvents } from '../limiter/limiter.js';
import { emitFloodgateWarning } from './warnings.js';

/** Limiters whose breaker openings are logged already (a limiter shared by several middlewares logs once). */
const reported = new WeakSet<Limiter>();

/** What calls get while the store is skipped, in words. */
export function failureInWords(failure: FailurePolicy): string {
  switch (failure) {
    case 'open':
      return "admitted without limiting (failure: 'open')";
    case 'closed':
      return "refused (failure: 'closed')";
    case 'throw':
      return "rejected with the store's error (failure: 'throw')";
    default:
      return 'decided by the fallback limiter (failure: { fallback })';
  }
}

/** The line logged when a limiter's breaker opens: the store, why, and what calls get meanwhile. */
export function outageMessage(limiter: Limiter, event: LimiterEvents['breaker']): string {
  const why = event.error === undefined ? '' : `: ${event.error.message}`;
  return `the ${limiter.store.name} store is failing${why}; until it answers again, requests are ${failureInWords(event.failure)}`;
}

/**
 * Logs one line (a `FloodgateWarning` with code `FLOODGATE_STORE_FAILING`) each time the limiter's
 * circuit breaker opens: never per request, so a dead store under load does not flood the logs.
 */
export function reportOutages(limiter: Limiter): void {
  if (reported.has(limiter)) return;
  reported.add(limiter);
  limiter.on('breaker', (event) => {
    if (event.state === 'open') emitFloodgateWarning('FLOODGATE_STORE_FAILING', outageMessage(limiter, event));
  });
}
