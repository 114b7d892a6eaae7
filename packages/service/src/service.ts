import { createHash, randomBytes } from 'node:crypto';
import { type FSWatcher, statSync, watch } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { basename, dirname, resolve } from 'node:path';
import { type Clock, gcra, isFloodgateError, type PermitStore, type Store } from 'floodgate';
import type { HeaderFormat } from 'floodgate/http';
import { createOverrides, memoryOverrides, type OverrideBackend, type Overrides } from 'floodgate/overrides';
import { isPermanentStoreError } from 'floodgate/store';
import { type Logger, pino } from 'pino';
import { AdminAuth, type AdminOptions } from './admin/auth.js';
import { ConfigError, type DescriptorConfig, type ServiceConfig } from './config.js';
import { loadConfigPath, parseConfigText } from './config-files.js';
import type { ServiceContext } from './context.js';
import { Engine } from './engine.js';
import { createGrpcServer, type GrpcServer, type GrpcServerOptions } from './grpc/server.js';
import { RateLimitHeaders } from './headers.js';
import { createHttpApi, type HttpApiServer } from './http-api.js';
import type { DeniedReport } from './live-stats.js';
import type { Api } from './metrics.js';
import { Metrics } from './metrics.js';
import { ENVOY_UNIT_NUMBERS } from './rules.js';
import { DecisionStats, tenantOfKey } from './stats.js';
import { type OpenedStore, openStore } from './store-url.js';
import { TlsCredentials, type TlsOptions, type TlsReloadResult } from './tls.js';

/** Options of {@link startService}. */
export interface ServiceOptions {
  /**
   * Path of the YAML config, or of a directory of config files (envoyproxy/ratelimit's layout: one domain
   * per file); watched and reloaded on change (see `watch`). Either this or `config`.
   */
  configFile?: string;
  /** The config as YAML text (either format) or as a parsed object, instead of a file. */
  config?: string | ServiceConfig;
  /**
   * Merge a domain that several files of envoyproxy/ratelimit's format define (its `MERGE_DOMAIN_CONFIG`),
   * instead of refusing the config. @default false
   */
  mergeDomains?: boolean;
  /**
   * envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` for domains of its format: a request
   * with a descriptor that goes over its limit charges none of its other descriptors. @default false
   */
  stopIncrementWhenOverLimit?: boolean;
  /** The clock of every decision (tests, simulations); the store's own clock by default. */
  clock?: Clock;
  /**
   * envoyproxy/ratelimit's global `SHADOW_MODE`: every gRPC call is decided and counted as usual, and
   * answered OK overall; each descriptor's status still says OVER_LIMIT when it is. Counted in
   * `floodgate_global_shadow_mode_total`. @default false
   */
  shadowMode?: boolean;
  /** Store URL (`memory`, `redis://…`, …) or a store object. @default 'memory' */
  store?: string | Store;
  /**
   * Where the leases of the config's concurrency limits live when `store` is a store object (with a URL,
   * the store's own: memory, Redis). A config with `concurrency` rules needs one.
   */
  permits?: PermitStore;
  /**
   * The longest wait of a permit acquire over the HTTP API (its `timeoutMs`), ms; a longer one is
   * refused (400). @default 30_000
   */
  maxPermitWaitMs?: number;
  /** Address both servers listen on. @default '127.0.0.1' */
  host?: string;
  /** HTTP port; 0 picks a free one; `false` turns the HTTP API off. @default 8080 */
  httpPort?: number | false;
  /** gRPC port; 0 picks a free one; `false` turns the gRPC API off. @default 8081 */
  grpcPort?: number | false;
  /** Reload the config file, and the TLS certificate, key and CA files, when they change. @default true */
  watch?: boolean;
  /** How long shutdown waits for in-flight calls before closing connections. @default 10_000 */
  drainTimeoutMs?: number;
  /** A logger, or the level of the default JSON logger on stdout. @default 'info' */
  logger?: Logger | string;
  /** Serve the files of this directory at `/` (a web page). */
  staticDir?: string;
  /**
   * Longest wait for a gRPC call's request message, from its headers to its end, ms. A peer that never
   * ends its request is answered DEADLINE_EXCEEDED then, and shutdown does not wait for it either.
   * @default 10_000
   */
  grpcReadTimeoutMs?: number;
  /** Limits and timeouts of the gRPC server's HTTP/2 connections (see {@link GrpcServerOptions}). */
  grpcLimits?: Omit<GrpcServerOptions, 'readTimeoutMs' | 'tls'>;
  /** Longest wait for the store on one call, ms; 0 for no limit. Past it, `failure` applies. @default 1000 */
  storeTimeoutMs?: number;
  /**
   * What a call gets when the store fails or times out: an error (`throw`: gRPC UNAVAILABLE or
   * DEADLINE_EXCEEDED, HTTP 503 or 504, so Envoy applies its own failure mode), admitted (`open`) or
   * denied (`closed`); the last two are counted as degraded decisions. @default 'throw'
   */
  failure?: 'throw' | 'open' | 'closed';
  /**
   * Rate-limit headers sent with decisions (gRPC `response_headers_to_add`, HTTP `headers`): the IETF
   * draft's `RateLimit-Policy` and `RateLimit`, an older draft, the legacy `X-RateLimit-*`, or none.
   * @default 'ietf'
   */
  headers?: HeaderFormat;
  /**
   * Serve gRPC over TLS (ALPN `h2`), and with `clientCaFile` require client certificates (mutual TLS).
   * The files are reloaded on SIGHUP ({@link Service.reloadTls}) and when they change.
   */
  grpcTls?: TlsOptions;
  /** Serve the HTTP API over HTTPS, and with `clientCaFile` require client certificates (mutual TLS). */
  httpTls?: TlsOptions;
  /**
   * The admin API (`/v1/admin/…`, on the HTTP port): stored overrides and a key's state, behind a bearer
   * token or an admin client certificate. Turns stored overrides on. Unset: no admin API (404).
   */
  admin?: AdminOptions;
  /** Where stored overrides live when `store` is a store object: the memory's by default. */
  overridesBackend?: OverrideBackend;
  /**
   * The secret settlements (`settle: true`, `/v1/settle`) are signed with: 32 to 1024 characters, the
   * same in every process of a fleet that shares the store, so a call decided by one process settles on
   * any other, and a decision settles once in the whole fleet. Unset: a random secret drawn when the
   * service starts, kept across reloads: a settlement then settles only on the process that issued it,
   * and none survives a restart.
   */
  settleSecret?: string;
}

