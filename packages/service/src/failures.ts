import { isFloodgateError } from 'floodgate';
import { RequestError } from './engine.js';

/** How a failed call is answered, whatever the API. */
export type FailureKind = 'invalid' | 'unavailable' | 'timeout' | 'internal';

/** A failure sorted into what the caller should be told. */
export interface Failure {
  readonly kind: FailureKind;
  readonly message: string;
  /** The request field at fault, for `invalid`. */
  readonly field: string | undefined;
  /** True when the store failed (counted and logged as such). */
  readonly store: boolean;
}

/**
 * Sorts an error thrown while answering a call, following the library's classes of store errors
 * (`classifyStoreError`): invalid input is the caller's (400, INVALID_ARGUMENT); a store fault is
 * unavailability (503 or 504, UNAVAILABLE or DEADLINE_EXCEEDED, so Envoy applies its failure mode); a
 * store's rejection of one call is an internal error (500, INTERNAL), never unavailability, and never
 * counted as a store failure; a full store (memory store refusing new keys, under `--failure throw`) is
 * unavailability for that key but the store is healthy, so not a store failure either.
 */
export function classify(error: unknown, storeName: string): Failure {
  if (error instanceof RequestError) {
    return { kind: error.kind, message: error.message, field: error.field, store: false };
  }
  if (isFloodgateError(error)) {
    switch (error.code) {
      case 'ERR_INVALID_COST':
      case 'ERR_INVALID_KEY':
      case 'ERR_INVALID_OPTION':
      case 'ERR_INVALID_POLICY':
        return { kind: 'invalid', message: error.message, field: error.option, store: false };
      case 'ERR_TIMEOUT':
        return { kind: 'timeout', message: error.message, field: undefined, store: true };
      // The caller hears which store and what it means, never the driver's own words (its log line has them).
      case 'ERR_STORE_UNAVAILABLE':
        return {
          kind: 'unavailable',
          message: `the ${storeName} store is unavailable (it does not answer, or fails): decisions resume when it answers`,
          field: undefined,
          store: true,
        };
      // A store of another version says what to do about it: its own message.
      case 'ERR_STORE_VERSION':
        return { kind: 'unavailable', message: error.message, field: undefined, store: true };
      case 'ERR_STORE_PROTOCOL':
        return {
          kind: 'unavailable',
          message: `the ${storeName} store answered what the service cannot read`,
          field: undefined,
          store: true,
        };
      case 'ERR_CLOSED':
        return { kind: 'unavailable', message: `the ${storeName} store is closed`, field: undefined, store: true };
      case 'ERR_STORE_FULL':
        return { kind: 'unavailable', message: error.message, field: undefined, store: false };
      case 'ERR_STORE_REJECTED':
        return { kind: 'internal', message: error.message, field: undefined, store: false };
      default:
        return { kind: 'internal', message: error.message, field: undefined, store: false };
    }
  }
  return {
    kind: 'internal',
    message: error instanceof Error ? error.message : String(error),
    field: undefined,
    store: false,
  };
}

/** HTTP status of each failure kind. */
export const HTTP_STATUS: Record<FailureKind, number> = {
  invalid: 400,
  unavailable: 503,
  timeout: 504,
  internal: 500,
};
