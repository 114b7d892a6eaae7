import { invalid } from '../errors.js';
import type { Decision } from '../model/decision.js';
import { sha256Base64url } from '../sha256.js';

// OpenTelemetry through `@opentelemetry/api`, an optional peer: loaded lazily (a dynamic import the
// first time a limiter, a permit set or a middleware is built) and never required. Without the package,
// or with it but no provider registered, `telemetry` stays undefined and every hook below is one
// comparison with undefined. The types are structural, so the package needs no type of the API either.

type AttributeValue = string | number | boolean;
type Attributes = Record<string, AttributeValue>;

interface OtelAdd {
  add(value: number, attributes?: Attributes): void;
}
interface OtelRecord {
  record(value: number, attributes?: Attributes): void;
}
interface InstrumentOptions {
  description?: string;
  unit?: string;
  advice?: { explicitBucketBoundaries?: number[] };
}
type ObservableCallback = (result: { observe(value: number, attributes?: Attributes): void }) => void;
interface OtelObservable {
  addCallback(callback: ObservableCallback): void;
  removeCallback(callback: ObservableCallback): void;
}
interface OtelMeter {
  createObservableCounter(name: string, options?: InstrumentOptions): OtelObservable;
  createUpDownCounter(name: string, options?: InstrumentOptions): OtelAdd;
  createHistogram(name: string, options?: InstrumentOptions): OtelRecord;
}
interface OtelSpan {
  addEvent(name: string, attributes?: Attributes): unknown;
  setAttributes(attributes: Attributes): unknown;
  isRecording(): boolean;
  end(): void;
}
interface OtelTracer {
  startSpan(name: string, options?: { attributes?: Attributes }): OtelSpan;
}
interface OtelTracerProvider {
  getTracer(name: string, version?: string): OtelTracer;
  /** A ProxyTracerProvider's delegate tracer: undefined while no SDK is registered. */
  getDelegateTracer?(name: string, version?: string): OtelTracer | undefined;
}
/** What floodgate uses of `@opentelemetry/api`. */
interface OtelApi {
  metrics: { getMeterProvider(): { getMeter(name: string, version?: string): OtelMeter } };
  trace: { getTracerProvider(): OtelTracerProvider; getActiveSpan(): OtelSpan | undefined };
  createNoopMeter(): OtelMeter;
}

/** The name of floodgate's meter and tracer. */
export const INSTRUMENTATION_SCOPE = 'floodgate';

/**
 * Bucket boundaries of the duration histograms, seconds: from 10 µs (a memory-store decision) to 10 s (a
 * long wait), sub-millisecond first, since most decisions take less than one.
 */
export const DURATION_BUCKETS_S: readonly number[] = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
  5, 10,
];

/** Options of {@link configureTelemetry}. */
export interface TelemetryOptions {
  /** `false` turns floodgate's OpenTelemetry off, even with a provider registered. @default true */
  enabled?: boolean;
  /**
   * Adds a hashed form of the limited key, `floodgate.key.hash`, to span events and spans (never to
   * metrics: a key is no metric attribute). `true`: the first 22 characters of the base64url SHA-256 of
   * `keySalt` + key; or a function of your own. Without a secret salt a hash of a guessable key (an IP
   * address) can be reversed by trying them all. Unset: the key never appears in telemetry. @default undefined
   */
  hashKey?: boolean | ((key: string) => string);
  /** The salt of `hashKey: true`. @default '' */
  keySalt?: string;
  /**
   * A span per decision (`floodgate.limit`, `floodgate.check`, `floodgate.permit`), for timings in traces.
   * Off by default: the HTTP middleware adds an event to the request's own span instead. @default false
   */
  spans?: boolean;
}

/** Most attribute sets `floodgate.decisions` keeps apart (below the SDK's default cardinality limit, 2000); past it, decisions count under policy `(other)`. */
const MAX_DECISION_SERIES = 1000;

/** One attribute set of `floodgate.decisions`, and its count so far. */
interface Series {
  readonly attributes: Attributes;
  count: number;
}

/** The instruments, built from the meter of the provider registered when they were built. */
class Instruments {
  readonly duration: OtelRecord;
  readonly queued: OtelAdd;
  readonly timeInQueue: OtelRecord;
  readonly activePermits: OtelAdd;
  readonly permitDuration: OtelRecord;
  /**
   * Decision counts by attribute set, read by the SDK when it collects: an SDK's `counter.add` costs a
   * few µs (it hashes the attributes each time), a count here a map lookup.
   */
  private readonly series = new Map<string, Series>();
  private readonly decisions: OtelObservable;
  private readonly observe: ObservableCallback;