/** The outcome of a reload. */
export interface ReloadResult {
  readonly ok: boolean;
  /** False when the file had not changed. */
  readonly changed: boolean;
  readonly error?: ConfigError;
}

/** How long the certificate files are left to settle after a change before they are read. */
const TLS_DEBOUNCE_MS = 250;

/** What calls get while the store is skipped, for the log line of a breaker opening. */
const FAILURE_WORDS: Record<'throw' | 'open' | 'closed', string> = {
  throw: "fail with the store's error (failure 'throw': gRPC UNAVAILABLE, HTTP 503)",
  open: "are admitted without limiting (failure 'open')",
  closed: "are denied (failure 'closed')",
};

/** How long a readiness probe result is reused. */
const PROBE_CACHE_MS = 1000;
const PROBE_TIMEOUT_MS = 2000;

/**
 * Starts the service: loads the config, opens the store, and listens for HTTP and gRPC.
 *
 * @example
 * ```ts
 * const service = await startService({ configFile: 'floodgate.yaml', store: 'memory', httpPort: 8080 });
 * process.on('SIGTERM', () => void service.close());
 * ```
 */
export async function startService(options: ServiceOptions): Promise<Service> {
  const service = new Service(options);
  try {
    await service.start();
  } catch (error) {
    await service.close().catch(() => {});
    throw error;
  }
  return service;
}

