import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeniedKeys, LatencyHistogram } from '../src/live-stats.js';
import { type Service, startService } from '../src/service.js';
import { tenantOfKey } from '../src/stats.js';
import { get, post, startTestService, TEST_CONFIG } from './helpers.js';

describe('the most denied keys sketch', () => {
  it('finds a heavy key among many light ones, in fixed memory, never counting it low', () => {
    const sketch = new DeniedKeys(32);
    let attacker = 0;
    // 20,000 one-off keys (a botnet of single requests) and one key denied 2,000 times among them.
    for (let i = 0; i < 20_000; i++) {
      sketch.add(`bot-${i}`);
      if (i % 10 === 0) {
        sketch.add('attacker');
        attacker++;
      }
    }
    const { total, keys } = sketch.top(100);
    expect(total).toBe(22_000);
    expect(keys.length).toBeLessThanOrEqual(32);
    const top = keys[0];
    expect(top?.key).toBe('attacker');
    expect(top?.count).toBeGreaterThanOrEqual(attacker);
    expect((top?.count ?? 0) - (top?.error ?? 0)).toBeLessThanOrEqual(attacker);
  });

  it('counts exactly while it has room, and forgets after two epochs', () => {
    const sketch = new DeniedKeys(8);
    for (const key of ['a', 'b', 'a', 'c', 'a', 'b']) sketch.add(key);
    expect(sketch.top(2).keys).toEqual([
      { key: 'a', count: 3, error: 0 },
      { key: 'b', count: 2, error: 0 },
    ]);
    sketch.rotate();
    sketch.add('b');
    sketch.add('b');
    // The previous epoch still counts: the list covers the last one to two epochs.
    expect(sketch.top(1).keys).toEqual([{ key: 'b', count: 4, error: 0 }]);
    sketch.rotate();
    sketch.rotate();
    expect(sketch.top(5)).toEqual({ total: 0, error: 0, keys: [] });
    expect(() => new DeniedKeys(0)).toThrow(RangeError);
  });
});

describe('the tenant of a counter key', () => {
  it("reads the descriptor's tenant entry, and no value can forge one", () => {
    expect(tenantOfKey('api|tenant=acme')).toBe('acme');
    expect(tenantOfKey('api|user=u1|tenant=acme|path=/x')).toBe('acme');
    expect(tenantOfKey('api|tenant=a\\|b\\=c')).toBe('a|b=c');
    // Escaped separators inside a domain, an entry key or a value are not entries.
    expect(tenantOfKey('api\\|tenant\\=evil')).toBeUndefined();
    expect(tenantOfKey('api|user=x\\|tenant\\=evil')).toBeUndefined();
    expect(tenantOfKey('api|x\\|tenant=evil')).toBeUndefined();
    expect(tenantOfKey('tenant=evil')).toBeUndefined();
    expect(tenantOfKey('api|tenant=')).toBeUndefined();
    expect(tenantOfKey('api|tenant')).toBeUndefined();
    expect(tenantOfKey('|#digest-of-a-long-key')).toBeUndefined();
    // A dangling escape is no key the service builds: no tenant.
    expect(tenantOfKey('api|tenant=x\\')).toBeUndefined();
  });
});

describe('the latency histogram', () => {
  it('reports percentiles within a bucket (about 19%) above the truth, never below', () => {
    const histogram = new LatencyHistogram();
    // 1 … 1000 µs, evenly.
    for (let us = 1; us <= 1000; us++) histogram.record(us / 1000);
    histogram.rotate();
    const summary = histogram.summary(1);
    expect(summary.count).toBe(1000);
    expect(summary.maxMs).toBe(1);
    for (const [reported, truth] of [
      [summary.p50Ms, 0.5],
      [summary.p90Ms, 0.9],
      [summary.p99Ms, 0.99],
    ] as const) {
      expect(reported).toBeGreaterThanOrEqual(truth);
      expect(reported).toBeLessThanOrEqual(Math.min(1, truth * 1.19) + 0.001);
    }
  });

  it('covers the closed seconds asked for, and the last minute at most', () => {
    const histogram = new LatencyHistogram();
    histogram.record(5);
    histogram.rotate();
    histogram.record(0.01);
    histogram.rotate();
    expect(histogram.summary(1)).toMatchObject({ count: 1, maxMs: 0.01 });
    expect(histogram.summary(2)).toMatchObject({ count: 2, maxMs: 5 });
    for (let i = 0; i < 60; i++) histogram.rotate();
    expect(histogram.summary(60).count).toBe(0);
  });
});

