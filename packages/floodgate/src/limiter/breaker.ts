import { FloodgateError, invalid } from '../errors.js';

/** Options of the circuit breaker in front of a limiter's store. */
export interface BreakerOptions {
  /** Consecutive store failures (errors or timeouts) that open the breaker. @default 5 */
  failureThreshold?: number;
  /**
   * How long the breaker stays open before one call probes the store again, in ms. One probe at a time:
   * another call probes only when the probe in flight has no answer after `max(cooldownMs, timeoutMs,
   * 1000)`. @default 1000
   */
  cooldownMs?: number;
}

export type BreakerState = 'closed' | 'open' | 'half-open';

/** The shortest time a probe in flight holds the half-open breaker before another call may probe. */
export const MIN_PROBE_MS = 1000;

/**
 * Stops calling a failing store for a cool-down, then lets one call probe it: a success closes the
 * breaker, a failure opens it again. One probe at a time: a probe with no answer after
 * `max(cooldownMs, timeoutMs, 1000 ms)` lets a new one go. While open, calls are decided by the failure
 * policy at once, instead of each waiting for a timeout against a dead server.
 */
export class Breaker {
  private failures = 0;
  private openUntilMs = 0;
  private probing = false;
  /** When the probe in flight started, ms: one that never settles gives way to a new one `probeMs` later. */
  private probeStartMs = 0;
  /** How long a probe in flight holds the half-open breaker: `max(cooldownMs, timeoutMs, MIN_PROBE_MS)`. */
  readonly probeMs: number;
  state: BreakerState = 'closed';
  readonly failureThreshold: number;
  readonly cooldownMs: number;

  constructor(
    options: BreakerOptions,
    private readonly onChange: (state: BreakerState, error: FloodgateError | undefined) => void,
    /** The limiter's `timeoutMs`, if any: a probe is not stale before it could have timed out. */
    storeTimeoutMs?: number,
  ) {
    this.failureThreshold = options.failureThreshold ?? 5;
    this.cooldownMs = options.cooldownMs ?? 1000;
    if (!Number.isSafeInteger(this.failureThreshold) || this.failureThreshold < 1) {
      throw invalid('ERR_INVALID_OPTION', 'breaker.failureThreshold', options.failureThreshold, 'a positive integer');
    }
    if (typeof this.cooldownMs !== 'number' || !Number.isFinite(this.cooldownMs) || this.cooldownMs < 0) {
      throw invalid(
        'ERR_INVALID_OPTION',
        'breaker.cooldownMs',
        options.cooldownMs,
        'a finite number of milliseconds ≥ 0',
      );
    }
    this.probeMs = Math.max(this.cooldownMs, storeTimeoutMs ?? 0, MIN_PROBE_MS);
  }

  /** Whether a call may go to the store now; undefined means yes, an error means answer without it. */
  admit(nowMs: number): FloodgateError | undefined {
    if (this.state === 'closed') return undefined;
    if (this.state === 'open' && nowMs >= this.openUntilMs) {
      this.set('half-open');
    }
    // A probe with no answer (a lost request, no `timeoutMs`) would hold the breaker half-open forever:
    // after `probeMs` another call probes instead. Not sooner, even with `cooldownMs: 0`: one probe at a time.
    if (this.state === 'half-open' && (!this.probing || nowMs >= this.probeStartMs + this.probeMs)) {
      this.probing = true;
      this.probeStartMs = nowMs;
      return undefined;
    }
    if (this.state === 'half-open') {
      return new FloodgateError(
        'ERR_STORE_UNAVAILABLE',
        `the store is failing: a probe is in flight, the next one in ${Math.max(0, Math.ceil(this.probeStartMs + this.probeMs - nowMs))} ms at most (circuit breaker half-open)`,
      );
    }
    return new FloodgateError(
      'ERR_STORE_UNAVAILABLE',
      `the store is failing: calls skip it for ${Math.max(0, Math.ceil(this.openUntilMs - nowMs))} ms more (circuit breaker open)`,
    );
  }

  success(): void {
    this.failures = 0;
    this.probing = false;
    if (this.state !== 'closed') this.set('closed');
  }

  /** A call that ended without telling whether the store works (an invalid call): only frees the probe. */
  release(): void {
    this.probing = false;
  }

  /** A store fault (`error`, which the `breaker` event of an opening carries). */
  failure(nowMs: number, error?: FloodgateError): void {
    this.failures++;
    const wasProbe = this.probing;
    this.probing = false;
    if (wasProbe || this.failures >= this.failureThreshold) {
      this.openUntilMs = nowMs + this.cooldownMs;
      if (this.state !== 'open') this.set('open', error);
    }
  }

  /** ms until the breaker lets a probe through (0 when closed). */
  retryAfterMs(nowMs: number): number {
    return this.state === 'open' ? Math.max(0, Math.ceil(this.openUntilMs - nowMs)) : 0;
  }

  private set(state: BreakerState, error?: FloodgateError): void {
    this.state = state;
    this.onChange(state, error);
  }
}