/** A running service. Create it with {@link startService}. */
export class Service implements ServiceContext {
  readonly logger: Logger;
  readonly stats = new DecisionStats();
  readonly headers: RateLimitHeaders;
  metrics!: Metrics;
  engine!: Engine;
  draining = false;
  readonly shadowMode: boolean;
  /** The admin API's authentication, when it is on. */
  admin: AdminAuth | undefined;
  /** Stored overrides, when the admin API is on. */
  overrides: Overrides | undefined;
  /** Ports actually bound (0 until started, or when that API is off). */
  httpPort = 0;
  grpcPort = 0;
  private opened: OpenedStore | undefined;
  private store!: Store;
  private http: HttpApiServer | undefined;
  /** TLS credentials of each port that has them. */
  private readonly tls = new Map<Api, TlsCredentials>();
  private tlsWatchers: FSWatcher[] = [];
  private tlsDebounce: NodeJS.Timeout | undefined;
  private grpc: GrpcServer | undefined;
  private watcher: FSWatcher | undefined;
  private debounce: NodeJS.Timeout | undefined;
  private sampler: NodeJS.Timeout | undefined;
  private configSha = '';
  private configFile: string | undefined;
  private loadedAt = new Date();
  private probe: { atMs: number; result: Promise<boolean> } | undefined;
  private lastStoreErrorLogMs = 0;
  private suppressedStoreErrors = 0;
  private closing: Promise<void> | undefined;
  /** The secret of every engine's settlements: the option's, or one drawn for this process. */
  private readonly settleSecret: string;

  constructor(private readonly options: ServiceOptions) {
    const maxWait = options.maxPermitWaitMs;
    if (maxWait !== undefined && (!Number.isSafeInteger(maxWait) || maxWait < 0 || maxWait > 2 ** 31 - 1)) {
      throw new RangeError(`maxPermitWaitMs must be a whole number of ms from 0 to ${2 ** 31 - 1}, got ${maxWait}`);
    }
    this.settleSecret = options.settleSecret ?? randomBytes(32).toString('base64url');
    const logger = options.logger;
    // Synchronous writes: pino's default asynchronous stdout never lets the process exit once whatever read
    // the logs has gone away (a dead pipe), so SIGTERM would hang; the service logs little, never per call.
    this.logger =
      typeof logger === 'object'
        ? logger
        : pino(
            // An error's cause is logged as its own object: the default serializer appends the cause's
            // message to the error's, which for a store error already ends with it (printed twice).
            { name: 'floodgate', level: logger ?? 'info', serializers: { err: pino.stdSerializers.errWithCause } },
            pino.destination({ dest: 1, sync: true }),
          );
    this.headers = new RateLimitHeaders(options.headers ?? 'ietf');
    this.shadowMode = options.shadowMode ?? false;
  }

  /**
   * The `n` most denied keys and tenants over the last two epochs of the live view (30 to 60 s; a
   * Space-Saving sketch: each count over-estimates by at most its `error`, and a key absent from the list
   * was denied at most the report's `error` times), for the admin API. Keys never become metric labels.
   */
  topDenied(n = 20): { keys: DeniedReport; tenants: DeniedReport } {
    return { keys: this.stats.deniedKeys.top(n), tenants: this.stats.deniedTenants.top(n) };
  }

  get storeName(): string {
    return this.store?.name ?? 'none';
  }

