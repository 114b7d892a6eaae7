import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Service } from '../src/service.js';
import { descriptor, get, post, startTestService } from './helpers.js';

let service: Service;
beforeAll(async () => {
  service = await startTestService();
});
afterAll(async () => {
  await service?.close();
});

describe('HTTP API: decisions', () => {
  it('admits up to the limit, then answers OVER_LIMIT with the binding policy, headers and Retry-After', async () => {
    const body = { domain: 'api', descriptors: [descriptor(['remote_address', '198.51.100.1'])] };
    const codes: unknown[] = [];
    for (let i = 0; i < 4; i++) codes.push((await post(service, '/v1/decide', body)).body.code);
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    const denied = await post(service, '/v1/decide', body);
    expect(denied.status).toBe(200);
    expect(denied.body).toMatchObject({ code: 'OVER_LIMIT', allowed: false });
    const [d] = denied.body.descriptors as Record<string, unknown>[];
    expect(d).toMatchObject({
      code: 'OVER_LIMIT',
      matched: true,
      rule: 'remote_address',
      allowed: false,
      limit: 3,
      remaining: 0,
      policy: 'per-ip',
      reason: 'limit',
    });
    expect(d?.retryAfterMs).toBeGreaterThan(0);
    const headers = denied.body.headers as Record<string, string>;
    expect(headers['RateLimit-Policy']).toBe('"per-ip";q=3;w=3600');
    expect(headers.RateLimit).toMatch(/^"per-ip";r=0;t=\d+$/);
    expect(Number(headers['Retry-After'])).toBeGreaterThanOrEqual(1);
  });

  it('check and status change nothing; reset forgets', async () => {
    const body = { domain: 'api', descriptors: [descriptor(['remote_address', '198.51.100.2'])] };
    for (let i = 0; i < 5; i++) {
      expect((await post(service, '/v1/check', body)).body.code).toBe('OK');
    }
    const status = await post(service, '/v1/status', body);
    expect((status.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ remaining: 3, allowed: true });
    for (let i = 0; i < 3; i++) await post(service, '/v1/decide', body);
    expect((await post(service, '/v1/check', body)).body.code).toBe('OVER_LIMIT');
    const reset = await post(service, '/v1/reset', body);
    expect(reset.body).toEqual({ descriptors: [{ matched: true, rule: 'remote_address' }] });
    expect((await post(service, '/v1/decide', body)).body.code).toBe('OK');
  });

  it('decides each descriptor on its own, with nested rules, costs and shared wildcards', async () => {
    const ip = descriptor(['remote_address', '198.51.100.3']);
    const login = descriptor(['path', '/login'], ['remote_address', '198.51.100.3']);
    const first = await post(service, '/v1/decide', { domain: 'api', descriptors: [ip, login] });
    expect((first.body.descriptors as { rule: string; remaining: number }[]).map((d) => [d.rule, d.remaining])).toEqual(
      [
        ['remote_address', 2],
        ['path=/login > remote_address', 1],
      ],
    );
    const heavy = await post(service, '/v1/decide', {
      domain: 'api',
      cost: 2,
      descriptors: [ip, { ...login, cost: 0 }],
    });
    expect((heavy.body.descriptors as { remaining: number }[]).map((d) => d.remaining)).toEqual([0, 1]);
    // Every /search… path shares one counter.
    const a = await post(service, '/v1/decide', { domain: 'api', descriptors: [descriptor(['path', '/search?q=a'])] });
    const b = await post(service, '/v1/decide', { domain: 'api', descriptors: [descriptor(['path', '/search/b'])] });
    const c = await post(service, '/v1/decide', { domain: 'api', descriptors: [descriptor(['path', '/search'])] });
    expect([a, b, c].map((r) => r.body.code)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
  });

  it('answers OK in shadow mode and for unlimited or unmatched descriptors, without headers', async () => {
    const body = { domain: 'api', descriptors: [descriptor(['plan', 'shadowed'])] };
    await post(service, '/v1/decide', body);
    const shadowed = await post(service, '/v1/decide', body);
    expect(shadowed.body).toMatchObject({ code: 'OK', allowed: true, headers: {} });
    expect((shadowed.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({
      code: 'OK',
      shadow: true,
      allowed: false,
    });
    const open = await post(service, '/v1/decide', {
      domain: 'api',
      descriptors: [descriptor(['api_key', 'trusted']), descriptor(['nothing', 'here'])],
    });
    expect(open.body.descriptors).toEqual([
      { code: 'OK', matched: true, rule: 'api_key=trusted', shadow: false, unlimited: true, allowed: true },
      { code: 'OK', matched: false, rule: null, shadow: false, unlimited: false, allowed: true },
    ]);
  });

  it('applies a limit sent with the descriptor', async () => {
    const body = {
      domain: 'api',
      descriptors: [{ ...descriptor(['tenant', 't-1']), limit: { requestsPerUnit: 1, unit: 'hour' } }],
    };
    expect((await post(service, '/v1/decide', body)).body.code).toBe('OK');
    const second = await post(service, '/v1/decide', body);
    expect(second.body.code).toBe('OVER_LIMIT');
    expect((second.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ policy: 'override-1-per-hour' });
  });
});

describe('HTTP API: bad requests get a clear problem, and the service keeps serving', () => {
  const cases: [string, unknown, number, RegExp, string | undefined][] = [
    ['invalid JSON', '{"domain": ', 400, /not valid JSON/, undefined],
    ['a JSON array', '[]', 400, /must be a JSON object/, undefined],
    ['a missing domain', { descriptors: [descriptor(['a', 'b'])] }, 400, /domain is required/, 'domain'],
    ['an empty domain', { domain: '', descriptors: [descriptor(['a', 'b'])] }, 400, /domain is required/, 'domain'],
    ['a numeric domain', { domain: 7, descriptors: [] }, 400, /domain is required/, 'domain'],
    [
      'an unknown domain',
      { domain: 'nope', descriptors: [descriptor(['a', 'b'])] },
      404,
      /unknown domain "nope"/,
      'domain',
    ],
    ['no descriptors', { domain: 'api', descriptors: [] }, 400, /non-empty list/, 'descriptors'],
    ['descriptors as an object', { domain: 'api', descriptors: {} }, 400, /descriptors is required/, 'descriptors'],
    [
      'an entry without value',
      { domain: 'api', descriptors: [{ entries: [{ key: 'a' }] }] },
      400,
      /value must be a string/,
      'descriptors[0].entries[0].value',
    ],
    [
      'a numeric value',
      { domain: 'api', descriptors: [{ entries: [{ key: 'a', value: 5 }] }] },
      400,
      /must be a string/,
      'descriptors[0].entries[0].value',
    ],
    [
      'empty entries',
      { domain: 'api', descriptors: [{ entries: [] }] },
      400,
      /non-empty list/,
      'descriptors[0].entries',
    ],
    [
      'a huge value',
      { domain: 'api', descriptors: [descriptor(['a', 'x'.repeat(5000)])] },
      400,
      /1 to 1024 characters, got 5000/,
      'descriptors[0].entries[0].value',
    ],
    [
      'too many entries',
      {
        domain: 'api',
        descriptors: [descriptor(...Array.from({ length: 17 }, (_, i): [string, string] => [`k${i}`, 'v']))],
      },
      400,
      /at most 16/,
      'descriptors[0].entries',
    ],
    [
      'too many descriptors',
      { domain: 'api', descriptors: Array.from({ length: 65 }, () => descriptor(['a', 'b'])) },
      400,
      /at most 64 descriptors/,
      'descriptors',
    ],
    [
      'a negative cost',
      { domain: 'api', cost: -1, descriptors: [descriptor(['a', 'b'])] },
      400,
      /cost must be 0 or a finite number from 1e-9 to 9007199254740991, got -1/,
      'cost',
    ],
    [
      'a string cost',
      { domain: 'api', cost: '1', descriptors: [descriptor(['a', 'b'])] },
      400,
      /cost must be a number/,
      'cost',
    ],
    ['an unknown field', { domain: 'api', descriptor: [] }, 400, /unknown field descriptor/, 'descriptor'],
    [
      'a bad override unit',
      { domain: 'api', descriptors: [{ ...descriptor(['a', 'b']), limit: { requestsPerUnit: 1, unit: 'fortnight' } }] },
      400,
      /unit must be one of/,
      'descriptors[0].limit.unit',
    ],
  ];
  for (const [name, body, status, detail, field] of cases) {
    it(`refuses ${name}`, async () => {
      const response = await post(service, '/v1/decide', body);
      expect(response.status).toBe(status);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.body.detail).toMatch(detail);
      expect(response.body.field).toBe(field);
    });
  }

  it('refuses a body over 1 MiB with 413', async () => {
    const response = await post(service, '/v1/decide', JSON.stringify({ domain: 'x'.repeat(1_100_000) }));
    expect(response.status).toBe(413);
  });

  it('refuses a wrong method and an unknown path', async () => {
    expect((await get(service, '/v1/decide')).status).toBe(405);
    expect((await get(service, '/v2/nothing')).status).toBe(404);
  });

  it('still serves after all of the above', async () => {
    const response = await post(service, '/v1/decide', {
      domain: 'api',
      descriptors: [descriptor(['remote_address', '198.51.100.99'])],
    });
    expect(response.status).toBe(200);
    expect(response.body.code).toBe('OK');
  });
});

describe('HTTP API: operations', () => {
  it('serves health, readiness, the OpenAPI document and the config in use', async () => {
    expect(await get(service, '/healthz')).toEqual({ status: 200, text: '{"status":"ok"}' });
    expect(JSON.parse((await get(service, '/readyz')).text)).toEqual({ ready: true, store: 'memory' });
    const openapi = JSON.parse((await get(service, '/openapi.json')).text);
    expect(openapi.openapi).toBe('3.1.0');
    expect(Object.keys(openapi.paths)).toEqual(
      expect.arrayContaining(['/v1/decide', '/v1/check', '/v1/status', '/v1/reset', '/healthz', '/readyz', '/metrics']),
    );
    const config = JSON.parse((await get(service, '/v1/config')).text);
    expect(config.domains[0].rules.map((r: { rule: string }) => r.rule)).toContain('path=/login > remote_address');
  });

  it('exposes Prometheus metrics labeled by config names only, never by a key', async () => {
    await post(service, '/v1/decide', { domain: 'api', descriptors: [descriptor(['remote_address', '203.0.113.77'])] });
    const { status, text } = await get(service, '/metrics');
    expect(status).toBe(200);
    expect(text).toMatch(
      /floodgate_decisions_total\{domain="api",rule="remote_address",policy="per-ip",outcome="allowed"\} \d+/,
    );
    expect(text).toMatch(
      /floodgate_decisions_total\{domain="api",rule="remote_address",policy="per-ip",outcome="denied"\} \d+/,
    );
    expect(text).toMatch(
      /floodgate_decisions_total\{domain="api",rule="plan=shadowed",policy="shadowed",outcome="shadow_denied"\} 1/,
    );
    expect(text).toMatch(/floodgate_request_duration_seconds_count\{api="http",method="decide"\} \d+/);
    expect(text).toMatch(/floodgate_request_errors_total\{api="http",method="decide",code="400"\} \d+/);
    expect(text).toContain('floodgate_memory_store_keys');
    expect(text).not.toContain('203.0.113.77');
    expect(text).not.toContain('"nope"');
  });

  it('serves live decision rates per policy', async () => {
    const stats = JSON.parse((await get(service, '/v1/stats')).text);
    expect(stats.store).toBe('memory');
    const perIp = stats.policies.find((p: { policy: string }) => p.policy === 'per-ip');
    expect(perIp).toMatchObject({ domain: 'api', rule: 'remote_address' });
    expect(perIp.allowedTotal).toBeGreaterThan(0);
    expect(typeof perIp.allowedPerSecond).toBe('number');
  });
});
