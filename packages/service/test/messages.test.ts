import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type CliIo, EXIT, main } from '../src/cli.js';
import { ConfigError, parseConfig } from '../src/config.js';

// What an operator reads when something is wrong: each message says what, and where, once.
const dir = mkdtempSync(join(tmpdir(), 'floodgate-messages-'));
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function capture(): CliIo & { stdout: string; stderr: string } {
  const io = {
    stdout: '',
    stderr: '',
    env: {},
    out: (text: string) => {
      io.stdout += text;
    },
    err: (text: string) => {
      io.stderr += text;
    },
  };
  return io;
}

/** A loopback port nothing listens on. */
async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('a dead store', () => {
  it('answers 503 naming the store, and logs the failure once, the driver’s words once, as the cause', async () => {
    const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
    if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` first`);
    const config = join(dir, 'floodgate.yaml');
    writeFileSync(
      config,
      'domains:\n  - domain: api\n    descriptors:\n      - key: remote_address\n        policies: [{ algorithm: gcra, name: per-ip, limit: 10, periodMs: 1000 }]\n',
    );
    const port = await deadPort();
    const child = spawn(
      process.execPath,
      [cli, 'serve', '--config', config, '--store', `redis://127.0.0.1:${port}`, '--port', '0', '--no-grpc'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    const logs: Record<string, unknown>[] = [];
    const lines: string[] = [];
    let buffer = '';
    child.stdout.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let n = buffer.indexOf('\n'); n !== -1; n = buffer.indexOf('\n')) {
        const line = buffer.slice(0, n);
        buffer = buffer.slice(n + 1);
        lines.push(line);
        if (line.startsWith('{')) logs.push(JSON.parse(line) as Record<string, unknown>);
      }
    });
    const waitFor = async (msg: string) => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const found = logs.find((l) => l.msg === msg);
        if (found !== undefined) return found;
        if (child.exitCode !== null || Date.now() > deadline) throw new Error(`no log "${msg}": ${lines.join('\n')}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const serving = await waitFor('floodgate is serving');
    const httpPort = Number(String(serving.http).split(':').pop());

    const response = await fetch(`http://127.0.0.1:${httpPort}/v1/decide`, {
      method: 'POST',
      body: JSON.stringify({
        domain: 'api',
        descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.1' }] }],
      }),
    });
    expect(response.status).toBe(503);
    const problem = (await response.json()) as { detail: string };
    expect(problem.detail).toBe(
      'the redis store is unavailable (it does not answer, or fails): decisions resume when it answers',
    );

    const logged = await waitFor('the redis store failed');
    expect(logged).toMatchObject({ store: `redis://127.0.0.1:${port}`, code: 'ERR_STORE_UNAVAILABLE' });
    const err = logged.err as { message: string; cause?: { message: string } };
    const driver = err.cause?.message as string;
    expect(driver.length).toBeGreaterThan(0);
    // The error's message ends with the driver's; its cause is logged apart, not appended once more.
    expect(err.message.split(driver)).toHaveLength(2);
    child.kill('SIGTERM');
    expect(await new Promise((resolve) => child.once('exit', resolve))).toBe(EXIT.OK);
  });
});

describe('the command line', () => {
  it('names an unknown option and its command, quotes balanced, with the option a typo away', async () => {
    const io = capture();
    expect(await main(['serve', '--bogus'], io)).toBe(EXIT.USAGE);
    expect(await main(['serve', '--prot', '80'], io)).toBe(EXIT.USAGE);
    expect(await main(['check-config', '-x', 'floodgate.yaml'], io)).toBe(EXIT.USAGE);
    expect(io.stderr.split('\n').filter((l) => l.startsWith('floodgate:'))).toEqual([
      'floodgate: serve has no option --bogus',
      'floodgate: serve has no option --prot (did you mean --port?)',
      'floodgate: check-config has no option -x',
    ]);
    for (const quote of ["'", '"', '`']) expect((io.stderr.split(quote).length - 1) % 2, quote).toBe(0);
  });

  it('reports a config file that cannot be read by its name alone, not at line 0, column 0', async () => {
    const missing = join(dir, 'missing.yaml');
    const io = capture();
    expect(await main(['check-config', missing], io)).toBe(EXIT.CONFIG);
    expect(io.stderr).toBe(`invalid config (1 problem):\n  ${missing}: cannot read the file: no such file (ENOENT)\n`);
    const file = join(dir, 'a-file');
    writeFileSync(file, '');
    expect(await main(['check-config', join(file, 'floodgate.yaml')], io)).toBe(EXIT.CONFIG);
    expect(io.stderr).toContain(
      `  ${join(file, 'floodgate.yaml')}: cannot read the file: a part of the path is not a directory (ENOTDIR)\n`,
    );
    expect(io.stderr).not.toContain(':0:0');
  });
});

describe('a bad named policy', () => {
  const problems = (text: string): string[] => {
    try {
      parseConfig(text, 'floodgate.yaml');
    } catch (error) {
      if (error instanceof ConfigError) return error.issues.map((i) => `${i.line}:${i.column} ${i.path}: ${i.message}`);
      throw error;
    }
    return [];
  };

  it('is one problem, where it is defined, not a second one where a rule uses it', () => {
    const config = `policies:
  per-ip: { algorithm: gcra, limit: -5, periodMs: 60000 }
  renamed: { algorithm: gcra, name: other, limit: 5, periodMs: 60000 }
domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies: [per-ip]
      - key: user
        policies: [renamed]
`;
    expect(problems(config)).toEqual([
      '2:37 policies.per-ip.limit: must be a finite number from 1 to 1000000000000, got -5',
      '3:37 policies.renamed.name: the name of a named policy is its key ("renamed"); leave `name` out',
    ]);
  });

  it('still counts among the names offered when a rule names a policy that does not exist', () => {
    const config = `policies:
  per-ip: { algorithm: gcra, limit: -5, periodMs: 60000 }
domains:
  - domain: api
    descriptors:
      - key: user
        policies: [per-user]
`;
    expect(problems(config)).toEqual([
      '2:37 policies.per-ip.limit: must be a finite number from 1 to 1000000000000, got -5',
      '7:20 domains[0].descriptors[0].policies[0]: no named policy "per-user" (named policies: per-ip)',
    ]);
  });
});
