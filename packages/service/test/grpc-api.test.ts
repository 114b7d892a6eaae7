import { type ServiceError, status } from '@grpc/grpc-js';
import type { Store } from 'floodgate';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Service } from '../src/service.js';
import { grpcClient, type RateLimitClient, startTestService, TEST_CONFIG } from './helpers.js';

let service: Service;
let client: RateLimitClient;
beforeAll(async () => {
  service = await startTestService();
  client = grpcClient(service.grpcPort);
});
afterAll(async () => {
  client?.close();
  await service?.close();
});

function entries(...pairs: [string, string][]) {
  return { entries: pairs.map(([key, value]) => ({ key, value })) };
}

async function grpcError(promise: Promise<unknown>): Promise<ServiceError> {
  try {
    await promise;
  } catch (error) {
    return error as ServiceError;
  }
  throw new Error('expected the call to fail');
}

describe('gRPC: envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', () => {
  it('answers OK until the limit, then OVER_LIMIT, with per-descriptor statuses and IETF headers', async () => {
    const request = { domain: 'api', descriptors: [entries(['remote_address', '192.0.2.1'])] };
    const codes: unknown[] = [];
    for (let i = 0; i < 3; i++) codes.push((await client.shouldRateLimit(request)).overall_code);
    expect(codes).toEqual(['OK', 'OK', 'OK']);
    const denied = await client.shouldRateLimit(request);
    expect(denied.overall_code).toBe('OVER_LIMIT');
    const [s] = denied.statuses as Record<string, unknown>[];
    expect(s).toMatchObject({
      code: 'OVER_LIMIT',
      current_limit: { name: 'per-ip', requests_per_unit: 3, unit: 'HOUR' },
      limit_remaining: 0,
    });
    expect((s?.duration_until_reset as { seconds: number } | undefined)?.seconds).toBeGreaterThan(0);
    const headers = Object.fromEntries(
      (denied.response_headers_to_add as { key: string; value: string }[]).map((h) => [h.key, h.value]),
    );
    expect(headers['RateLimit-Policy']).toBe('"per-ip";q=3;w=3600');
    expect(headers.RateLimit).toMatch(/^"per-ip";r=0;t=\d+$/);
    expect(Number(headers['Retry-After'])).toBeGreaterThan(0);
  });

  it('decides every descriptor, in order, one status each', async () => {
    const response = await client.shouldRateLimit({
      domain: 'api',
      descriptors: [
        entries(['remote_address', '192.0.2.2']),
        entries(['api_key', 'trusted']),
        entries(['unknown', 'x']),
        entries(['path', '/login'], ['remote_address', '192.0.2.2']),
      ],
    });
    expect(response.overall_code).toBe('OK');
    expect(
      (response.statuses as { code: string; limit_remaining: number }[]).map((s) => [s.code, s.limit_remaining]),
    ).toEqual([
      ['OK', 2],
      // Unlimited: the largest uint32, as envoyproxy/ratelimit answers it.
      ['OK', 4294967295],
      ['OK', 0],
      ['OK', 1],
    ]);
    expect((response.statuses as { current_limit: unknown }[]).map((s) => s.current_limit === null)).toEqual([
      false,
      true,
      true,
      false,
    ]);
  });

  it('counts hits_addend, and a descriptor hits_addend wins over the request one', async () => {
    const key = entries(['api_key', 'k-hits']);
    const first = await client.shouldRateLimit({ domain: 'api', hits_addend: 2, descriptors: [key] });
    expect((first.statuses as { limit_remaining: number }[])[0]?.limit_remaining).toBe(0);
    const checked = await client.shouldRateLimit({
      domain: 'api',
      hits_addend: 5,
      descriptors: [{ ...key, hits_addend: { value: 0 } }],
    });
    expect(checked.overall_code).toBe('OK');
    const over = await client.shouldRateLimit({ domain: 'api', descriptors: [key] });
    expect(over.overall_code).toBe('OVER_LIMIT');
  });

  it('answers a cost above capacity OVER_LIMIT without Retry-After (waiting never helps)', async () => {
    const response = await client.shouldRateLimit({
      domain: 'api',
      hits_addend: 10,
      descriptors: [entries(['api_key', 'k-huge'])],
    });
    expect(response.overall_code).toBe('OVER_LIMIT');
    const keys = (response.response_headers_to_add as { key: string }[]).map((h) => h.key);
    expect(keys).toEqual(['RateLimit-Policy', 'RateLimit']);
  });

  it('applies a limit override sent by Envoy', async () => {
    const request = {
      domain: 'api',
      descriptors: [{ ...entries(['tenant', 'g-1']), limit: { requests_per_unit: 2, unit: 'MINUTE' } }],
    };
    await client.shouldRateLimit(request);
    await client.shouldRateLimit(request);
    const over = await client.shouldRateLimit(request);
    expect(over.overall_code).toBe('OVER_LIMIT');
    // A limit sent with the request has no configured name: none is reported.
    expect((over.statuses as { current_limit: unknown }[])[0]?.current_limit).toEqual({
      name: '',
      requests_per_unit: 2,
      unit: 'MINUTE',
    });
  });

  it('reports current_limit as the sustained rate in the smallest unit it is whole in', async () => {
    const config = `
domains:
  - domain: api
    descriptors:
      - key: user
        policies: [{ algorithm: fixed-window, name: five-per-30s, limit: 5, windowMs: 30000 }]
      - key: ip
        policies: [{ algorithm: gcra, name: burst, limit: 100, periodMs: 60000, burst: 10 }]
      - key: tenant
        policies: [{ algorithm: token-bucket, name: bucket, capacity: 50, refillAmount: 3, refillIntervalMs: 500 }]
      - key: queue
        policies: [{ algorithm: leaky-bucket, name: leak, capacity: 20, leakPerSecond: 0.5 }]
      - key: odd
        policies: [{ algorithm: gcra, name: odd, limit: 3, periodMs: 7000 }]
`;
    const other = await startTestService(config);
    const otherClient = grpcClient(other.grpcPort);
    try {
      const response = await otherClient.shouldRateLimit({
        domain: 'api',
        descriptors: [
          entries(['user', 'u']),
          entries(['ip', '192.0.2.1']),
          entries(['tenant', 't']),
          entries(['queue', 'q']),
          entries(['odd', 'o']),
        ],
      });
      expect((response.statuses as { current_limit: unknown }[]).map((s) => s.current_limit)).toEqual([
        { name: 'five-per-30s', requests_per_unit: 10, unit: 'MINUTE' },
        { name: 'burst', requests_per_unit: 100, unit: 'MINUTE' },
        { name: 'bucket', requests_per_unit: 6, unit: 'SECOND' },
        { name: 'leak', requests_per_unit: 30, unit: 'MINUTE' },
        // 3 per 7 s is exactly 259,200 per week (WEEK is 7 in rls.proto).
        { name: 'odd', requests_per_unit: 259200, unit: 'WEEK' },
      ]);
    } finally {
      otherClient.close();
      await other.close();
    }
  });

  it('reports current_limit.name only when the config gives one', async () => {
    const config = `
domains:
  - domain: api
    descriptors:
      - key: named
        policies: [{ algorithm: gcra, name: per-tenant, limit: 10, periodMs: 1000 }]
      - key: derived
        policies: [{ algorithm: gcra, limit: 10, periodMs: 1000 }]
      - key: envoy-style
        rate_limit: { unit: second, requests_per_unit: 10 }
`;
    const other = await startTestService(config);
    const otherClient = grpcClient(other.grpcPort);
    try {
      const response = await otherClient.shouldRateLimit({
        domain: 'api',
        descriptors: [entries(['named', 'a']), entries(['derived', 'a']), entries(['envoy-style', 'a'])],
      });
      expect((response.statuses as { current_limit: { name: string } }[]).map((s) => s.current_limit.name)).toEqual([
        'per-tenant',
        '',
        '',
      ]);
    } finally {
      otherClient.close();
      await other.close();
    }
  });

  it('answers OK for a domain it does not know, as Envoy expects', async () => {
    const response = await client.shouldRateLimit({ domain: 'elsewhere', descriptors: [entries(['a', 'b'])] });
    expect(response.overall_code).toBe('OK');
  });

  it('answers shadow-mode denials OK', async () => {
    const request = { domain: 'api', descriptors: [entries(['plan', 'shadowed'])] };
    await client.shouldRateLimit(request);
    const second = await client.shouldRateLimit(request);
    expect(second.overall_code).toBe('OK');
    expect(second.response_headers_to_add).toEqual([]);
  });

  // What Envoy's protocol allows is answered per descriptor (test/grpc-envoy-inputs.test.ts); only a
  // request without a domain or descriptors, or with more descriptors than any Envoy sends, is refused.
  const invalid: [string, unknown, RegExp][] = [
    ['no domain', { descriptors: [entries(['a', 'b'])] }, /domain is required/],
    ['no descriptors', { domain: 'api' }, /descriptors is required/],
    [
      'too many descriptors',
      { domain: 'api', descriptors: Array.from({ length: 1025 }, () => entries(['a', 'b'])) },
      /at most 1024/,
    ],
  ];
  for (const [name, request, message] of invalid) {
    it(`answers INVALID_ARGUMENT for ${name}`, async () => {
      const error = await grpcError(client.shouldRateLimit(request));
      expect(error.code).toBe(status.INVALID_ARGUMENT);
      expect(error.details).toMatch(message);
    });
  }

  it('answers RESOURCE_EXHAUSTED for a message over 1 MiB, and keeps serving', async () => {
    const error = await grpcError(
      client.shouldRateLimit({ domain: 'api', descriptors: [entries(['a', 'x'.repeat(1_100_000)])] }),
    );
    expect(error.code).toBe(status.RESOURCE_EXHAUSTED);
    const ok = await client.shouldRateLimit({
      domain: 'api',
      descriptors: [entries(['remote_address', '192.0.2.50'])],
    });
    expect(ok.overall_code).toBe('OK');
  });

  it('serves the gRPC health check', async () => {
    expect(await client.check()).toEqual({ status: 'SERVING' });
    expect(await client.check('envoy.service.ratelimit.v3.RateLimitService')).toEqual({ status: 'SERVING' });
    expect((await grpcError(client.check('other.Service'))).code).toBe(status.NOT_FOUND);
  });
});

