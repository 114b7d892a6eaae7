// What a client may send over gRPC that Envoy's protos allow: answered per descriptor, never a refusal
// of the whole call (but above MAX_GRPC_DESCRIPTORS), never a store failure, and each odd descriptor
// leaves the others of its call decided as usual. Empty values and keys, descriptors without entries,
// 65 and 1024 descriptors, 17 and 1000 entries, values of 1,500 and 500,000 characters, hits_addend
// up to 2^64 − 1, limits in units Envoy does not define.
import { randomBytes } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../floodgate/test/stores/redis/servers.js';
import { MAX_GRPC_DESCRIPTORS } from '../src/engine.js';
import { type Service, startService } from '../src/service.js';
import { grpcClient, type RateLimitClient } from './helpers.js';

const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

const CONFIG = (prefix: string) => `prefix: ${prefix}
domains:
  - domain: own
    descriptors:
      - key: path
        policies: [{ algorithm: fixed-window, name: per-path, limit: 2, windowMs: 3600000 }]
      - key: user
        policies: [{ algorithm: gcra, limit: 3, periodMs: 3600000 }]
`;

const ENVOY = `domain: edge
descriptors:
  - key: path
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3 }
`;

type Entries = [string, string][];
const d = (entries: Entries, extra: Record<string, unknown> = {}) => ({
  entries: entries.map(([key, value]) => ({ key, value })),
  ...extra,
});

interface Status {
  code: string;
  current_limit: { requests_per_unit: number } | null;
  limit_remaining: number;
}

async function grpcError(promise: Promise<unknown>): Promise<{ code?: number; details?: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code?: number; details?: string };
  }
  throw new Error('the call succeeded');
}