  /** Loads the config, opens the store and binds the ports. */
  async start(): Promise<void> {
    const options = this.options;
    if ((options.configFile === undefined) === (options.config === undefined)) {
      throw new TypeError('give the service either `configFile` or `config`');
    }
    let config: ServiceConfig;
    const loadOptions = { mergeDomains: options.mergeDomains ?? false };
    if (options.configFile !== undefined) {
      this.configFile = resolve(options.configFile);
      const loaded = loadConfigPath(options.configFile, loadOptions);
      config = loaded.config;
      this.configSha = loaded.sha256;
    } else if (typeof options.config === 'string') {
      config = parseConfigText(options.config, undefined, loadOptions);
      this.configSha = sha256(options.config);
    } else {
      config = options.config as ServiceConfig;
      this.configSha = sha256(JSON.stringify(config));
    }
    // Before the store opens: a certificate that cannot be used fails the start at once.
    if (options.grpcTls !== undefined && options.grpcPort !== false) {
      this.tls.set('grpc', loadTls('grpcTls', options.grpcTls));
    }
    if (options.httpTls !== undefined && options.httpPort !== false) {
      this.tls.set('http', loadTls('httpTls', options.httpTls));
    }
    if (typeof options.store === 'object') {
      this.store = options.store;
    } else {
      this.opened = await openStore(options.store);
      this.store = this.opened.store;
    }
    if (options.admin !== undefined) {
      this.admin = new AdminAuth(options.admin);
      this.overrides = createOverrides({
        backend: options.overridesBackend ?? this.opened?.overrides ?? memoryOverrides(),
        ...(options.admin.refreshMs === undefined ? {} : { refreshMs: options.admin.refreshMs }),
        ...(options.clock === undefined ? {} : { clock: options.clock }),
      });
    }
    this.metrics = new Metrics(this.stats, this.store);
    this.engine = this.newEngine(config);
    this.metrics.configLoaded(true, this.configSha, false);
    for (const [api, credentials] of this.tls) {
      this.metrics.tlsLoaded(api, true, credentials.validTo, false);
      this.warnIfExpiring(api, credentials);
    }
    const host = options.host ?? '127.0.0.1';
    const context = () => this as ServiceContext;
    if (options.httpPort !== false) {
      this.http = createHttpApi(context, { staticDir: options.staticDir, tls: this.tls.get('http') });
      this.httpPort = await listenHttp(this.http, host, options.httpPort ?? 8080);
    }
    if (options.grpcPort !== false) {
      const grpcTls = this.tls.get('grpc');
      this.grpc = createGrpcServer(context, {
        ...options.grpcLimits,
        ...(options.grpcReadTimeoutMs === undefined ? {} : { readTimeoutMs: options.grpcReadTimeoutMs }),
        ...(grpcTls === undefined ? {} : { tls: grpcTls }),
      });
      const port = options.grpcPort ?? 8081;
      this.grpcPort = await this.grpc.listen(host, port).catch((error: Error) => {
        throw new ListenError('gRPC', host, port, error);
      });
    }
    this.sampler = setInterval(() => this.stats.sample(Date.now()), 1000);
    this.sampler.unref();
    this.stats.sample(Date.now());
    if (this.configFile !== undefined && options.watch !== false) this.watchConfig(this.configFile);
    if (this.tls.size > 0 && options.watch !== false) this.watchTls();
    this.logger.info(
      {
        http: this.http === undefined ? null : `${host}:${this.httpPort}`,
        grpc: this.grpc === undefined ? null : `${host}:${this.grpcPort}`,
        httpTls: describeTls(this.tls.get('http')),
        grpcTls: describeTls(this.tls.get('grpc')),
        store: this.opened?.description ?? this.store.name,
        config: options.configFile ?? '(inline)',
        domains: config.domains.map((d) => d.domain),
      },
      'floodgate is serving',
    );
    // Not awaited: a store that is down at start makes the service unready, not absent.
    this.probeStore().then(
      (up) => {
        if (!up) this.logger.warn({ store: this.storeName }, 'the store does not answer yet: not ready until it does');
      },
      () => {},
    );
  }

  /**
   * Reloads the config file. A config that fails validation is rejected: the one in use keeps serving,
   * and the error is logged and returned. Counters live in the store, so they survive a reload.
   */
  reload(): ReloadResult {
    if (this.configFile === undefined || this.options.configFile === undefined) return { ok: false, changed: false };
    let config: ServiceConfig;
    try {
      const loaded = loadConfigPath(this.options.configFile, { mergeDomains: this.options.mergeDomains ?? false });
      if (loaded.sha256 === this.configSha) {
        this.logger.info({ file: this.options.configFile }, 'config unchanged');
        return { ok: true, changed: false };
      }
      config = loaded.config;
      this.engine = this.newEngine(config);
      this.configSha = loaded.sha256;
    } catch (error) {
      const configError =
        error instanceof ConfigError
          ? error
          : new ConfigError([{ path: '', line: 0, column: 0, message: String(error) }], this.options.configFile);
      this.metrics.configLoaded(false, undefined, true);
      this.logger.error(
        { file: this.options.configFile, issues: configError.issues },
        'config rejected; the previous config keeps serving',
      );
      return { ok: false, changed: true, error: configError };
    }
    this.loadedAt = new Date();
    this.metrics.configLoaded(true, this.configSha, true);
    this.logger.info(
      { file: this.options.configFile, sha256: this.configSha, domains: config.domains.map((d) => d.domain) },
      'config reloaded',
    );
    return { ok: true, changed: true };
  }

