import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { manualClock } from 'floodgate/testing';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigPath } from '../src/config-files.js';
import { type Service, startService } from '../src/service.js';
import { grpcClient, type RateLimitClient } from './helpers.js';

// envoyproxy/ratelimit's own valid config files (test/envoy/reference/, copied from its master at
// f2fb157): every one loads as it is, `metadata` included (accepted and ignored, with a warning), and
// `quota_mode` answers as that release does.

const HERE = fileURLToPath(new URL('./envoy/reference', import.meta.url));
const FILES = readdirSync(HERE).filter((f) => f.endsWith('.yaml'));

describe("envoyproxy/ratelimit's own config files", () => {
  it('are 13', () => {
    expect(FILES).toHaveLength(13);
  });

  it.each(FILES)('%s loads as it is', (file) => {
    const { config } = loadConfigPath(join(HERE, file));
    expect(config.domains).toHaveLength(1);
    expect(config.domains[0]?.format).toBe('envoy');
  });

  it('reads `metadata` as present, and nothing of it', () => {
    const { config } = loadConfigPath(join(HERE, 'test-metadata.yaml'));
    const [key1, key2] = config.domains[0]?.descriptors ?? [];
    expect(key1?.descriptors[0]?.metadata).toBe(true);
    expect(key2?.metadata).toBe(true);
    expect(key2?.envoy).toMatchObject({ unit: 'minute', requestsPerUnit: 20 });
  });

  it('reads `quota_mode` on the rule', () => {
    const { config } = loadConfigPath(join(HERE, 'examples-example.yaml'));
    const quota = config.domains[0]?.descriptors.filter((d) => d.key === 'service') ?? [];
    expect(quota.map((d) => [d.value, d.envoy?.quotaMode])).toEqual([
      ['service_1', true],
      ['service_2', true],
    ]);
  });
});

describe('quota_mode over gRPC, as envoyproxy/ratelimit answers it', () => {
  let service: Service;
  let client: RateLimitClient;
  const warnings: string[] = [];

  beforeAll(async () => {
    service = await startService({
      configFile: join(HERE, 'examples-example.yaml'),
      httpPort: false,
      grpcPort: 0,
      watch: false,
      // A window of a minute must not end halfway through the test.
      clock: manualClock({ startMs: 0 }),
      logger: pino(
        { level: 'warn' },
        new Writable({
          write(chunk: Buffer, _encoding, done) {
            warnings.push(chunk.toString());
            done();
          },
        }),
      ),
    });
    client = grpcClient(service.grpcPort);
  });
  afterAll(async () => {
    client?.close();
    await service?.close();
  });

  const ask = async (...values: string[]) => {
    const response = await client.shouldRateLimit({
      domain: 'rl',
      descriptors: values.map((value) => ({ entries: [{ key: 'service', value }] })),
    });
    return [response.overall_code, (response.statuses as Array<{ code: string }>).map((s) => s.code)];
  };

  it('warns that `metadata` is ignored', () => {
    expect(warnings.some((w) => w.includes('`metadata`'))).toBe(true);
  });

  it('answers OK while some quota descriptor is under its limit, OVER_LIMIT when all are over', async () => {
    // service_1: 1 a minute, service_2: 2 a minute, both in quota mode.
    expect(await ask('service_1', 'service_2')).toEqual(['OK', ['OK', 'OK']]);
    expect(await ask('service_1', 'service_2')).toEqual(['OK', ['OVER_LIMIT', 'OK']]);
    expect(await ask('service_1', 'service_2')).toEqual(['OVER_LIMIT', ['OVER_LIMIT', 'OVER_LIMIT']]);
  });
});
