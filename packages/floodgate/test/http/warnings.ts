import type { FloodgateWarningCode } from '../../src/http/index.js';

/** Listens to floodgate's process warnings until `stop()`; `codes()` lists their codes in order. */
export function collectWarnings() {
  const seen: (Error & { code?: FloodgateWarningCode })[] = [];
  const listener = (warning: Error & { code?: FloodgateWarningCode }) => {
    if (warning.name === 'FloodgateWarning') seen.push(warning);
  };
  process.on('warning', listener);
  return {
    warnings: seen,
    codes: () => seen.map((warning) => warning.code),
    /** Process warnings are emitted on the next tick: wait for the ones already emitted. */
    flush: () => new Promise<void>((resolve) => setImmediate(resolve)),
    stop: () => process.off('warning', listener),
  };
}
