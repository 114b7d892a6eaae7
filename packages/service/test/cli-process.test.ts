import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../src/cli.js';
import { grpcClient } from './helpers.js';

// These tests run the built command, as users do: `npm test` builds before testing.
const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'floodgate-cli-'));
const children: ChildProcess[] = [];

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
});
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function config(limit: number): string {
  return `domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - { algorithm: fixed-window, name: per-ip, limit: ${limit}, windowMs: 3600000 }
`;
}

interface Running {
  child: ChildProcess;
  logs: Record<string, unknown>[];
  stderr: () => string;
  httpPort: number;
  grpcPort: number;
  exit: Promise<number | null>;
  waitForLog(msg: string): Promise<Record<string, unknown>>;
}

/** Runs `floodgate <args>` and reads its JSON log lines. */
function run(
  args: string[],
  cwd?: string,
): {
  child: ChildProcess;
  logs: Record<string, unknown>[];
  stderr: () => string;
  exit: Promise<number | null>;
} {
  const env = { ...process.env };
  for (const name of ['FLOODGATE_CONFIG', 'RUNTIME_ROOT', 'FLOODGATE_PORT', 'FLOODGATE_GRPC_PORT']) delete env[name];
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], cwd, env });
  children.push(child);
  const logs: Record<string, unknown>[] = [];
  let buffer = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let newline = buffer.indexOf('\n');
    while (newline !== -1) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      if (line.startsWith('{')) logs.push(JSON.parse(line) as Record<string, unknown>);
      newline = buffer.indexOf('\n');
    }
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, logs, stderr: () => stderr, exit };
}

async function serve(args: string[], cwd?: string): Promise<Running> {
  const started = run(['serve', '--port', '0', '--grpc-port', '0', ...args], cwd);
  const waitForLog = async (msg: string): Promise<Record<string, unknown>> => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const found = started.logs.find((l) => l.msg === msg);
      if (found !== undefined) return found;
      if (started.child.exitCode !== null) throw new Error(`floodgate exited: ${started.stderr()}`);
      if (Date.now() > deadline) throw new Error(`no log ${JSON.stringify(msg)} within 10 s: ${started.stderr()}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  const serving = await waitForLog('floodgate is serving');
  const port = (address: unknown) => Number(String(address).split(':').pop());
  return { ...started, httpPort: port(serving.http), grpcPort: port(serving.grpc), waitForLog };
}

async function decide(port: number): Promise<Record<string, unknown>> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/decide`, {
    method: 'POST',
    body: JSON.stringify({
      domain: 'api',
      descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.1' }] }],
    }),
  });
  return ((await response.json()) as { descriptors: Record<string, unknown>[] }).descriptors[0] as Record<
    string,
    unknown
  >;
}

