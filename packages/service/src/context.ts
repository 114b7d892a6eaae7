import type { Overrides } from 'floodgate/overrides';
import type { Logger } from 'pino';
import type { AdminAuth } from './admin/auth.js';
import type { Engine } from './engine.js';
import type { RateLimitHeaders } from './headers.js';
import type { Metrics } from './metrics.js';
import type { DecisionStats } from './stats.js';

/** What the API servers need from the running service. */
export interface ServiceContext {
  /** The engine of the config in use; replaced on reload, so read it once per request. */
  readonly engine: Engine;
  readonly metrics: Metrics;
  readonly stats: DecisionStats;
  /** Turns outcomes into rate-limit response headers, in the configured format. */
  readonly headers: RateLimitHeaders;
  readonly logger: Logger;
  /** True once shutdown began: new calls are refused, in-flight ones finish. */
  readonly draining: boolean;
  /** envoyproxy/ratelimit's global `SHADOW_MODE`: every gRPC call is answered OK overall. */
  readonly shadowMode: boolean;
  /** Name of the store (`memory`, `redis`, …). */
  readonly storeName: string;
  /** Probes the store (cached briefly); false when it is unreachable. */
  probeStore(): Promise<boolean>;
  /** A summary of the config in use, for the config endpoint. */
  configSummary(): unknown;
  /** Called when a store operation fails, to log (rate-limited) and count it. */
  storeFailed(error: unknown): void;
  /** The admin API's authentication, when the service has an admin API. */
  readonly admin?: AdminAuth | undefined;
  /** The stored overrides, when the service has an admin API. */
  readonly overrides?: Overrides | undefined;
  /** The `n` most denied keys and tenants, when the service keeps them. */
  topDenied?(n?: number): unknown;
}
