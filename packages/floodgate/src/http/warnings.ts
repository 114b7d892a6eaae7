/**
 * Codes of the warnings floodgate emits: a middleware's, each once per middleware (and the ones derived
 * from it), except `FLOODGATE_STORE_FAILING`, once each time its limiter's circuit breaker opens; and the
 * Redis store's, once per store (its server's eviction settings).
 */
export type FloodgateWarningCode =
  | 'FLOODGATE_STORE_FAILING'
  | 'FLOODGATE_UNTRUSTED_PROXY'
  | 'FLOODGATE_UNKNOWN_ADDRESS'
  | 'FLOODGATE_SETTLE_FAILED'
  | 'FLOODGATE_RELEASE_FAILED'
  | 'FLOODGATE_REDIS_EVICTION'
  | 'FLOODGATE_REDIS_POLICY_UNKNOWN';

/**
 * Emits a `FloodgateWarning` as a process warning (`process.on('warning', …)` sees it, with its
 * `code`); where there is no `process` (a browser, some edge runtimes), on `console.warn`.
 */
export function emitFloodgateWarning(code: FloodgateWarningCode, message: string): void {
  const proc = (globalThis as { process?: { emitWarning?: (message: string, options: object) => void } }).process;
  if (typeof proc?.emitWarning === 'function') proc.emitWarning(message, { type: 'FloodgateWarning', code });
  else console.warn(`FloodgateWarning [${code}]: ${message}`);
}

/** What a middleware and the ones derived from it share: which warnings went out. */
export interface Shared {
  warned: Set<FloodgateWarningCode>;
  /** The framework trusts a proxy, or a proxy header already drew the warning: stop looking. */
  proxyChecked: boolean;
}

/** Emits a warning once per middleware (and the ones derived from it). */
export function warnOnce(shared: Shared, code: FloodgateWarningCode, text: string): void {
  if (shared.warned.has(code)) return;
  shared.warned.add(code);
  emitFloodgateWarning(code, text);
}
