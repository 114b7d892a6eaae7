import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../floodgate/test/stores/redis/servers.js';
import type { Service } from '../src/service.js';
import { grpcClient, post, type RateLimitClient, startTestService } from './helpers.js';

// Two service instances on one Redis: the permits of a concurrency rule are shared by the fleet, and an
// Envoy stream-done call that reaches the other instance releases the lease the first one granted.

const REDIS_URL = 'redis://127.0.0.1:6379';
const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

describe.skipIf(!runRedis)('permits across two service instances on Redis', () => {
  // A prefix of its own per run: the leases of an earlier run never count here.
  const prefix = `permits-fleet-${randomUUID().slice(0, 8)}`;
  const config = `
prefix: ${prefix}
domains:
  - domain: llm
    descriptors:
      - key: tenant
        concurrency: { limit: 3, leaseMs: 60000 }
`;
  const services: Service[] = [];
  const clients: RateLimitClient[] = [];
  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const service = await startTestService(config, { store: REDIS_URL });
      services.push(service);
      clients.push(grpcClient(service.grpcPort));
    }
  });
  afterAll(async () => {
    for (const c of clients) c.close();
    await Promise.all(services.map((s) => s.close()));
  });

  it('holds at most the limit in flight over both instances, and releases on either', async () => {
    const entries = [{ key: 'tenant', value: 'shared' }];
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        post(services[i % 2] as Service, '/v1/permits/acquire', { domain: 'llm', entries }),
      ),
    );
    const granted = answers.filter((a) => a.body.allowed === true);
    expect(granted).toHaveLength(3);
    // Fences strictly increase over the fleet.
    const fences = granted.map((a) => a.body.fence as number);
    expect(new Set(fences).size).toBe(3);
    // Released through the other instance than the one that granted it (any: the leases are in Redis).
    for (const a of granted) {
      const released = await post(services[1] as Service, '/v1/permits/release', {
        domain: 'llm',
        entries,
        leaseId: a.body.leaseId,
      });
      expect(released.body.released).toBe(true);
    }
    const again = await post(services[0] as Service, '/v1/permits/acquire', { domain: 'llm', entries });
    expect(again.body).toMatchObject({ allowed: true, inFlight: 1 });
    await post(services[0] as Service, '/v1/permits/release', { domain: 'llm', entries, leaseId: again.body.leaseId });
  });

  it("an Envoy stream-done call that reaches the other instance releases the request's permit", async () => {
    const lease = (id: string, done = false) => ({
      entries: [
        { key: 'tenant', value: 'envoy' },
        { key: 'floodgate_lease', value: id },
        ...(done ? [{ key: 'floodgate_release', value: '1' }] : []),
      ],
    });
    const [a, b] = clients as [RateLimitClient, RateLimitClient];
    for (const id of ['r1', 'r2', 'r3']) {
      expect((await a.shouldRateLimit({ domain: 'llm', descriptors: [lease(id)] })).overall_code).toBe('OK');
    }
    expect((await b.shouldRateLimit({ domain: 'llm', descriptors: [lease('r4')] })).overall_code).toBe('OVER_LIMIT');
    // r1's stream is done; Envoy's call lands on the other instance.
    await b.shouldRateLimit({ domain: 'llm', descriptors: [lease('r1', true)] });
    expect((await a.shouldRateLimit({ domain: 'llm', descriptors: [lease('r5')] })).overall_code).toBe('OK');
    for (const id of ['r2', 'r3', 'r5']) await b.shouldRateLimit({ domain: 'llm', descriptors: [lease(id, true)] });
    const after = await post(services[0] as Service, '/v1/permits/acquire', {
      domain: 'llm',
      entries: [{ key: 'tenant', value: 'envoy' }],
    });
    expect(after.body).toMatchObject({ allowed: true, inFlight: 1 });
    await post(services[0] as Service, '/v1/permits/release', {
      domain: 'llm',
      entries: [{ key: 'tenant', value: 'envoy' }],
      leaseId: after.body.leaseId,
    });
  });
});