  constructor(readonly meter: OtelMeter) {
    const advice = { explicitBucketBoundaries: [...DURATION_BUCKETS_S] };
    const series = this.series;
    this.decisions = meter.createObservableCounter('floodgate.decisions', {
      description: 'Decisions made, by limiter prefix, binding policy, operation and result (allowed or denied).',
      unit: '{decision}',
    });
    this.observe = (result) => {
      for (const s of series.values()) result.observe(s.count, s.attributes);
    };
    this.decisions.addCallback(this.observe);
    const seconds = (name: string, description: string) =>
      meter.createHistogram(name, { description, unit: 's', advice });
    const upDown = (name: string, description: string, unit: string) =>
      meter.createUpDownCounter(name, { description, unit });
    this.duration = seconds('floodgate.decision.duration', 'Time to make a decision, store round trip included.');
    this.queued = upDown(
      'floodgate.queued_calls',
      'Calls waiting in acquire() for their turn or their capacity.',
      '{call}',
    );
    this.timeInQueue = seconds(
      'floodgate.call.time_in_queue',
      'Time a call waited in acquire(), by result (acquired, timeout, aborted, error).',
    );
    this.activePermits = upDown(
      'floodgate.permits.active',
      'Concurrency permits held by this process (the sum of their costs), by policy.',
      '{permit}',
    );
    this.permitDuration = seconds(
      'floodgate.permit.duration',
      'Time a concurrency permit was held, by policy and end (released or lost).',
    );
  }

  /** Stops reporting the decision counts (the instruments of another provider replace these). */
  close(): void {
    this.decisions.removeCallback(this.observe);
  }

  /** Counts a decision; returns its attributes (one object per attribute set, reused). */
  count(prefix: string, operation: string, decision: DecisionSummary): Attributes {
    const result = decision.allowed ? 'allowed' : 'denied';
    const id = `${prefix}\0${decision.policy}\0${operation}\0${result}\0${decision.reason ?? ''}`;
    let entry = this.series.get(id);
    if (entry === undefined) {
      const policy = this.series.size < MAX_DECISION_SERIES ? decision.policy : '(other)';
      const other = `${prefix}\0${policy}\0${operation}\0${result}\0${decision.reason ?? ''}`;
      entry = this.series.get(other);
      if (entry === undefined) {
        entry = { attributes: decisionAttributes(prefix, operation, { ...decision, policy }), count: 0 };
        this.series.set(other, entry);
      }
      if (policy === decision.policy) this.series.set(id, entry);
    }
    entry.count++;
    return entry.attributes;
  }
}

/** What telemetry reads of a decision (a limiter's or a permit's). */
export type DecisionSummary = Pick<Decision, 'allowed' | 'policy' | 'limit' | 'remaining' | 'retryAfterMs'> & {
  reason?: string | undefined;
  delayMs?: number | undefined;
};

/** The attributes of a decision: from config and outcome only, never from the key. */
function decisionAttributes(prefix: string, operation: string, decision: DecisionSummary): Attributes {
  const attributes: Attributes = {
    'floodgate.prefix': prefix,
    'floodgate.policy': decision.policy,
    'floodgate.operation': operation,
    'floodgate.result': decision.allowed ? 'allowed' : 'denied',
  };
  if (decision.reason !== undefined) attributes['floodgate.reason'] = decision.reason;
  return attributes;
}

/** What the limiter, permits and middleware call while OpenTelemetry is on. */
export class Telemetry {
  constructor(
    private readonly api: OtelApi,
    private readonly meter: OtelMeter,
    readonly instruments: Instruments | undefined,
    private readonly tracer: OtelTracer | undefined,
    private readonly options: TelemetryOptions,
  ) {}

  /** Whether this was built from these providers and settings (else it is built again). */
  matches(meter: OtelMeter, tracer: OtelTracer | undefined, settings: TelemetryOptions): boolean {
    return this.meter === meter && this.tracer === tracer && this.options === settings;
  }

  /** Whether a span per decision is wanted (and a tracer is registered). */
  get spans(): boolean {
    return this.tracer !== undefined && this.options.spans === true;
  }

  now(): number {
    return performance.now();
  }