  /**
   * Reads the TLS certificate, key and CA files of each TLS port again. Changed files that are good are
   * served to new connections, open ones keep theirs; files that cannot be used are rejected (logged and
   * returned), and the certificate in use keeps serving.
   */
  reloadTls(): TlsReloadResult[] {
    const results: TlsReloadResult[] = [];
    for (const [api, credentials] of this.tls) {
      const result = credentials.reload();
      results.push(result);
      if (!result.changed) continue;
      this.metrics.tlsLoaded(api, result.ok, credentials.validTo, true);
      if (result.error !== undefined) {
        this.logger.error(
          { api, option: result.error.option, file: result.error.file, reason: result.error.reason },
          'certificates rejected; the previous ones keep serving',
        );
      } else {
        this.logger.info(
          { api, fingerprint256: result.fingerprint256, validTo: credentials.validTo.toISOString() },
          'certificates reloaded',
        );
        this.warnIfExpiring(api, credentials);
      }
    }
    return results;
  }

  private warnIfExpiring(api: Api, credentials: TlsCredentials): void {
    const left = credentials.validTo.getTime() - Date.now();
    if (left < 7 * 86_400_000) {
      this.logger.warn(
        { api, file: credentials.options.certFile, validTo: credentials.validTo.toISOString() },
        left <= 0 ? 'the TLS certificate has expired' : 'the TLS certificate expires within a week',
      );
    }
  }

  private watchTls(): void {
    // As for the config: watch the folders, since certificate tools and Kubernetes replace files.
    const folders = new Map<string, Set<string>>();
    for (const credentials of this.tls.values()) {
      for (const file of credentials.files()) {
        const path = resolve(file);
        const names = folders.get(dirname(path)) ?? new Set<string>();
        names.add(basename(path));
        folders.set(dirname(path), names);
      }
    }
    for (const [folder, names] of folders) {
      try {
        const watcher = watch(folder, (_event, changed) => {
          if (changed !== null && !names.has(changed) && !changed.startsWith('..')) return;
          // A certificate and its key are often written one after the other: read them once both are.
          clearTimeout(this.tlsDebounce);
          this.tlsDebounce = setTimeout(() => this.reloadTls(), TLS_DEBOUNCE_MS);
          this.tlsDebounce.unref();
        });
        watcher.unref();
        watcher.on('error', (error) => this.logger.warn({ err: error, folder }, 'watching certificates stopped'));
        this.tlsWatchers.push(watcher);
      } catch (error) {
        this.logger.warn({ err: error, folder }, 'cannot watch the certificate files; reload with SIGHUP');
      }
    }
  }

  /** Replaces the config in use with an already parsed one (programmatic reload). */
  applyConfig(config: ServiceConfig): void {
    this.engine = this.newEngine(config);
    this.configSha = sha256(JSON.stringify(config));
    this.loadedAt = new Date();
    this.metrics.configLoaded(true, this.configSha, true);
  }

  private newEngine(config: ServiceConfig): Engine {
    warnIgnoredMetadata(config, this.logger);
    const timeout = this.options.storeTimeoutMs ?? 1000;
    const engine = new Engine(config, this.store, this.stats, {
      storeTimeoutMs: timeout > 0 ? timeout : undefined,
      failure: this.options.failure,
      stopIncrementWhenOverLimit: this.options.stopIncrementWhenOverLimit,
      clock: this.options.clock,
      overrides: this.overrides,
      settleSecret: this.settleSecret,
      permits: this.options.permits ?? this.opened?.permits,
      permitEvents: this.metrics.permits,
      maxPermitWaitMs: this.options.maxPermitWaitMs,
    });
    this.metrics.permitsInFlight = () => engine.permits?.inFlight() ?? new Map();
    this.metrics.permitsQueued = () => engine.permits?.queued() ?? new Map();
    // The live view's most denied keys and store errors come from the limiter's own events. Denials made
    // without the store (failure 'closed') say nothing about a key, so they are not counted against it.
    const stats = this.stats;
    engine.limiter.on('decision', (event) => {
      if (!event.commit || event.decision.allowed || event.source === 'degraded') return;
      stats.deniedKeys.add(event.key);
      const tenant = tenantOfKey(event.key);
      if (tenant !== undefined) stats.deniedTenants.add(tenant);
    });
    engine.limiter.on('storeError', ({ error }) => {
      if (error.code === 'ERR_STORE_FULL') this.metrics.storeFull.inc({ store: this.storeName });
      else stats.storeErrors++;
    });
    // A new engine's breaker is closed; one log line per opening, never one per call.
    this.metrics.breaker(this.storeName, 'closed');
    engine.limiter.on('breaker', ({ state, error, failure }) => {
      this.metrics.breaker(this.storeName, state);
      if (state !== 'open') return;
      this.logger.warn(
        { store: this.opened?.description ?? this.storeName, failure, code: error?.code, err: error },
        `the ${this.storeName} store is failing: until it answers again, calls ${typeof failure === 'string' ? FAILURE_WORDS[failure] : 'are decided by the fallback limiter'}`,
      );
    });
    return engine;
  }

