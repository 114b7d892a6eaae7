import { afterEach, describe, expect, it, vi } from 'vitest';
import { type Service, startService } from '../src/service.js';
import { grpcClient, TEST_CONFIG } from './helpers.js';

// A fault in encoding an answer (a bug, say) must fail that call alone: Envoy multiplexes all its calls on
// a few connections, so ending the connection would fail every call on it.

const fault = vi.hoisted(() => ({ on: false }));
vi.mock('../src/grpc/rate-limit.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../src/grpc/rate-limit.js')>();
  return {
    ...original,
    encodeRateLimitResponse: (...args: Parameters<typeof original.encodeRateLimitResponse>) => {
      if (fault.on) throw new Error('encoding fault');
      return original.encodeRateLimitResponse(...args);
    },
  };
});

let service: Service | undefined;
afterEach(async () => {
  fault.on = false;
  await service?.close();
  service = undefined;
});

describe('gRPC: a fault in answering ShouldRateLimit', () => {
  it('answers that call INTERNAL on the memory store (synchronous), and the connection goes on', async () => {
    service = await startService({
      config: TEST_CONFIG,
      store: 'memory',
      httpPort: 0,
      grpcPort: 0,
      logger: 'silent',
      drainTimeoutMs: 2000,
    });
    const client = grpcClient(service.grpcPort);
    try {
      const request = { domain: 'api', descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.77' }] }] };
      expect((await client.shouldRateLimit(request)).overall_code).toBe('OK');
      fault.on = true;
      const error = await client.shouldRateLimit(request).then(
        () => undefined,
        (e: { code: number; details: string }) => e,
      );
      expect(error).toMatchObject({ code: 13, details: 'internal error' });
      fault.on = false;
      expect((await client.shouldRateLimit(request)).overall_code).toBe('OK');
    } finally {
      client.close();
    }
  });
});