  /** Counts a decision and its duration, and ends its span if it has one. */
  decided(
    prefix: string,
    operation: string,
    key: string,
    decision: DecisionSummary,
    startedMs: number,
    span?: OtelSpan,
  ): void {
    tick();
    const instruments = this.instruments;
    if (instruments !== undefined) {
      const attributes = instruments.count(prefix, operation, decision);
      instruments.duration.record((performance.now() - startedMs) / 1000, attributes);
    }
    if (span !== undefined) {
      span.setAttributes(this.eventAttributes(decisionAttributes(prefix, operation, decision), key, decision));
      span.end();
    }
  }

  /** Starts the opt-in span of one decision. */
  startSpan(operation: string): OtelSpan | undefined {
    if (this.options.spans !== true) return undefined;
    return this.tracer?.startSpan(`floodgate.${operation}`);
  }

  /** Ends a span whose call failed. */
  failed(span: OtelSpan | undefined, error: unknown): void {
    if (span === undefined) return;
    const code = (error as { code?: unknown } | null)?.code;
    span.setAttributes({ 'error.type': typeof code === 'string' ? code : 'Error' });
    span.end();
  }

  /** Adds the decision as an event (`floodgate.decision`) to the active span: the HTTP request's. */
  spanEvent(prefix: string, key: string, decision: DecisionSummary): void {
    if (this.tracer === undefined) return;
    const span = this.api.trace.getActiveSpan();
    if (span === undefined || !span.isRecording()) return;
    span.addEvent(
      'floodgate.decision',
      this.eventAttributes(decisionAttributes(prefix, 'limit', decision), key, decision),
    );
  }

  /** A call starts waiting in acquire(). */
  queued(prefix: string): void {
    this.instruments?.queued.add(1, { 'floodgate.prefix': prefix });
  }

  /** A call leaves acquire()'s queue, after `startedMs`, with its result. */
  dequeued(prefix: string, startedMs: number, result: 'acquired' | 'timeout' | 'aborted' | 'error'): void {
    const instruments = this.instruments;
    if (instruments === undefined) return;
    instruments.queued.add(-1, { 'floodgate.prefix': prefix });
    instruments.timeInQueue.record((performance.now() - startedMs) / 1000, {
      'floodgate.prefix': prefix,
      'floodgate.result': result,
    });
  }

  /** A permit of `cost` is granted under `policy`. */
  permitGranted(policy: string, cost: number): void {
    this.instruments?.activePermits.add(cost, { 'floodgate.policy': policy });
  }

  /** A permit granted at `startedMs` ends. */
  permitEnded(policy: string, cost: number, startedMs: number, end: 'released' | 'lost'): void {
    const instruments = this.instruments;
    if (instruments === undefined) return;
    instruments.activePermits.add(-cost, { 'floodgate.policy': policy });
    instruments.permitDuration.record((performance.now() - startedMs) / 1000, {
      'floodgate.policy': policy,
      'floodgate.permit.end': end,
    });
  }

  private eventAttributes(base: Attributes, key: string, decision: DecisionSummary): Attributes {
    const attributes: Attributes = {
      ...base,
      'floodgate.limit': decision.limit,
      'floodgate.remaining': decision.remaining,
    };
    if (!decision.allowed) attributes['floodgate.retry_after_ms'] = decision.retryAfterMs;
    if (decision.delayMs !== undefined) attributes['floodgate.delay_ms'] = decision.delayMs;
    const hash = this.options.hashKey;
    if (hash === true)
      attributes['floodgate.key.hash'] = sha256Base64url(`${this.options.keySalt ?? ''}${key}`).slice(0, 22);
    else if (typeof hash === 'function') attributes['floodgate.key.hash'] = String(hash(key));
    return attributes;
  }
}

/**
 * floodgate's OpenTelemetry, while `@opentelemetry/api` is loaded and a meter or tracer provider is
 * registered; undefined otherwise. A live binding: read it at each use.
 */
export let telemetry: Telemetry | undefined;

let api: OtelApi | null | undefined;
let loading: Promise<boolean> | undefined;
let options: TelemetryOptions = {};
/**
 * Decisions between two looks at the registered providers (an SDK may be set up after the limiter, or
 * replaced). Counted rather than timed: a timer of a library would run in its users' fake-timer tests.
 */
const RECHECK_EVERY = 4096;
let untilRecheck = RECHECK_EVERY;

/**
 * Called by each decision: every {@link RECHECK_EVERY} decisions, looks at the registered providers
 * again. A decrement otherwise.
 */
export function tick(): void {
  if (--untilRecheck > 0) return;
  untilRecheck = RECHECK_EVERY;
  if (api !== undefined && api !== null) refresh();
}

