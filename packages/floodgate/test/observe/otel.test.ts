import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { rateLimit } from '../../src/http/node.js';
import {
  concurrency,
  configureTelemetry,
  createLimiter,
  createPermits,
  fixedWindow,
  gcra,
  memoryPermitStore,
  memoryStore,
  telemetryReady,
} from '../../src/index.js';
import { sha256Base64url } from '../../src/sha256.js';
import { DURATION_BUCKETS_S } from '../../src/telemetry/otel.js';

// floodgate's OpenTelemetry, collected by the SDK's in-memory exporters: a provider registered the
// usual way is all it takes (no floodgate setup), and the limited key never shows unless hashed.

const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
const meterProvider = new MeterProvider({ readers: [reader] });
const spanExporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] });
const contextManager = new AsyncLocalStorageContextManager();

/** A user's key that must never appear in telemetry as it is. */
const SECRET_KEY = 'user-secret-4242';

interface Collected {
  metrics: Record<string, { unit: string; points: { attributes: Record<string, unknown>; value: unknown }[] }>;
  spans: { name: string; parent: string | undefined; attributes: Record<string, unknown>; events: unknown[] }[];
}

/** Everything exported since the last reset: metrics (cumulative) and finished spans. */
async function collect(): Promise<Collected> {
  metricExporter.reset();
  await reader.forceFlush();
  await tracerProvider.forceFlush();
  const out: Collected = { metrics: {}, spans: [] };
  for (const resource of metricExporter.getMetrics()) {
    for (const scope of resource.scopeMetrics) {
      if (scope.scope.name !== 'floodgate') continue;
      for (const metric of scope.metrics) {
        out.metrics[metric.descriptor.name] = {
          unit: metric.descriptor.unit,
          points: (metric.dataPoints as DataPoint<number | Histogram>[]).map((p) => ({
            attributes: { ...p.attributes },
            value:
              typeof p.value === 'number'
                ? p.value
                : { count: p.value.count, sum: p.value.sum, boundaries: p.value.buckets.boundaries },
          })),
        };
      }
    }
  }
  const spans = spanExporter.getFinishedSpans() as ReadableSpan[];
  const names = new Map(spans.map((s) => [s.spanContext().spanId, s.name]));
  for (const s of spans) {
    const parent = s.parentSpanContext?.spanId;
    out.spans.push({
      name: s.name,
      parent: parent === undefined ? undefined : (names.get(parent) ?? parent),
      attributes: { ...s.attributes },
      events: s.events.map((e) => ({ name: e.name, attributes: { ...e.attributes } })),
    });
  }
  return out;
}

const points = (c: Collected, name: string) => c.metrics[name]?.points ?? [];

