import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { memoryStore, type Store } from 'floodgate';
import { afterAll, describe, expect, it } from 'vitest';
import { descriptor, get, grpcClient, post, startTestService, waitFor } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'floodgate-reload-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function configWith(limit: number, name = 'per-ip'): string {
  return `domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - { algorithm: fixed-window, name: ${name}, limit: ${limit}, windowMs: 3600000 }
`;
}

/** Writes the file the way editors and Kubernetes do: a new file renamed over the old one. */
function replaceFile(file: string, text: string): void {
  const temp = `${file}.tmp-${Math.random().toString(36).slice(2)}`;
  writeFileSync(temp, text);
  renameSync(temp, file);
}

const ip = { domain: 'api', descriptors: [descriptor(['remote_address', '192.0.2.10'])] };

describe('config reload', () => {
  it('reloads on file change without losing counters, and rejects a bad config while the old one serves', async () => {
    const file = join(dir, 'watched.yaml');
    writeFileSync(file, configWith(3));
    const service = await startTestService(undefined, { configFile: file });
    try {
      await post(service, '/v1/decide', ip);
      await post(service, '/v1/decide', ip);
      const sha = JSON.parse((await get(service, '/v1/config')).text).sha256;

      replaceFile(file, configWith(5));
      await waitFor(async () => JSON.parse((await get(service, '/v1/config')).text).sha256 !== sha);
      // Same policy name: the two calls made before the reload still count against the new limit.
      const after = await post(service, '/v1/decide', ip);
      expect((after.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ limit: 5, remaining: 2 });

      replaceFile(file, `${configWith(5)}      - key: broken\n        policies: [{ algorithm: gcra }]\n`);
      await waitFor(async () =>
        /floodgate_config_reloads_total\{result="failure"\} 1/.test((await get(service, '/metrics')).text),
      );
      const still = await post(service, '/v1/decide', ip);
      expect((still.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ limit: 5, remaining: 1 });
    } finally {
      await service.close();
    }
  });

  it('reload() reports the issues of a rejected config with their lines', async () => {
    const file = join(dir, 'manual.yaml');
    writeFileSync(file, configWith(3));
    const service = await startTestService(undefined, { configFile: file });
    try {
      writeFileSync(file, configWith(0));
      const result = service.reload();
      expect(result.ok).toBe(false);
      expect(result.error?.issues[0]).toMatchObject({
        path: 'domains[0].descriptors[0].policies[0].limit',
        line: 6,
      });
      expect(service.reload()).toMatchObject({ ok: false });
      writeFileSync(file, configWith(4));
      expect(service.reload()).toEqual({ ok: true, changed: true });
      expect(service.reload()).toEqual({ ok: true, changed: false });
      const response = await post(service, '/v1/decide', ip);
      expect((response.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({ limit: 4 });
    } finally {
      await service.close();
    }
  });

  it('renaming a policy starts its counters afresh (names identify stored state)', async () => {
    const file = join(dir, 'renamed.yaml');
    writeFileSync(file, configWith(3, 'first'));
    const service = await startTestService(undefined, { configFile: file });
    try {
      await post(service, '/v1/decide', ip);
      writeFileSync(file, configWith(3, 'second'));
      expect(service.reload().ok).toBe(true);
      const response = await post(service, '/v1/decide', ip);
      expect((response.body.descriptors as Record<string, unknown>[])[0]).toMatchObject({
        policy: 'second',
        remaining: 2,
      });
    } finally {
      await service.close();
    }
  });
});

describe('graceful shutdown', () => {
  it('finishes in-flight calls, refuses new ones, then stops', async () => {
    // The memory store behind a gate: calls wait until the test opens it, so they are in flight.
    const memory = memoryStore();
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const gated: Store = {
      name: 'gated-memory',
      hasOwnClock: false,
      decide: async (request) => {
        await gate;
        return memory.decide(request);
      },
      reset: (prefix, key, policies) => memory.reset(prefix, key, policies),
    };
    const service = await startTestService(configWith(3), { store: gated });
    const client = grpcClient(service.grpcPort);
    const grpcCall = client.shouldRateLimit({
      domain: 'api',
      descriptors: [descriptor(['remote_address', '192.0.2.20'])],
    });
    const httpCall = post(service, '/v1/decide', ip);
    await waitFor(() => service.metrics.inFlight.grpc === 1 && service.metrics.inFlight.http === 1);

    let closed = false;
    const closing = service.close().then(() => {
      closed = true;
    });
    await waitFor(() => service.draining);
    expect(closed).toBe(false);
    open();
    const [grpcResponse, httpResponse] = await Promise.all([grpcCall, httpCall]);
    expect(grpcResponse.overall_code).toBe('OK');
    expect(httpResponse.body.code).toBe('OK');
    await closing;
    await expect(fetch(`http://127.0.0.1:${service.httpPort}/healthz`)).rejects.toThrow();
    client.close();
  });
});
