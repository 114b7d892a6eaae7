import { manualClock } from 'floodgate/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Service, startService } from '../src/service.js';
import { get, grpcClient, post, type RateLimitClient, startTestService } from './helpers.js';
import { PERMIT_CONFIG } from './permit-config.js';

const tenant = (value: string) => [{ key: 'tenant', value }];

let service: Service;
let client: RateLimitClient;
beforeAll(async () => {
  service = await startTestService(PERMIT_CONFIG);
  client = grpcClient(service.grpcPort);
});
afterAll(async () => {
  client?.close();
  await service?.close();
});

/** A counter or gauge of the service's /metrics with these labels, 0 when absent. */
async function metric(name: string, labels: string): Promise<number> {
  const text = (await get(service, '/metrics')).text;
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('HTTP API: permits', () => {
  it('acquires up to the limit, refuses the next, and a release lets one in', async () => {
    const a = await post(service, '/v1/permits/acquire', { domain: 'llm', entries: tenant('t1') });
    expect(a.status).toBe(200);
    expect(a.body).toMatchObject({
      matched: true,
      rule: 'tenant',
      allowed: true,
      limit: 2,
      inFlight: 1,
      remaining: 1,
      policy: 'concurrency',
      leaseMs: 60_000,
    });
    expect(a.body.leaseId).toMatch(/^[A-Za-z0-9_-]{22}$/);
    const b = await post(service, '/v1/permits/acquire', { domain: 'llm', entries: tenant('t1') });
    expect(b.body.fence as number).toBeGreaterThan(a.body.fence as number);
    const refused = await post(service, '/v1/permits/acquire', { domain: 'llm', entries: tenant('t1') });
    expect(refused.body).toMatchObject({ allowed: false, reason: 'limit', inFlight: 2, remaining: 0 });
    expect(refused.body.leaseId).toBeUndefined();
    // Another tenant has its own permits.
    expect((await post(service, '/v1/permits/acquire', { domain: 'llm', entries: tenant('t2') })).body.allowed).toBe(
      true,
    );
    const refreshed = await post(service, '/v1/permits/refresh', {
      domain: 'llm',
      entries: tenant('t1'),
      leaseId: a.body.leaseId,
    });
    expect(refreshed.body).toEqual({ matched: true, rule: 'tenant', refreshed: true });
    const release = { domain: 'llm', entries: tenant('t1'), leaseId: a.body.leaseId };
    expect((await post(service, '/v1/permits/release', release)).body).toEqual({
      matched: true,
      rule: 'tenant',
      released: true,
    });
    // Idempotent: a second release ends nothing.
    expect((await post(service, '/v1/permits/release', release)).body.released).toBe(false);
    expect((await post(service, '/v1/permits/acquire', { domain: 'llm', entries: tenant('t1') })).body.allowed).toBe(
      true,
    );
  });

  it('answers a cost above the limit as exceeds-capacity, and a descriptor without a concurrency rule as allowed', async () => {
    const big = await post(service, '/v1/permits/acquire', {
      domain: 'llm',
      entries: [{ key: 'model', value: 'big' }],
      cost: 2,
    });
    expect(big.body).toMatchObject({
      rule: 'model=big',
      allowed: false,
      reason: 'exceeds-capacity',
      retryAfterMs: null,
    });
    const none = await post(service, '/v1/permits/acquire', { domain: 'llm', entries: [{ key: 'path', value: '/' }] });
    expect(none.body).toEqual({ matched: false, rule: null, allowed: true });
  });

  it('counts acquired, refused by reason and released in /metrics, with the permits in flight', async () => {
    const labels = 'domain="llm",rule="model=big"';
    const acquiredBefore = await metric('floodgate_permits_acquired_total', labels);
    const a = await post(service, '/v1/permits/acquire', { domain: 'llm', entries: [{ key: 'model', value: 'big' }] });
    expect(a.body.allowed).toBe(true);
    await post(service, '/v1/permits/acquire', { domain: 'llm', entries: [{ key: 'model', value: 'big' }] });
    expect(await metric('floodgate_permits_acquired_total', labels)).toBe(acquiredBefore + 1);
    expect(await metric('floodgate_permits_refused_total', `${labels},reason="limit"`)).toBeGreaterThanOrEqual(1);
    expect(
      await metric('floodgate_permits_refused_total', `${labels},reason="exceeds-capacity"`),
    ).toBeGreaterThanOrEqual(1);
    expect(await metric('floodgate_permits_in_flight', labels)).toBe(1);
    await post(service, '/v1/permits/release', {
      domain: 'llm',
      entries: [{ key: 'model', value: 'big' }],
      leaseId: a.body.leaseId,
    });
    expect(await metric('floodgate_permits_in_flight', labels)).toBe(0);
    expect(await metric('floodgate_permits_released_total', labels)).toBeGreaterThanOrEqual(1);
    expect(await metric('floodgate_permit_hold_seconds_count', labels)).toBeGreaterThanOrEqual(1);
  });
});

describe('permits on the engine clock', () => {
  it('counts a lease that ran out unreleased as expired, apart from released, and frees its permit', async () => {
    const clock = manualClock();
    const own = await startService({
      config: PERMIT_CONFIG,
      store: 'memory',
      httpPort: 0,
      grpcPort: false,
      logger: 'silent',
      clock,
    });
    try {
      const entries = [{ key: 'model', value: 'big' }];
      const url = `http://127.0.0.1:${own.httpPort}`;
      const call = async (path: string, body: unknown) =>
        (await (await fetch(`${url}${path}`, { method: 'POST', body: JSON.stringify(body) })).json()) as Record<
          string,
          unknown
        >;
      const scrape = async () => (await (await fetch(`${url}/metrics`)).text()).split('\n');
      const value = (lines: string[], name: string) =>
        Number(
          lines
            .find((l) => l.startsWith(`${name}{domain="llm",rule="model=big"}`))
            ?.split(' ')
            .at(-1) ?? 0,
        );
      expect((await call('/v1/permits/acquire', { domain: 'llm', entries })).allowed).toBe(true);
      expect((await call('/v1/permits/acquire', { domain: 'llm', entries })).allowed).toBe(false);
      clock.advance(60_000);
      // The holder never released: its lease ran out on the store's (here the engine's) clock.
      const next = await call('/v1/permits/acquire', { domain: 'llm', entries });
      expect(next.allowed).toBe(true);
      const lines = await scrape();
      expect(value(lines, 'floodgate_permits_expired_total')).toBe(1);
      expect(value(lines, 'floodgate_permits_released_total')).toBe(0);
      expect(value(lines, 'floodgate_permits_in_flight')).toBe(1);
      await call('/v1/permits/release', { domain: 'llm', entries, leaseId: next.leaseId });
      const after = await scrape();
      expect(value(after, 'floodgate_permits_released_total')).toBe(1);
      expect(value(after, 'floodgate_permits_expired_total')).toBe(1);
      expect(value(after, 'floodgate_permits_in_flight')).toBe(0);
    } finally {
      await own.close();
    }
  });

  it('lists the permit calls in /openapi.json, every reference resolving', async () => {
    const text = (await get(service, '/openapi.json')).text;
    const doc = JSON.parse(text);
    for (const path of ['/v1/permits/acquire', '/v1/permits/refresh', '/v1/permits/release']) {
      expect(doc.paths[path].post.responses['200']).toBeDefined();
    }
    for (const [, name] of text.matchAll(/"#\/components\/schemas\/([A-Za-z]+)"/g)) {
      expect(doc.components.schemas[name as string]).toBeDefined();
    }
  });
});

describe('gRPC (Envoy): a concurrency descriptor taken on the request, released by the stream-done call', () => {
  const lease = (requestId: string, done = false) => ({
    entries: [
      { key: 'tenant', value: 'envoy-tenant' },
      { key: 'floodgate_lease', value: requestId },
      ...(done ? [{ key: 'floodgate_release', value: '1' }] : []),
    ],
  });

  it('holds a permit per request id until its stream-done call, refusing past the limit', async () => {
    const first = await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-1')] });
    expect(first.overall_code).toBe('OK');
    const second = await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-2')] });
    expect(second.overall_code).toBe('OK');
    const third = await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-3')] });
    expect(third.overall_code).toBe('OVER_LIMIT');
    const statuses = third.statuses as { current_limit: { requests_per_unit: number }; limit_remaining: number }[];
    expect(statuses[0]?.current_limit.requests_per_unit).toBe(2);
    expect(statuses[0]?.limit_remaining).toBe(0);
    // Envoy's stream-done call (apply_on_stream_done) of the first request frees its permit, whichever
    // replica it reaches: the lease id comes from the request id.
    const done = await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-1', true)] });
    expect(done.overall_code).toBe('OK');
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-4')] })).overall_code).toBe('OK');
    // The stream-done call of a refused request (Envoy sends it too) changes nothing.
    await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-3', true)] });
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-5')] })).overall_code).toBe(
      'OVER_LIMIT',
    );
    for (const id of ['req-2', 'req-4']) {
      await client.shouldRateLimit({ domain: 'llm', descriptors: [lease(id, true)] });
    }
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-6')] })).overall_code).toBe('OK');
    await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('req-6', true)] });
  });

  it('releases the permit of a request another descriptor puts over the limit (no permit held by a denied request)', async () => {
    const path = { entries: [{ key: 'path', value: '/envoy-over' }] };
    const admitted = await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('over-1'), path] });
    expect(admitted.overall_code).toBe('OK');
    // The path's rate is spent: the request is over, and its permit is given back at once.
    for (let i = 0; i < 3; i++) {
      const over = await client.shouldRateLimit({ domain: 'llm', descriptors: [lease(`over-x${i}`), path] });
      expect(over.overall_code).toBe('OVER_LIMIT');
    }
    // One permit is held (over-1): one more fits.
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [lease('over-2')] })).overall_code).toBe('OK');
    for (const id of ['over-1', 'over-2']) {
      await client.shouldRateLimit({ domain: 'llm', descriptors: [lease(id, true)] });
    }
  });
});