  private watchConfig(file: string): void {
    // Editors and Kubernetes replace files rather than write them in place: watch the folder. A config
    // directory is watched itself: a file written, added or removed there reloads the config.
    let directory = false;
    try {
      directory = statSync(file).isDirectory();
    } catch {}
    const name = basename(file);
    try {
      this.watcher = watch(directory ? file : dirname(file), (_event, changed) => {
        if (!directory && changed !== null && changed !== name && !changed.startsWith('..')) return;
        clearTimeout(this.debounce);
        this.debounce = setTimeout(() => this.reload(), 100);
        this.debounce.unref();
      });
      this.watcher.unref();
      this.watcher.on('error', (error) => this.logger.warn({ err: error }, 'watching the config stopped'));
    } catch (error) {
      this.logger.warn({ err: error, file }, 'cannot watch the config file; reload with SIGHUP');
    }
  }

  /** Probes the store with a check on a reserved key (no state changes); cached for a second. */
  probeStore(): Promise<boolean> {
    const now = Date.now();
    if (this.probe !== undefined && now - this.probe.atMs < PROBE_CACHE_MS) return this.probe.result;
    const result = this.runProbe();
    this.probe = { atMs: now, result };
    return result;
  }

  private async runProbe(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), PROBE_TIMEOUT_MS);
    });
    const prepare = this.opened?.prepare?.() ?? Promise.resolve();
    const check = prepare
      .then(() => this.engine.limiter.check('floodgate-service-probe', { policies: PROBE_POLICY }))
      .then(
        // With failure 'open' or 'closed' the limiter answers without the store: that is not a store up.
        (decision) => decision.reason !== 'degraded',
        (error: unknown) => {
          // A missing database or a refused login does not pass by waiting: said as such, at error level.
          if (isPermanentStoreError(error)) {
            this.logger.error(
              { err: error, store: this.opened?.description ?? this.storeName },
              'the store cannot work as configured (a missing database, a refused login): fix its URL or credentials, retrying will not help',
            );
          } else {
            this.logger.warn({ err: error }, 'store probe failed');
          }
          return false;
        },
      );
    const up = await Promise.race([check, timeout]);
    clearTimeout(timer);
    this.metrics.setStoreUp(this.storeName, up);
    return up;
  }

  storeFailed(error: unknown): void {
    this.metrics.storeErrors.inc({ store: this.storeName });
    this.probe = undefined;
    // One line per second at most: a dead store under load must not flood the logs.
    const now = Date.now();
    if (now - this.lastStoreErrorLogMs >= 1000) {
      this.logger.error(
        {
          store: this.opened?.description ?? this.storeName,
          code: isFloodgateError(error) ? error.code : undefined,
          err: error,
          suppressed: this.suppressedStoreErrors,
        },
        `the ${this.storeName} store failed`,
      );
      this.lastStoreErrorLogMs = now;
      this.suppressedStoreErrors = 0;
    } else {
      this.suppressedStoreErrors++;
    }
  }

  configSummary(): unknown {
    const config = this.engine.config;
    return {
      file: this.options.configFile ?? null,
      sha256: this.configSha,
      loadedAt: this.loadedAt.toISOString(),
      prefix: config.prefix,
      store: this.storeName,
      domains: [...this.engine.domains.values()].map((d) => ({
        domain: d.domain,
        format: d.format,
        shadow: d.shadow,
        rules: d.rules.map((r) => ({
          rule: r.label,
          ...(r.file === undefined ? {} : { file: r.file }),
          line: r.line,
          shadow: r.shadow,
          unlimited: r.unlimited,
          shared: r.sharedValue !== undefined,
          ...(r.envoy === undefined
            ? {}
            : {
                rateLimit: {
                  requestsPerUnit: r.envoy.requestsPerUnit,
                  unit: [...ENVOY_UNIT_NUMBERS].find(([, n]) => n === r.envoy?.unit)?.[0] ?? null,
                  name: r.envoy.name ?? null,
                  replaces: r.envoy.replaces,
                },
              }),
          policies: r.policies,
        })),
      })),
    };
  }

  /**
   * Stops gracefully: refuses new calls, lets in-flight ones finish (up to `drainTimeoutMs`), then
   * closes the connections and the store.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.draining = true;
    clearInterval(this.sampler);
    clearTimeout(this.debounce);
    this.watcher?.close();
    clearTimeout(this.tlsDebounce);
    for (const watcher of this.tlsWatchers) watcher.close();
    for (const credentials of this.tls.values()) credentials.endHandshakes();
    const drainMs = this.options.drainTimeoutMs ?? 10_000;
    const started = Date.now();
    const waits: Promise<void>[] = [];
    const http = this.http;
    if (http?.listening) {
      waits.push(
        new Promise<void>((resolve) => {
          // Connections of calls in flight turn idle when their answers are sent: close those too.
          const idle = setInterval(() => http.closeIdleConnections(), 50);
          http.close(() => {
            clearInterval(idle);
            resolve();
          });
          http.closeIdleConnections();
        }),
      );
    }
    const grpc = this.grpc;
    if (grpc !== undefined && this.grpcPort !== 0) waits.push(grpc.close(drainMs).then(() => {}));
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      Promise.all(waits).then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), drainMs);
      }),
    ]);
    clearTimeout(timer);
    if (!drained) {
      this.logger.warn({ drainTimeoutMs: drainMs }, 'in-flight calls did not finish in time; closing connections');
      http?.closeAllConnections();
    }
    if (this.logger.isLevelEnabled('info') && this.metrics !== undefined) {
      this.logger.info({ drainedInMs: Date.now() - started, drained }, 'floodgate stopped');
    }
    await this.opened?.close();
  }
}

const PROBE_POLICY = gcra({ limit: 1, periodMs: 1000, name: 'probe' });

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function loadTls(option: string, options: TlsOptions): TlsCredentials {
  const credentials = new TlsCredentials(option, options);
  credentials.load();
  return credentials;
}

function describeTls(credentials: TlsCredentials | undefined): string | undefined {
  if (credentials === undefined) return undefined;
  return `${credentials.mutual ? 'mutual TLS' : 'TLS'}, certificate ${credentials.fingerprint256}`;
}

function listenHttp(server: HttpApiServer, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (error: Error) => reject(new ListenError('HTTP', host, port, error));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** A port the service could not listen on; the CLI exits with code 5. */
export class ListenError extends Error {
  override readonly name = 'ListenError';
  constructor(api: string, host: string, port: number, cause: Error) {
    super(`cannot listen for ${api} on ${host}:${port}: ${cause.message}`, { cause });
  }
}

/**
 * Warns once per load of the rules whose envoyproxy/ratelimit `metadata` is ignored: that service sends
 * it back to Envoy as dynamic metadata, floodgate sends none.
 */
function warnIgnoredMetadata(config: ServiceConfig, logger: Logger): void {
  const places: string[] = [];
  const walk = (list: readonly DescriptorConfig[]): void => {
    for (const d of list) {
      if (d.metadata === true) places.push(`${d.file ?? 'config'}:${d.line}`);
      walk(d.descriptors);
    }
  };
  for (const domain of config.domains) walk(domain.descriptors);
  if (places.length === 0) return;
  logger.warn(
    { rules: places.length, at: places.slice(0, 10) },
    '`metadata` of envoyproxy/ratelimit rules is accepted and ignored: floodgate sends no dynamic metadata',
  );
}