describe.each([
  ['memory', 'memory', true],
  ['redis', 'redis://127.0.0.1:6379', runRedis],
])('gRPC inputs Envoy allows, on %s', (_name, store, available) => {
  let service: Service;
  let client: RateLimitClient;
  beforeAll(async () => {
    if (!available) return;
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = mkdtempSync(join(tmpdir(), 'floodgate-inputs-'));
    writeFileSync(join(dir, 'floodgate.yaml'), CONFIG(`inputs-${randomBytes(6).toString('hex')}`));
    writeFileSync(join(dir, 'edge.yaml'), ENVOY);
    service = await startService({
      configFile: dir,
      store,
      httpPort: false,
      grpcPort: 0,
      watch: false,
      logger: 'silent',
      drainTimeoutMs: 2000,
    });
    client = grpcClient(service.grpcPort);
  });
  afterAll(async () => {
    if (!available) return;
    client.close();
    await service.close();
  });
  const test = it.skipIf(!available);

  const statuses = async (domain: string, descriptors: unknown[], extra: Record<string, unknown> = {}) => {
    const response = await client.shouldRateLimit({ domain, descriptors, ...extra });
    return (response.statuses as Status[]).map((s) => [
      s.code,
      s.current_limit?.requests_per_unit ?? null,
      s.limit_remaining,
    ]);
  };

  for (const domain of ['own', 'edge']) {
    test(`${domain}: an empty value is a value, an empty key and no entries match nothing`, async () => {
      const user = `u-${randomBytes(4).toString('hex')}`;
      expect(await statuses(domain, [d([['path', '']]), d([['', 'x']]), d([]), d([['user', user]])])).toEqual([
        ['OK', 2, 1],
        ['OK', null, 0],
        ['OK', null, 0],
        ['OK', 3, 2],
      ]);
    });

    test(`${domain}: values of 1,500 and 500,000 characters are decided, each on its own counter`, async () => {
      const long = `/${'a'.repeat(1499)}`;
      const huge = 'b'.repeat(499_999);
      const first = await statuses(domain, [d([['path', long]]), d([['path', `${huge}1`]]), d([['path', `${huge}2`]])]);
      const second = await statuses(domain, [
        d([['path', long]]),
        d([['path', `${huge}1`]]),
        d([['path', `${huge}2`]]),
      ]);
      expect(first.map((s) => s[2])).toEqual([1, 1, 1]);
      expect(second.map((s) => s[2])).toEqual([0, 0, 0]);
      const third = await statuses(domain, [d([['path', `${huge}1`]])]);
      expect(third[0]?.[0]).toBe('OVER_LIMIT');
    });

    test(`${domain}: 65 and ${MAX_GRPC_DESCRIPTORS} descriptors are decided, one more is refused`, async () => {
      const run = randomBytes(4).toString('hex');
      const many = (n: number) => Array.from({ length: n }, (_, i) => d([['user', `${run}-${n}-${i}`]]));
      const sixtyFive = await statuses(domain, many(65));
      expect(sixtyFive).toHaveLength(65);
      expect(sixtyFive.every((s) => s[0] === 'OK' && s[2] === 2)).toBe(true);
      expect(await statuses(domain, many(MAX_GRPC_DESCRIPTORS))).toHaveLength(MAX_GRPC_DESCRIPTORS);
      const error = await grpcError(client.shouldRateLimit({ domain, descriptors: many(MAX_GRPC_DESCRIPTORS + 1) }));
      expect(error.code).toBe(status.INVALID_ARGUMENT);
      expect(error.details).toMatch(/at most 1024 descriptors per request, got 1025/);
    });

    test(`${domain}: 17 and 1000 entries match nothing deeper than the rules, and never fail the call`, async () => {
      const entries = (n: number): Entries => Array.from({ length: n }, (_, i) => [`k${i}`, `v${i}`]);
      const user = `u-${randomBytes(4).toString('hex')}`;
      expect(await statuses(domain, [d(entries(17)), d(entries(1000)), d([['user', user]])])).toEqual([
        ['OK', null, 0],
        ['OK', null, 0],
        ['OK', 3, 2],
      ]);
      // With a limit sent by Envoy, every entry makes the counter's key (held by its digest when long).
      const limited = { limit: { requests_per_unit: 1, unit: 'HOUR' } };
      expect(await statuses(domain, [d(entries(1000), limited)])).toEqual([['OK', 1, 0]]);
      expect((await statuses(domain, [d(entries(1000), limited)]))[0]?.[0]).toBe('OVER_LIMIT');
    });

    test(`${domain}: hits_addend up to 2^64 − 1 is over every limit, never an error`, async () => {
      const user = `u-${randomBytes(4).toString('hex')}`;
      const request = await statuses(domain, [d([['user', user]])], { hits_addend: 4_294_967_295 });
      expect(request[0]?.[0]).toBe('OVER_LIMIT');
      const other = `u-${randomBytes(4).toString('hex')}`;
      for (const value of ['18446744073709551615', 2 ** 53 + 2, 9_007_199_254_740_991]) {
        expect(
          (await statuses(domain, [d([['user', other]], { hits_addend: { value } }), d([['user', `${other}-b`]])]))[0],
        ).toEqual(['OVER_LIMIT', 3, domain === 'own' ? 3 : 0]);
      }
      // Envoy's reference counts such a hit: its window is over its limit until it ends. floodgate's own
      // policies count nothing for a cost they can never admit.
      expect((await statuses(domain, [d([['user', user]])]))[0]?.[0]).toBe(domain === 'edge' ? 'OVER_LIMIT' : 'OK');
    });

    test(`${domain}: a limit in a unit Envoy does not define is ignored, the config decides`, async () => {
      const user = `u-${randomBytes(4).toString('hex')}`;
      for (const unit of [0, 99, 7]) {
        const answer = await statuses(domain, [d([['user', user]], { limit: { requests_per_unit: 5, unit } })]);
        // 7 is RateLimitResponse's WEEK, read as the reference reads it.
        expect(answer[0]?.[1]).toBe(unit === 7 ? 5 : 3);
      }
    });
  }
});