/** Reports nothing more: the decision counts' callback leaves its meter. */
function stop(): void {
  telemetry?.instruments?.close();
  telemetry = undefined;
}

/** Builds `telemetry` from the providers registered now. */
function refresh(): void {
  if (api === undefined || api === null || options.enabled === false) {
    stop();
    return;
  }
  const meter = api.metrics.getMeterProvider().getMeter(INSTRUMENTATION_SCOPE);
  const metricsOn = meter !== api.createNoopMeter();
  const tracerProvider = api.trace.getTracerProvider();
  const tracer =
    typeof tracerProvider.getDelegateTracer === 'function'
      ? tracerProvider.getDelegateTracer(INSTRUMENTATION_SCOPE)
      : tracerProvider.getTracer(INSTRUMENTATION_SCOPE);
  if (!metricsOn && tracer === undefined) {
    stop();
    return;
  }
  const current = telemetry;
  if (current?.matches(meter, tracer, options) === true) return;
  // The same meter keeps its instruments (and its counts); another one gets new ones.
  let instruments = current?.instruments;
  if (instruments !== undefined && (!metricsOn || instruments.meter !== meter)) {
    instruments.close();
    instruments = undefined;
  }
  if (metricsOn) instruments ??= new Instruments(meter);
  telemetry = new Telemetry(api, meter, instruments, tracer, options);
}

/**
 * Starts loading `@opentelemetry/api` (once per process): called when a limiter, a permit set or a
 * middleware is built. Resolves to whether the package is there.
 */
export function loadTelemetry(): Promise<boolean> {
  if (loading !== undefined) {
    // Each limiter, permit set or middleware built looks at the providers again.
    if (api !== undefined && api !== null) refresh();
    return loading;
  }
  // A specifier in a variable: bundlers leave the import alone instead of failing on a missing package.
  const specifier = '@opentelemetry/api';
  let imported: Promise<unknown>;
  try {
    imported = import(specifier);
  } catch {
    imported = Promise.reject(new Error('no dynamic import here'));
  }
  loading = imported.then(
    (module) => {
      const loaded = module as Partial<OtelApi> & { default?: Partial<OtelApi> };
      const candidate = typeof loaded.metrics === 'object' ? loaded : loaded.default;
      if (
        candidate === undefined ||
        typeof candidate.metrics?.getMeterProvider !== 'function' ||
        typeof candidate.trace?.getActiveSpan !== 'function' ||
        typeof candidate.createNoopMeter !== 'function'
      ) {
        api = null;
        return false;
      }
      api = candidate as OtelApi;
      refresh();
      return true;
    },
    () => {
      api = null;
      return false;
    },
  );
  return loading;
}

/**
 * Sets how floodgate reports to OpenTelemetry. Nothing is needed for the defaults: with
 * `@opentelemetry/api` installed and a provider registered (the SDK started), floodgate records its
 * instruments and the middleware's span events on its own (a provider registered after the first limiter
 * is seen when the next limiter is built, or within 4096 decisions).
 *
 * @example
 * ```ts
 * configureTelemetry({ hashKey: true, keySalt: process.env.KEY_SALT ?? '', spans: true });
 * ```
 */
export function configureTelemetry(settings: TelemetryOptions): void {
  if (typeof settings !== 'object' || settings === null) {
    throw invalid('ERR_INVALID_OPTION', 'configureTelemetry(options)', settings, 'an options object');
  }
  const { enabled, hashKey, keySalt, spans } = settings;
  if (enabled !== undefined && typeof enabled !== 'boolean')
    throw invalid('ERR_INVALID_OPTION', 'enabled', enabled, 'a boolean');
  if (hashKey !== undefined && typeof hashKey !== 'boolean' && typeof hashKey !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'hashKey', hashKey, 'a boolean or a function of the key');
  }
  if (keySalt !== undefined && typeof keySalt !== 'string')
    throw invalid('ERR_INVALID_OPTION', 'keySalt', keySalt, 'a string');
  if (spans !== undefined && typeof spans !== 'boolean')
    throw invalid('ERR_INVALID_OPTION', 'spans', spans, 'a boolean');
  options = { ...settings };
  refresh();
}

/**
 * Loads `@opentelemetry/api` if it is not yet, and looks at the registered providers now rather than at
 * the next look: resolves to whether floodgate reports to OpenTelemetry. For tests, and for a process
 * that must count its very first decisions.
 */
export async function telemetryReady(): Promise<boolean> {
  await loadTelemetry();
  refresh();
  return telemetry !== undefined;
}
