import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../floodgate/test/stores/redis/servers.js';

// The built command, as users run it: `npm test` builds first.
const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const TOKEN = randomBytes(24).toString('base64url');
const PROCESSES = 4;
const dir = mkdtempSync(join(tmpdir(), 'floodgate-admin-fleet-'));
const prefix = `adminfleet-${randomBytes(6).toString('hex')}`;
const children: ChildProcess[] = [];

/** Starts `floodgate serve` on Redis with an admin token; resolves to its HTTP port. */
function serve(configFile: string): Promise<number> {
  const env: NodeJS.ProcessEnv = { ...process.env, FLOODGATE_ADMIN_TOKEN: TOKEN, FLOODGATE_LOG_LEVEL: 'info' };
  delete env.FLOODGATE_PORT;
  delete env.FLOODGATE_CONFIG;
  const child = spawn(
    process.execPath,
    [
      CLI,
      'serve',
      '--config',
      configFile,
      '--store',
      'redis://127.0.0.1:6379',
      '--port',
      '0',
      '--no-grpc',
      '--no-watch',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env },
  );
  children.push(child);
  return new Promise((resolve, reject) => {
    let buffer = '';
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on('exit', (code) => reject(new Error(`floodgate exited with ${code}: ${stderr}`)));
    child.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let nl = buffer.indexOf('\n'); nl !== -1; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (!line.startsWith('{')) continue;
        const log = JSON.parse(line) as { msg?: string; http?: string };
        if (log.msg === 'floodgate is serving') resolve(Number(String(log.http).split(':').pop()));
      }
    });
  });
}

async function limitOf(port: number, tenant: string): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/check`, {
    method: 'POST',
    body: JSON.stringify({ domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: tenant }] }] }),
  });
  const body = (await response.json()) as { descriptors: { limit: number }[] };
  return (body.descriptors[0] as { limit: number }).limit;
}

describe.skipIf(!runRedis)(
  `an override set through the admin API, on ${PROCESSES} service processes sharing Redis`,
  () => {
    const ports: number[] = [];
    beforeAll(async () => {
      if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
      const file = join(dir, 'floodgate.yaml');
      writeFileSync(
        file,
        `prefix: ${prefix}
domains:
  - domain: api
    descriptors:
      - key: tenant
        policies:
          - { algorithm: gcra, name: per-tenant, limit: 100, periodMs: 60000 }
`,
      );
      ports.push(...(await Promise.all(Array.from({ length: PROCESSES }, () => serve(file)))));
    }, 60_000);
    afterAll(() => {
      for (const child of children) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    });

    it('takes effect on every process within 1 s (the refresh of 500 ms plus a round trip)', async () => {
      const tenant = `t-${randomBytes(4).toString('hex')}`;
      for (const port of ports) expect(await limitOf(port, tenant)).toBe(100);
      const writer = ports[0] as number;
      const started = performance.now();
      const set = await fetch(`http://127.0.0.1:${writer}/v1/admin/overrides/tenant/${tenant}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ policies: [{ algorithm: 'gcra', limit: 1000, periodMs: 60_000 }] }),
      });
      expect(set.status).toBe(200);
      const delays = await Promise.all(
        ports.map(async (port) => {
          for (;;) {
            if ((await limitOf(port, tenant)) === 1000) return performance.now() - started;
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        }),
      );
      console.log(`override delay per process (ms): ${delays.map((d) => d.toFixed(0)).join(', ')}`);
      expect(Math.max(...delays)).toBeLessThanOrEqual(1000);
      await fetch(`http://127.0.0.1:${writer}/v1/admin/overrides/tenant/${tenant}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${TOKEN}` },
      });
    }, 30_000);
  },
);