describe('gRPC: a store that fails', () => {
  // A store whose every call fails as an unreachable server does: the service must answer UNAVAILABLE
  // (never UNKNOWN), count it, and report itself not ready.
  const unreachable: Store = {
    name: 'unreachable',
    hasOwnClock: false,
    decide: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:1')),
    reset: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:1')),
  };

  it('answers UNAVAILABLE, counts the failure and turns not ready', async () => {
    const broken = await startTestService(undefined, { store: unreachable });
    const brokenClient = grpcClient(broken.grpcPort);
    try {
      const error = await grpcError(
        brokenClient.shouldRateLimit({ domain: 'api', descriptors: [entries(['remote_address', '192.0.2.9'])] }),
      );
      expect(error.code).toBe(status.UNAVAILABLE);
      expect(error.details).toBe(
        'the unreachable store is unavailable (it does not answer, or fails): decisions resume when it answers',
      );
      expect(await brokenClient.check()).toEqual({ status: 'NOT_SERVING' });
      const metrics = await (await fetch(`http://127.0.0.1:${broken.httpPort}/metrics`)).text();
      expect(metrics).toMatch(/floodgate_store_errors_total\{store="unreachable"\} 1/);
      expect(metrics).toMatch(
        /floodgate_request_errors_total\{api="grpc",method="ShouldRateLimit",code="UNAVAILABLE"\} 1/,
      );
      const ready = await fetch(`http://127.0.0.1:${broken.httpPort}/readyz`);
      expect(ready.status).toBe(503);
      const http = await fetch(`http://127.0.0.1:${broken.httpPort}/v1/decide`, {
        method: 'POST',
        body: JSON.stringify({ domain: 'api', descriptors: [entries(['remote_address', '192.0.2.9'])] }),
      });
      expect(http.status).toBe(503);
    } finally {
      brokenClient.close();
      await broken.close();
    }
  });
});