/** A server whose requests each run in a span, as the HTTP server instrumentation makes them. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<{ server: Server; url: string }> {
  const tracer = trace.getTracer('http-server-under-test');
  const server = createServer((req, res) =>
    tracer.startActiveSpan(`${req.method} ${req.url}`, (span) => {
      res.on('finish', () => span.end());
      (handler as (q: typeof req, s: typeof res) => void)(req, res);
    }),
  );
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const servers: Server[] = [];

beforeAll(async () => {
  context.setGlobalContextManager(contextManager.enable());
  metrics.setGlobalMeterProvider(meterProvider);
  trace.setGlobalTracerProvider(tracerProvider);
  expect(await telemetryReady()).toBe(true);
});

afterEach(async () => {
  configureTelemetry({});
  spanExporter.reset();
});

afterAll(async () => {
  for (const server of servers) server.close();
  await meterProvider.shutdown();
  await tracerProvider.shutdown();
  metrics.disable();
  trace.disable();
  context.disable();
  await telemetryReady();
});

describe('OpenTelemetry, with a provider registered and nothing else set up', () => {
  it('collects one HTTP request through the middleware: counts, a duration, an event on its span, no key', async () => {
    const limit = rateLimit({
      policies: fixedWindow({ name: 'per-user', limit: 1, windowMs: 60_000 }),
      prefix: 'web',
      key: (req) => String(req.headers['x-user']),
    });
    const { server, url } = await serve(limit.wrap((_req, res) => res.end('ok')));
    servers.push(server);
    const before = await collect();
    expect(before.metrics['floodgate.decisions']).toBeUndefined();

    const first = await fetch(url, { headers: { 'x-user': SECRET_KEY } });
    expect(first.status).toBe(200);
    const one = await collect();
    expect(one.metrics['floodgate.decisions']).toEqual({
      unit: '{decision}',
      points: [
        {
          attributes: {
            'floodgate.prefix': 'web',
            'floodgate.policy': 'per-user',
            'floodgate.operation': 'limit',
            'floodgate.result': 'allowed',
          },
          value: 1,
        },
      ],
    });
    const duration = points(one, 'floodgate.decision.duration')[0]?.value as {
      count: number;
      sum: number;
      boundaries: number[];
    };
    expect(one.metrics['floodgate.decision.duration']?.unit).toBe('s');
    expect(duration.count).toBe(1);
    // Seconds, and sub-millisecond buckets: a memory-store decision lands below 1 ms on any machine.
    expect(duration.boundaries).toEqual(DURATION_BUCKETS_S);
    expect(duration.boundaries.filter((b) => b < 0.001).length).toBeGreaterThanOrEqual(5);
    expect(duration.sum).toBeGreaterThan(0);
    expect(duration.sum).toBeLessThan(1);
    // No span of floodgate's own: one event on the request's span.
    expect(one.spans).toEqual([
      {
        name: 'GET /',
        parent: undefined,
        attributes: {},
        events: [
          {
            name: 'floodgate.decision',
            attributes: {
              'floodgate.prefix': 'web',
              'floodgate.policy': 'per-user',
              'floodgate.operation': 'limit',
              'floodgate.result': 'allowed',
              'floodgate.limit': 1,
              'floodgate.remaining': 0,
            },
          },
        ],
      },
    ]);

    spanExporter.reset();
    const second = await fetch(url, { headers: { 'x-user': SECRET_KEY } });
    expect(second.status).toBe(429);
    const two = await collect();
    expect(points(two, 'floodgate.decisions').map((p) => [p.attributes['floodgate.result'], p.value])).toEqual([
      ['allowed', 1],
      ['denied', 1],
    ]);
    expect(points(two, 'floodgate.decisions')[1]?.attributes['floodgate.reason']).toBe('limit');
    const event = two.spans[0]?.events[0] as { attributes: Record<string, unknown> };
    expect(event.attributes).toMatchObject({ 'floodgate.result': 'denied', 'floodgate.reason': 'limit' });
    expect(event.attributes['floodgate.retry_after_ms']).toBeGreaterThan(0);
    expect(JSON.stringify([one, two])).not.toContain(SECRET_KEY);
  });

  it('counts a middleware decision that gives its cost back later (skipFailedRequests) as one decision', async () => {
    const limit = rateLimit({
      policies: fixedWindow({ name: 'refunded', limit: 5, windowMs: 60_000 }),
      prefix: 'refunds',
      skipFailedRequests: true,
      key: (req) => String(req.headers['x-user']),
    });
    const { server, url } = await serve(
      limit.wrap((_req, res) => {
        res.statusCode = 500;
        res.end('failed');
      }),
    );
    servers.push(server);
    expect((await fetch(url, { headers: { 'x-user': SECRET_KEY } })).status).toBe(500);
    const collected = await collect();
    expect(
      points(collected, 'floodgate.decisions')
        .filter((p) => p.attributes['floodgate.prefix'] === 'refunds')
        .map((p) => [p.attributes['floodgate.result'], p.value]),
    ).toEqual([['allowed', 1]]);
    expect(collected.spans.at(-1)?.events).toMatchObject([{ name: 'floodgate.decision' }]);
  });

  it('adds a hashed key to events only when asked, and never to metrics', async () => {
    configureTelemetry({ hashKey: true, keySalt: 'pepper' });
    const limit = rateLimit({
      policies: fixedWindow({ name: 'hashed', limit: 5, windowMs: 60_000 }),
      prefix: 'hashed',
      key: (req) => String(req.headers['x-user']),
    });
    const { server, url } = await serve(limit.wrap((_req, res) => res.end('ok')));
    servers.push(server);
    await fetch(url, { headers: { 'x-user': SECRET_KEY } });
    const collected = await collect();
    const event = collected.spans[0]?.events[0] as { attributes: Record<string, unknown> };
    expect(event.attributes['floodgate.key.hash']).toBe(sha256Base64url(`pepper${SECRET_KEY}`).slice(0, 22));
    expect(JSON.stringify(collected)).not.toContain(SECRET_KEY);
    for (const metric of Object.values(collected.metrics)) {
      for (const point of metric.points) expect(Object.keys(point.attributes)).not.toContain('floodgate.key.hash');
    }
    configureTelemetry({ hashKey: (key) => `mine:${key.length}` });
    await fetch(url, { headers: { 'x-user': SECRET_KEY } });
    const again = await collect();
    expect(again.spans.at(-1)?.events).toMatchObject([{ attributes: { 'floodgate.key.hash': 'mine:16' } }]);
  });

  it('makes a span per decision only when asked, a child of the active span', async () => {
    configureTelemetry({ spans: true });
    const limiter = createLimiter({
      store: memoryStore(),
      policies: fixedWindow({ limit: 1, windowMs: 1000 }),
      prefix: 'spans',
    });
    const tracer = trace.getTracer('app');
    await tracer.startActiveSpan('job', async (span) => {
      await limiter.limit(SECRET_KEY);
      limiter.checkSync(SECRET_KEY);
      span.end();
    });
    const collected = await collect();
    expect(collected.spans.map((s) => [s.name, s.parent, s.attributes['floodgate.result']])).toEqual([
      ['floodgate.limit', 'job', 'allowed'],
      ['floodgate.check', 'job', 'denied'],
      ['job', undefined, undefined],
    ]);
    expect(JSON.stringify(collected.spans)).not.toContain(SECRET_KEY);
  });

  it("counts acquire()'s waiting in the shape of ASP.NET Core's queue instruments", async () => {
    const limiter = createLimiter({
      store: memoryStore(),
      policies: fixedWindow({ limit: 1, windowMs: 60_000 }),
      prefix: 'queue',
    });
    await limiter.acquire('k', { timeoutMs: 1000 });
    await expect(limiter.acquire('k', { timeoutMs: 0 })).rejects.toMatchObject({ code: 'ERR_TIMEOUT' });
    const collected = await collect();
    expect(
      points(collected, 'floodgate.queued_calls').filter((p) => p.attributes['floodgate.prefix'] === 'queue'),
    ).toEqual([{ attributes: { 'floodgate.prefix': 'queue' }, value: 0 }]);
    const waits = points(collected, 'floodgate.call.time_in_queue').filter(
      (p) => p.attributes['floodgate.prefix'] === 'queue',
    );
    expect(waits.map((p) => [p.attributes['floodgate.result'], (p.value as { count: number }).count])).toEqual([
      ['acquired', 1],
      ['timeout', 1],
    ]);
  });

  it('counts concurrency permits held, and how long, as leases', async () => {
    const permits = createPermits({
      store: memoryPermitStore(),
      policy: concurrency({ name: 'jobs', limit: 2, leaseMs: 30_000 }),
      prefix: 'permits',
    });
    const a = await permits.limit(SECRET_KEY, { cost: 2 });
    const held = await collect();
    expect(points(held, 'floodgate.permits.active')).toEqual([
      { attributes: { 'floodgate.policy': 'jobs' }, value: 2 },
    ]);
    const denied = await permits.limit(SECRET_KEY);
    expect(denied.allowed).toBe(false);
    await a.permit?.release();
    await a.permit?.release();
    const after = await collect();
    expect(points(after, 'floodgate.permits.active')).toEqual([
      { attributes: { 'floodgate.policy': 'jobs' }, value: 0 },
    ]);
    expect(
      points(after, 'floodgate.permit.duration').map((p) => [p.attributes, (p.value as { count: number }).count]),
    ).toEqual([[{ 'floodgate.policy': 'jobs', 'floodgate.permit.end': 'released' }, 1]]);
    expect(
      points(after, 'floodgate.decisions')
        .filter((p) => p.attributes['floodgate.operation'] === 'permit')
        .map((p) => [p.attributes['floodgate.result'], p.value]),
    ).toEqual([
      ['allowed', 1],
      ['denied', 1],
    ]);
    expect(JSON.stringify(after)).not.toContain(SECRET_KEY);
  });

  it('counts a limiter call under a rate and a concurrency policy as one decision, its permit as a lease', async () => {
    const limiter = createLimiter({
      policies: [
        fixedWindow({ name: 'calls', limit: 10, windowMs: 60_000 }),
        concurrency({ name: 'slots', limit: 1, leaseMs: 30_000 }),
      ],
      store: memoryStore(),
      permits: memoryPermitStore(),
      prefix: 'both',
    });
    const a = await limiter.limit(SECRET_KEY);
    expect((await limiter.limit(SECRET_KEY)).allowed).toBe(false);
    const held = await collect();
    expect(points(held, 'floodgate.permits.active')).toContainEqual({
      attributes: { 'floodgate.policy': 'slots' },
      value: 1,
    });
    await limiter.release(a);
    const after = await collect();
    expect(points(after, 'floodgate.permits.active')).toContainEqual({
      attributes: { 'floodgate.policy': 'slots' },
      value: 0,
    });
    expect(
      points(after, 'floodgate.decisions')
        .filter((p) => p.attributes['floodgate.prefix'] === 'both')
        .map((p) => [p.attributes['floodgate.operation'], p.attributes['floodgate.result'], p.value]),
    ).toEqual([
      ['limit', 'allowed', 1],
      ['limit', 'denied', 1],
    ]);
    expect(JSON.stringify(after)).not.toContain(SECRET_KEY);
  });

  it('keeps at most 1000 decision series: policy names made per call fold into (other)', async () => {
    const limiter = createLimiter({ store: memoryStore(), prefix: 'names' });
    for (let i = 0; i < 2100; i++) {
      limiter.limitSync('k', { policies: fixedWindow({ name: `per-call-${i}`, limit: 5, windowMs: 1000 }) });
    }
    const series = points(await collect(), 'floodgate.decisions');
    expect(series.length).toBeLessThanOrEqual(1001);
    const other = series.find((p) => p.attributes['floodgate.policy'] === '(other)');
    const named = series.filter((p) => p.attributes['floodgate.prefix'] === 'names').length;
    expect(named).toBeLessThan(2100);
    // Every decision is counted, folded or not.
    const counted = series
      .filter((p) => p.attributes['floodgate.prefix'] === 'names')
      .reduce((sum, p) => sum + (p.value as number), 0);
    expect(counted).toBe(2100);
    expect(other?.value).toBeGreaterThanOrEqual(1100);
  });

  // `allowSync` under a meter: the memory store's fast path answers it with no decision while nothing
  // observes, and it is counted as `limit` once something does.
  it.each([
    { method: 'limitSync', prefix: 'late', policies: fixedWindow({ limit: 1e9, windowMs: 1000 }) },
    { method: 'allowSync', prefix: 'verdicts', policies: gcra({ limit: 1_000_000, periodMs: 1000 }) },
  ] as const)(
    'sees a provider registered after the limiter within 4096 decisions of $method, with no timer',
    async ({ method, prefix, policies }) => {
      const limiter = createLimiter({ store: memoryStore(), policies, prefix });
      const call = () => (method === 'limitSync' ? limiter.limitSync('k').allowed : limiter.allowSync('k'));
      metrics.disable();
      trace.disable();
      for (let i = 0; i < 4096; i++) call();
      metrics.setGlobalMeterProvider(meterProvider);
      trace.setGlobalTracerProvider(tracerProvider);
      // Off until floodgate looks again: counted decisions, not a timer.
      call();
      for (let i = 0; i < 4096; i++) call();
      const late = points(await collect(), 'floodgate.decisions').filter(
        (p) => p.attributes['floodgate.prefix'] === prefix,
      );
      expect(late.length).toBe(1);
      expect(late[0]?.attributes['floodgate.operation']).toBe('limit');
      expect(late[0]?.value).toBeGreaterThan(0);
      expect(late[0]?.value).toBeLessThan(4097);
    },
  );

  it('refuses bad settings with an error naming the option', () => {
    for (const [settings, option] of [
      [null, 'configureTelemetry(options)'],
      [{ enabled: 'yes' }, 'enabled'],
      [{ hashKey: 'sha256' }, 'hashKey'],
      [{ keySalt: 42 }, 'keySalt'],
      [{ spans: 1 }, 'spans'],
    ] as const) {
      expect(() => configureTelemetry(settings as never)).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option }),
      );
    }
  });

  it('records nothing once turned off, and decides as before', async () => {
    configureTelemetry({ enabled: false });
    expect(await telemetryReady()).toBe(false);
    const limiter = createLimiter({
      store: memoryStore(),
      policies: fixedWindow({ limit: 1, windowMs: 1000 }),
      prefix: 'off',
    });
    expect((await limiter.limit('k')).allowed).toBe(true);
    expect(limiter.limitSync('k').allowed).toBe(false);
    const collected = await collect();
    expect(points(collected, 'floodgate.decisions').filter((p) => p.attributes['floodgate.prefix'] === 'off')).toEqual(
      [],
    );
    configureTelemetry({});
    expect(await telemetryReady()).toBe(true);
  });
});
