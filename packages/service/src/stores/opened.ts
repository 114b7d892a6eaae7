import type { PermitStore, Store } from 'floodgate';
import type { OverrideBackend } from 'floodgate/overrides';

/** A store opened from a URL, with what the service needs to release it. */
export interface OpenedStore {
  readonly store: Store;
  /** The URL without its password, for logs. */
  readonly description: string;
  /** Closes the store and the client the service created for it. */
  close(): Promise<void>;
  /** Where the store keeps stored overrides (its own keys or table), for the admin API. */
  readonly overrides?: OverrideBackend;
  /** Where the store keeps concurrency permits, when it can (memory, Redis). */
  readonly permits?: PermitStore;
  /** Readies the store (creates its tables); retried by readiness probes until it succeeds. */
  prepare?(): Promise<void>;
}

/** A store URL the service cannot use (unknown scheme, bad form); the CLI exits with code 4. */
export class StoreUrlError extends Error {
  override readonly name = 'StoreUrlError';
}

/** The URL with any password replaced by `***`. */
export function redact(url: string): string {
  return url.replace(/\/\/([^:@/]*):([^@/]*)@/, '//$1:***@');
}