describe('floodgate serve (a real process)', () => {
  it('serves HTTP and gRPC, reloads on SIGHUP keeping counters, and exits 0 on SIGTERM', async () => {
    const file = join(dir, 'hup.yaml');
    writeFileSync(file, config(3));
    const service = await serve(['--config', file, '--no-watch']);
    expect(await decide(service.httpPort)).toMatchObject({ limit: 3, remaining: 2 });
    const client = grpcClient(service.grpcPort);
    try {
      const response = await client.shouldRateLimit({
        domain: 'api',
        descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.1' }] }],
      });
      expect((response.statuses as { limit_remaining: number }[])[0]?.limit_remaining).toBe(1);
    } finally {
      client.close();
    }

    writeFileSync(file, config(10));
    service.child.kill('SIGHUP');
    await service.waitForLog('config reloaded');
    expect(await decide(service.httpPort)).toMatchObject({ limit: 10, remaining: 7 });

    writeFileSync(file, 'domains: [');
    service.child.kill('SIGHUP');
    const rejected = await service.waitForLog('config rejected; the previous config keeps serving');
    expect(JSON.stringify(rejected.issues)).toContain('YAML');
    expect(await decide(service.httpPort)).toMatchObject({ limit: 10, remaining: 6 });

    service.child.kill('SIGTERM');
    expect(await service.exit).toBe(EXIT.OK);
    expect(service.logs.some((l) => l.msg === 'floodgate stopped')).toBe(true);
  });

  it('serves the bundled example on the memory store when no config is named, says so, and prints the page URL', async () => {
    // A fresh directory: no floodgate.yaml, no --config, as a newcomer's first `floodgate serve`.
    const empty = mkdtempSync(join(dir, 'fresh-'));
    const service = await serve([], empty);
    try {
      const serving = service.logs.find((l) => l.msg === 'floodgate is serving') as Record<string, unknown>;
      expect(serving.store).toBe('memory');
      expect(serving.domains).toEqual(['api', 'envoy']);
      // The example's per-ip rule: 100 a minute in bursts of 20.
      expect(await decide(service.httpPort)).toMatchObject({ allowed: true, limit: 20 });
      await expect.poll(() => service.stderr(), { timeout: 5000 }).toContain('web page at');
      const stderr = service.stderr();
      expect(stderr).toContain('built-in example config');
      expect(stderr).toContain('memory store');
      const url = /web page at (\S+)/.exec(stderr)?.[1];
      expect(url).toBe(`http://127.0.0.1:${service.httpPort}/`);
      const page = await fetch(url as string);
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toContain('text/html');
    } finally {
      service.child.kill('SIGTERM');
      await service.exit;
    }
  });

  it('serves ./floodgate.yaml when there is one, without the built-in notice', async () => {
    const here = mkdtempSync(join(dir, 'own-'));
    writeFileSync(join(here, 'floodgate.yaml'), config(4));
    const service = await serve([], here);
    try {
      expect(await decide(service.httpPort)).toMatchObject({ limit: 4, remaining: 3 });
      await expect.poll(() => service.stderr(), { timeout: 5000 }).toContain('at http://');
      expect(service.stderr()).not.toContain('built-in');
    } finally {
      service.child.kill('SIGTERM');
      await service.exit;
    }
  });

  it('stops on SIGTERM when whatever read its logs has gone away', async () => {
    const file = join(dir, 'dead-pipe.yaml');
    writeFileSync(file, config(3));
    const service = await serve(['--config', file, '--no-watch']);
    // The reader of stdout goes away (a log shipper that died): every later log line meets a closed pipe.
    service.child.stdout?.destroy();
    expect(await decide(service.httpPort)).toMatchObject({ limit: 3, remaining: 2 });
    service.child.kill('SIGTERM');
    const code = await Promise.race([
      service.exit,
      new Promise<string>((resolve) => setTimeout(() => resolve('still running 10 s after SIGTERM'), 10_000)),
    ]);
    expect(code).toBe(EXIT.OK);
  }, 20_000);

  it('exits 3 on an invalid config, naming the file, line and path', async () => {
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, config(0));
    const child = run(['serve', '--config', file, '--port', '0', '--grpc-port', '0']);
    expect(await child.exit).toBe(EXIT.CONFIG);
    expect(child.stderr()).toContain(`${file}:6:`);
    expect(child.stderr()).toContain('domains[0].descriptors[0].policies[0].limit');
  });

  it('exits 4 on an unusable store URL', async () => {
    const file = join(dir, 'ok.yaml');
    writeFileSync(file, config(1));
    const child = run([
      'serve',
      '--config',
      file,
      '--store',
      'carrier-pigeon://coop',
      '--port',
      '0',
      '--grpc-port',
      '0',
    ]);
    expect(await child.exit).toBe(EXIT.STORE);
    expect(child.stderr()).toMatch(/unknown store URL "carrier-pigeon:\/\/coop"/);
  });

  it('exits 5 when the port is taken, and 2 on a bad command line', async () => {
    const file = join(dir, 'ok.yaml');
    writeFileSync(file, config(1));
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      const child = run(['serve', '--config', file, '--port', String(port), '--grpc-port', '0']);
      expect(await child.exit).toBe(EXIT.LISTEN);
      expect(child.stderr()).toMatch(/cannot listen for HTTP on 127\.0\.0\.1:\d+/);
    } finally {
      blocker.close();
    }
    const usage = run(['serve', '--port']);
    expect(await usage.exit).toBe(EXIT.USAGE);
  });
});