describe('GET /v1/stats: store health, latency and the most denied keys', () => {
  let service: Service;
  beforeAll(async () => {
    service = await startTestService();
  });
  afterAll(() => service?.close());

  it('names the keys the limiter denied, and measures the decisions', async () => {
    const ask = (ip: string) =>
      post(service, '/v1/decide', {
        domain: 'api',
        descriptors: [{ entries: [{ key: 'remote_address', value: ip }] }],
      });
    // per-ip allows 3 an hour: 7 denials for one address, 1 for another, none for a third.
    for (let i = 0; i < 10; i++) await ask('203.0.113.9');
    for (let i = 0; i < 4; i++) await ask('198.51.100.4');
    await ask('192.0.2.1');
    // A status call changes nothing and is not a denial.
    await post(service, '/v1/status', {
      domain: 'api',
      descriptors: [{ entries: [{ key: 'remote_address', value: '203.0.113.9' }] }],
    });
    service.stats.sample(Date.now());
    const stats = JSON.parse((await get(service, '/v1/stats?window=60')).text);
    expect(stats.deniedKeys).toEqual([
      { key: 'api|remote_address=203.0.113.9', count: 7, error: 0 },
      { key: 'api|remote_address=198.51.100.4', count: 1, error: 0 },
    ]);
    expect(stats.deniedKeysTotal).toBe(8);
    expect(stats.deniedTenants).toEqual([]);
    expect(stats.health).toMatchObject({ up: true, breaker: 'closed', storeErrorsTotal: 0, degradedTotal: 0 });
    expect(stats.health.latency.count).toBeGreaterThanOrEqual(15);
    expect(stats.health.latency.maxMs).toBeGreaterThan(0);
  });
});

describe('GET /v1/stats: every decision once', () => {
  let service: Service | undefined;
  afterAll(() => service?.close());

  it('counts a decision under three policies once, beside each policy counting it', async () => {
    service = await startService({
      config: `
domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - { algorithm: fixed-window, name: hourly, limit: 10, windowMs: 3600000 }
          - { algorithm: gcra, name: per-second, limit: 1000, periodMs: 1000 }
          - { algorithm: sliding-window, name: per-minute, limit: 1000, windowMs: 60000 }
      - key: shadowed
        shadow: true
        policies:
          - { algorithm: fixed-window, name: shadow-hourly, limit: 1, windowMs: 3600000 }
          - { algorithm: gcra, name: shadow-per-second, limit: 1000, periodMs: 1000 }
`,
      store: 'memory',
      httpPort: 0,
      grpcPort: false,
      logger: 'silent',
    });
    const running = service;
    const ask = (key: string) =>
      post(running, '/v1/decide', { domain: 'api', descriptors: [{ entries: [{ key, value: '192.0.2.7' }] }] });
    // A third admitted: 10 of 30 under the hourly window; the two wide policies admit all 30.
    for (let i = 0; i < 30; i++) await ask('remote_address');
    for (let i = 0; i < 3; i++) await ask('shadowed');
    // Rates over the whole run (the service sampled zeros at its start; this sample follows the traffic).
    service.stats.sample(Date.now());
    const stats = JSON.parse((await get(service, '/v1/stats?window=60')).text);
    expect(stats.decisions).toMatchObject({ allowedTotal: 11, deniedTotal: 20, shadowDeniedTotal: 2 });
    const { allowedPerSecond, deniedPerSecond, shadowDeniedPerSecond } = stats.decisions;
    expect(deniedPerSecond).toBeGreaterThan(0);
    expect(allowedPerSecond / deniedPerSecond).toBeCloseTo(11 / 20, 1);
    expect(shadowDeniedPerSecond / deniedPerSecond).toBeCloseTo(2 / 20, 1);
    // The policies' own tallies: an admitted decision counts under each of its policies.
    const totals = Object.fromEntries(
      stats.policies.map((p: { policy: string; allowedTotal: number; deniedTotal: number }) => [
        p.policy,
        [p.allowedTotal, p.deniedTotal],
      ]),
    );
    expect(totals).toMatchObject({ hourly: [10, 20], 'per-second': [10, 0], 'per-minute': [10, 0] });
  });
});

describe('GET /v1/stats while the store is down', () => {
  let service: Service | undefined;
  afterAll(() => service?.close());

  it('reports the store unreachable and its errors, and blames no key for degraded denials', async () => {
    // A port nothing listens on: the Redis client is refused at once, a real failure and no stand-in.
    const port = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as { port: number };
        server.close(() => resolve(port));
      });
    });
    service = await startService({
      config: TEST_CONFIG,
      store: `redis://127.0.0.1:${port}`,
      httpPort: 0,
      grpcPort: false,
      logger: 'silent',
      failure: 'closed',
      storeTimeoutMs: 200,
    });
    for (let i = 0; i < 3; i++) {
      const answer = await post(service, '/v1/decide', {
        domain: 'api',
        descriptors: [{ entries: [{ key: 'remote_address', value: '203.0.113.50' }] }],
      });
      expect((answer.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ reason: 'degraded' });
    }
    service.stats.sample(Date.now());
    const stats = JSON.parse((await get(service, '/v1/stats?window=60')).text);
    expect(stats.health.up).toBe(false);
    expect(stats.health.storeErrorsTotal).toBeGreaterThanOrEqual(1);
    expect(stats.health.degradedTotal).toBe(3);
    expect(stats.deniedKeys).toEqual([]);
  });
});
