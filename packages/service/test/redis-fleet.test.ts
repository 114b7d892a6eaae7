import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../floodgate/test/stores/redis/servers.js';
import type { Service } from '../src/service.js';
import { descriptor, grpcClient, post, startTestService } from './helpers.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

const prefix = `fleet-${randomBytes(6).toString('hex')}`;
const config = `prefix: ${prefix}
domains:
  - domain: api
    descriptors:
      - key: tenant
        policies:
          - { algorithm: fixed-window, name: per-tenant, limit: 50, windowMs: 3600000 }
          - { algorithm: gcra, name: per-tenant-rate, limit: 100, periodMs: 3600000 }
`;

describe.skipIf(!runRedis)('two service instances on one Redis', () => {
  let a: Service;
  let b: Service;
  beforeAll(async () => {
    a = await startTestService(config, { store: REDIS_URL });
    b = await startTestService(config, { store: REDIS_URL });
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  it('enforce one limit exactly under concurrent gRPC and HTTP calls', async () => {
    const clientA = grpcClient(a.grpcPort);
    const clientB = grpcClient(b.grpcPort);
    try {
      const request = { domain: 'api', descriptors: [descriptor(['tenant', 'shared-tenant'])] };
      const calls: Promise<string>[] = [];
      for (let i = 0; i < 60; i++) {
        calls.push(clientA.shouldRateLimit(request).then((r) => String(r.overall_code)));
        calls.push(clientB.shouldRateLimit(request).then((r) => String(r.overall_code)));
        const http = i % 2 === 0 ? a : b;
        calls.push(post(http, '/v1/decide', request).then((r) => String(r.body.code)));
      }
      const codes = await Promise.all(calls);
      expect(codes.filter((c) => c === 'OK')).toHaveLength(50);
      expect(codes.filter((c) => c === 'OVER_LIMIT')).toHaveLength(130);
      // Both instances see the same state.
      for (const instance of [a, b]) {
        const check = await post(instance, '/v1/check', request);
        expect(check.body.code).toBe('OVER_LIMIT');
        expect((check.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({
          remaining: 0,
          policy: 'per-tenant',
        });
      }
    } finally {
      clientA.close();
      clientB.close();
    }
  });
});