describe('gRPC: header formats', () => {
  it('sends the legacy X-RateLimit headers when asked, and none with `none`', async () => {
    const { startService } = await import('../src/service.js');
    for (const [format, expected] of [
      ['legacy', ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']],
      ['none', []],
    ] as const) {
      const other = await startService({
        config: TEST_CONFIG,
        httpPort: false,
        grpcPort: 0,
        logger: 'silent',
        headers: format,
      });
      const otherClient = grpcClient(other.grpcPort);
      try {
        const request = { domain: 'api', descriptors: [entries(['remote_address', '192.0.2.70'])] };
        const response = await otherClient.shouldRateLimit(request);
        expect((response.response_headers_to_add as { key: string }[]).map((h) => h.key)).toEqual(expected);
        // Over the limit: Retry-After too, but `none` sends nothing at all.
        await otherClient.shouldRateLimit(request);
        await otherClient.shouldRateLimit(request);
        const over = await otherClient.shouldRateLimit(request);
        expect(over.overall_code).toBe('OVER_LIMIT');
        expect((over.response_headers_to_add as { key: string }[]).map((h) => h.key)).toEqual(
          format === 'none' ? [] : [...expected, 'Retry-After'],
        );
      } finally {
        otherClient.close();
        await other.close();
      }
    }
  });

  it('lists every policy of several descriptors in the IETF headers, the binding descriptor first', async () => {
    const response = await client.shouldRateLimit({
      domain: 'api',
      descriptors: [
        entries(['remote_address', '192.0.2.71']),
        entries(['path', '/login'], ['remote_address', '192.0.2.71']),
      ],
    });
    const headers = Object.fromEntries(
      (response.response_headers_to_add as { key: string; value: string }[]).map((h) => [h.key, h.value]),
    );
    expect(headers['RateLimit-Policy']).toBe('"login";q=2;w=3600, "per-ip";q=3;w=3600');
    expect(headers.RateLimit).toMatch(/^"login";r=1;t=\d+, "per-ip";r=2;t=\d+$/);
  });
});
