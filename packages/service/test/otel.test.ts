import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { telemetryReady } from 'floodgate';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Service } from '../src/service.js';
import { descriptor, post, startTestService } from './helpers.js';

// floodgate serve emits the library's OpenTelemetry instruments once a provider is registered in its
// process (as the SDK's register hook does), next to its Prometheus metrics, and no key among them.

const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
const provider = new MeterProvider({ readers: [reader] });

const CONFIG = `
prefix: otel-test
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: fixed-window, name: per-user, limit: 1, windowMs: 3600000 }
`;

let service: Service;

beforeAll(async () => {
  metrics.setGlobalMeterProvider(provider);
  expect(await telemetryReady()).toBe(true);
  service = await startTestService(CONFIG);
});

afterAll(async () => {
  await service?.close();
  await provider.shutdown();
  metrics.disable();
});

describe('floodgate serve with an OpenTelemetry provider', () => {
  it('counts and times its decisions as the library does, by policy and result, without the key', async () => {
    const ask = () =>
      post(service, '/v1/decide', { domain: 'api', descriptors: [descriptor(['user', 'secret-user-77'])] });
    expect((await ask()).body.code).toBe('OK');
    expect((await ask()).body.code).toBe('OVER_LIMIT');
    exporter.reset();
    await reader.forceFlush();
    const scope = exporter
      .getMetrics()
      .flatMap((r) => r.scopeMetrics)
      .find((s) => s.scope.name === 'floodgate');
    const decisions = scope?.metrics.find((m) => m.descriptor.name === 'floodgate.decisions');
    // (The readiness probe's checks, policy `probe`, are decisions too.)
    const limited = decisions?.dataPoints.filter((p) => p.attributes['floodgate.operation'] === 'limit');
    expect(limited?.map((p) => [p.attributes, p.value])).toEqual([
      [
        {
          'floodgate.prefix': 'otel-test',
          'floodgate.policy': 'per-user',
          'floodgate.operation': 'limit',
          'floodgate.result': 'allowed',
        },
        1,
      ],
      [
        {
          'floodgate.prefix': 'otel-test',
          'floodgate.policy': 'per-user',
          'floodgate.operation': 'limit',
          'floodgate.result': 'denied',
          'floodgate.reason': 'limit',
        },
        1,
      ],
    ]);
    const duration = scope?.metrics.find((m) => m.descriptor.name === 'floodgate.decision.duration');
    expect(duration?.descriptor.unit).toBe('s');
    expect(
      duration?.dataPoints
        .filter((p) => p.attributes['floodgate.operation'] === 'limit')
        .map((p) => (p.value as { count: number }).count),
    ).toEqual([1, 1]);
    expect(JSON.stringify(scope)).not.toContain('secret-user-77');
    // The Prometheus metrics are still served as they were.
    const text = await (await fetch(`http://127.0.0.1:${service.httpPort}/metrics`)).text();
    expect(text).toContain('floodgate_decisions_total{domain="api",rule="user",policy="per-user",outcome="denied"} 1');
  });
});
