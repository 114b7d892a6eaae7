import type { MemoryStore, Store } from 'floodgate';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { PermitEvents } from './permits.js';
import type { Rule } from './rules.js';
import type { DecisionStats } from './stats.js';

/** The APIs a request can come through. */
export type Api = 'http' | 'grpc';

/** The timer of one API method: `end()` records its duration. */
export interface MethodTimer {
  observe(seconds: number): void;
}

/**
 * The service's Prometheus metrics, on a registry of its own (several services can share a process).
 * Decision counts are read from {@link DecisionStats} at scrape time, so a decision costs a few
 * increments, and labels come from the config only: never a key, a descriptor value or an unknown domain.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly inFlight: Record<Api, number> = { http: 0, grpc: 0 };
  /** gRPC calls answered or cancelled whose decision is still under way. */
  abandoned = 0;
  private readonly duration: Histogram<'api' | 'method'>;
  private readonly errors: Counter<'api' | 'method' | 'code'>;
  readonly storeErrors: Counter<'store'>;
  /** Calls a full store refused (new keys past the memory store's `maxKeys`, when it refuses them). */
  readonly storeFull: Counter<'store'>;
  private readonly storeUp: Gauge<'store'>;
  private readonly breakerOpen: Gauge<'store'>;
  private readonly breakerOpenings: Counter<'store'>;
  private readonly reloads: Counter<'result'>;
  private readonly lastReload: Gauge;
  private readonly configInfo: Gauge<'sha256'>;
  private readonly grpcLimits: Counter<'limit'>;
  private readonly timers = new Map<string, MethodTimer>();
  private readonly tlsRefusals: Counter<'api' | 'reason'>;
  private readonly tlsReloads: Counter<'api' | 'result'>;
  private readonly tlsExpiry: Gauge<'api'>;
  /** The permits in flight by rule, of the engine in use (set by the service). */
  permitsInFlight: () => ReadonlyMap<Rule, number> = () => new Map();
  /** The waiters this process holds in a store queue by rule, of the engine in use (set by the service). */
  permitsQueued: () => ReadonlyMap<Rule, number> = () => new Map();
  /** What the permit desk reports: counts by rule, hold time. */
  readonly permits: PermitEvents;

  constructor(stats: DecisionStats, store: Store) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    new Counter({
      name: 'floodgate_decisions_total',
      help: 'Decisions by domain, descriptor rule, policy and outcome (allowed, denied, shadow_denied).',
      labelNames: ['domain', 'rule', 'policy', 'outcome'],
      registers,
      collect() {
        this.reset();
        for (const { labels, tally } of stats.entries()) {
          if (tally.allowed > 0) this.inc({ ...labels, outcome: 'allowed' }, tally.allowed);
          if (tally.denied > 0) this.inc({ ...labels, outcome: 'denied' }, tally.denied);
          if (tally.shadowDenied > 0) this.inc({ ...labels, outcome: 'shadow_denied' }, tally.shadowDenied);
        }
      },
    });
    new Counter({
      name: 'floodgate_descriptors_unmatched_total',
      help: 'Descriptors of a known domain that matched no rule with policies (answered OK).',
      labelNames: ['domain'],
      registers,
      collect() {
        this.reset();
        for (const [domain, tally] of stats.unmatched) if (tally.allowed > 0) this.inc({ domain }, tally.allowed);
      },
    });
    new Counter({
      name: 'floodgate_unknown_domain_requests_total',
      help: 'gRPC requests naming a domain the config does not define (answered OK, as Envoy expects).',
      registers,
      collect() {
        this.reset();
        if (stats.unknownDomain > 0) this.inc(stats.unknownDomain);
      },
    });
    new Counter({
      name: 'floodgate_global_shadow_mode_total',
      help: 'gRPC calls over the limit answered OK by the global shadow mode (--shadow-mode).',
      registers,
      collect() {
        this.reset();
        if (stats.globalShadow > 0) this.inc(stats.globalShadow);
      },
    });
    new Counter({
      name: 'floodgate_degraded_decisions_total',
      help: 'Decisions made without the store, by the failure policy (--failure open or closed).',
      registers,
      collect() {
        this.reset();
        if (stats.degraded > 0) this.inc(stats.degraded);
      },
    });
    // The most denied keys and tenants are named by the admin API only: here, their sketch's size and error.
    const sketches = { key: stats.deniedKeys, tenant: stats.deniedTenants };
    const report = (kind: 'key' | 'tenant') => sketches[kind].top(sketches[kind].capacity);
    new Gauge({
      name: 'floodgate_top_denied_denials',
      help: 'Denials counted by the most-denied sketch over its span (the last 30 to 60 s), by kind (key, tenant).',
      labelNames: ['kind'],
      registers,
      collect() {
        for (const kind of ['key', 'tenant'] as const) this.set({ kind }, report(kind).total);
      },
    });
    new Gauge({
      name: 'floodgate_top_denied_error',
      help:
        'Largest over-estimate of a count in the most-denied report (a key not listed was denied at most this ' +
        'often over the span), by kind (key, tenant). The keys themselves: GET /v1/admin/top-denied.',
      labelNames: ['kind'],
      registers,
      collect() {
        for (const kind of ['key', 'tenant'] as const) this.set({ kind }, report(kind).error);
      },
    });
    new Gauge({
      name: 'floodgate_top_denied_tracked',
      help: 'Keys (or tenants) the most-denied sketch holds a counter for, by kind: at most its capacity per interval.',
      labelNames: ['kind'],
      registers,
      collect() {
        for (const kind of ['key', 'tenant'] as const) this.set({ kind }, report(kind).keys.length);
      },
    });
    const inFlight = this.inFlight;
    new Gauge({
      name: 'floodgate_in_flight_requests',
      help: 'Requests being answered now.',
      labelNames: ['api'],
      registers,
      collect() {
        this.set({ api: 'http' }, inFlight.http);
        this.set({ api: 'grpc' }, inFlight.grpc);
      },
    });
    const abandoned = () => this.abandoned;
    new Gauge({
      name: 'floodgate_grpc_abandoned_calls',
      help:
        'gRPC calls answered (deadline passed) or cancelled while the store still decides them: each keeps ' +
        "its place under its connection's stream limit until the store answers.",
      registers,
      collect() {
        this.set(abandoned());
      },
    });
    this.duration = new Histogram({
      name: 'floodgate_request_duration_seconds',
      help: 'Time to answer a request, by API and method.',
      labelNames: ['api', 'method'],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    });
    this.errors = new Counter({
      name: 'floodgate_request_errors_total',
      help: 'Requests answered with an error, by API, method and code (HTTP status or gRPC status name).',
      labelNames: ['api', 'method', 'code'],
      registers,
    });
    this.storeErrors = new Counter({
      name: 'floodgate_store_errors_total',
      help: 'Store operations that failed (unreachable, timed out).',
      labelNames: ['store'],
      registers,
    });
    this.storeFull = new Counter({
      name: 'floodgate_store_full_total',
      help: 'Calls on new keys that a full store refused (answered by the failure policy; the store is healthy).',
      labelNames: ['store'],
      registers,
    });
    this.storeUp = new Gauge({
      name: 'floodgate_store_up',
      help: '1 when the last readiness probe of the store succeeded.',
      labelNames: ['store'],
      registers,
    });
    this.reloads = new Counter({
      name: 'floodgate_config_reloads_total',
      help: 'Config reloads by result (success, failure); a failed reload keeps the previous config.',
      labelNames: ['result'],
      registers,
    });
    this.lastReload = new Gauge({
      name: 'floodgate_config_last_reload_success_timestamp_seconds',
      help: 'When the config in use was loaded.',
      registers,
    });
    this.configInfo = new Gauge({
      name: 'floodgate_config_info',
      help: 'The config in use, by the SHA-256 of its text.',
      labelNames: ['sha256'],
      registers,
    });
    this.grpcLimits = new Counter({
      name: 'floodgate_grpc_limit_hits_total',
      help:
        'gRPC connections refused or ended, and requests refused, by the HTTP/2 transport limit they met ' +
        '(connections, buffered_bytes, control_frames, resets, output_stalled, preface_timeout, ' +
        'frame_timeout, no_stream_timeout, idle_timeout).',
      labelNames: ['limit'],
      registers,
    });
    if (store.name === 'memory') {
      const memory = store as MemoryStore;
      new Gauge({
        name: 'floodgate_memory_store_keys',
        help: 'Keys held by the memory store (expired ones not yet swept included).',
        registers,
        collect() {
          this.set(memory.size);
        },
      });
      new Counter({
        name: 'floodgate_memory_store_forced_evictions_total',
        help: 'Live keys let go before their expiry because the memory store was full, their state kept in its fixed-size summary.',
        registers,
        collect() {
          this.reset();
          if (memory.forcedEvictions > 0) this.inc(memory.forcedEvictions);
        },
      });
      new Counter({
        name: 'floodgate_memory_store_refused_keys_total',
        help: 'New keys refused because the memory store was full of live keys (whenFull=refuse).',
        registers,
        collect() {
          this.reset();
          if (memory.refusedKeys > 0) this.inc(memory.refusedKeys);
        },
      });
    }
    this.storeUp.set({ store: store.name }, 1);
    this.breakerOpen = new Gauge({
      name: 'floodgate_store_breaker_open',
      help: "1 while the store's circuit breaker is open or half-open: decisions are made without the store, by the failure policy.",
      labelNames: ['store'],
      registers,
    });
    this.breakerOpen.set({ store: store.name }, 0);
    this.breakerOpenings = new Counter({
      name: 'floodgate_store_breaker_openings_total',
      help: "Times the store's circuit breaker opened (the store failed; calls skip it for a cool-down).",
      labelNames: ['store'],
      registers,
    });
    this.tlsRefusals = new Counter({
      name: 'floodgate_tls_refused_connections_total',
      help: 'TLS connections refused, by API and reason (handshake, handshake_timeout, handshake_limit, alpn, client_san).',
      labelNames: ['api', 'reason'],
      registers,
    });
    this.tlsReloads = new Counter({
      name: 'floodgate_tls_reloads_total',
      help: 'Certificate reloads that found changed files, by API and result; a failed one keeps the previous certificate.',
      labelNames: ['api', 'result'],
      registers,
    });
    this.tlsExpiry = new Gauge({
      name: 'floodgate_tls_certificate_expiry_timestamp_seconds',
      help: 'When the certificate served on each TLS port expires.',
      labelNames: ['api'],
      registers,
    });
    this.permits = this.permitMetrics(registers);
  }

  /**
   * Concurrency permits, by domain and descriptor rule (labels from the config only): acquired, refused
   * by reason, released and expired apart (an expired lease is a holder that crashed or stalled), hold
   * time, and the permits this process granted that are still out.
   */
  private permitMetrics(registers: Registry[]): PermitEvents {
    const labelNames = ['domain', 'rule'] as const;
    const acquired = new Counter({
      name: 'floodgate_permits_acquired_total',
      help: 'Concurrency permits granted, by domain and descriptor rule.',
      labelNames,
      registers,
    });
    const refused = new Counter({
      name: 'floodgate_permits_refused_total',
      help: 'Concurrency permits refused, by domain, descriptor rule and reason (limit: all in flight; exceeds-capacity: a cost above the limit; timeout: none within a wait; queue-full: the key had maxQueue waiters).',
      labelNames: [...labelNames, 'reason'],
      registers,
    });
    const released = new Counter({
      name: 'floodgate_permits_released_total',
      help: 'Releases that ended a live lease, by domain and descriptor rule (summed over replicas: every release).',
      labelNames,
      registers,
    });
    const expired = new Counter({
      name: 'floodgate_permits_expired_total',
      help: 'Leases granted by this process that ran out before a release reached it: a holder that crashed or stalled (or released through another replica).',
      labelNames,
      registers,
    });
    const held = new Histogram({
      name: 'floodgate_permit_hold_seconds',
      help: 'How long a permit granted and released by this process was held.',
      labelNames,
      buckets: [0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 300],
      registers,
    });
    const waited = new Histogram({
      name: 'floodgate_permit_wait_seconds',
      help: 'How long a waiting acquire (timeoutMs) waited, from its ask to its end, by domain, descriptor rule and result (granted, timeout, queue-full, abandoned: the client went away).',
      labelNames: [...labelNames, 'result'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1, 2.5, 10, 30],
      registers,
    });
    const queued = () => this.permitsQueued();
    new Gauge({
      name: 'floodgate_permits_queued',
      help: "Waiting acquires this process holds in a key's queue (in the store) now, by domain and descriptor rule.",
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const [rule, count] of queued()) this.set({ domain: rule.domain, rule: rule.label }, count);
      },
    });
    const inFlight = () => this.permitsInFlight();
    new Gauge({
      name: 'floodgate_permits_in_flight',
      help: 'Permits (summed costs) this process granted that are neither released here nor run out, by domain and descriptor rule.',
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const [rule, cost] of inFlight()) this.set({ domain: rule.domain, rule: rule.label }, cost);
      },
    });
    const labels = (rule: Rule) => ({ domain: rule.domain, rule: rule.label });
    return {
      acquired: (rule) => acquired.inc(labels(rule)),
      refused: (rule, reason) => refused.inc({ ...labels(rule), reason }),
      released: (rule, heldMs) => {
        released.inc(labels(rule));
        if (heldMs !== undefined) held.observe(labels(rule), heldMs / 1000);
      },
      expired: (rule) => expired.inc(labels(rule)),
      waited: (rule, result, seconds) => waited.observe({ ...labels(rule), result }, seconds),
    };
  }

  /** The duration histogram of one API method, resolved once. */
  timer(api: Api, method: string): MethodTimer {
    const id = `${api} ${method}`;
    let timer = this.timers.get(id);
    if (timer === undefined) {
      timer = this.duration.labels(api, method);
      this.timers.set(id, timer);
    }
    return timer;
  }

  /** Counts a request answered with an error. */
  error(api: Api, method: string, code: string): void {
    this.errors.inc({ api, method, code });
  }

  /** Counts a gRPC connection or request a transport limit refused or ended. */
  grpcLimit(limit: string): void {
    this.grpcLimits.inc({ limit });
  }

  /** Records a change of the store's circuit breaker (an opening is counted). */
  breaker(store: string, state: 'closed' | 'open' | 'half-open'): void {
    this.breakerOpen.set({ store }, state === 'closed' ? 0 : 1);
    if (state === 'open') this.breakerOpenings.inc({ store });
  }

  setStoreUp(store: string, up: boolean): void {
    this.storeUp.set({ store }, up ? 1 : 0);
  }

  /** Counts a refused TLS connection. */
  tlsRefused(api: Api, reason: string): void {
    this.tlsRefusals.inc({ api, reason });
  }

  /** Records the certificate served on a TLS port: at start, or by a reload that may have failed. */
  tlsLoaded(api: Api, ok: boolean, validTo: Date | undefined, reload: boolean): void {
    if (reload) this.tlsReloads.inc({ api, result: ok ? 'success' : 'failure' });
    if (ok && validTo !== undefined) this.tlsExpiry.set({ api }, Math.floor(validTo.getTime() / 1000));
  }

  /** Records a config load: the first one (`reload` false) or a reload, which may have failed. */
  configLoaded(ok: boolean, sha256: string | undefined, reload: boolean): void {
    if (reload) this.reloads.inc({ result: ok ? 'success' : 'failure' });
    if (ok && sha256 !== undefined) {
      this.lastReload.set(Date.now() / 1000);
      this.configInfo.reset();
      this.configInfo.set({ sha256 }, 1);
    }
  }
}
