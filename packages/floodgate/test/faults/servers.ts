import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { type AddressInfo, createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { withFreePorts } from '../free-ports.js';

const run = promisify(execFile);

const HOST = '127.0.0.1';

/** A server that exited before it answered: its port was taken, or it could not start at all. */
export class StartFailed extends Error {
  constructor(readonly port: number) {
    super(`the server on port ${port} exited while starting (port taken?)`);
  }
}

/** Polls `test` until it holds; a {@link StartFailed} it throws ends the wait at once. */
export async function waitFor(what: string, test: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (
      await test().catch((error: unknown) => {
        if (error instanceof StartFailed) throw error;
        return false;
      })
    )
      return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export async function redisCli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', HOST, '-p', String(port), ...args]);
  return stdout.trim();
}

/** A redis-server owned by one test: killed with SIGKILL, restarted on the same port and directory. */
export interface TestRedis {
  readonly port: number;
  /** SIGKILL: no shutdown, no final save; resolves once the process is gone. */
  kill(): Promise<void>;
  /** Starts it again (same port, same data directory) and resolves once it answers PING. */
  start(): Promise<void>;
  /** Stops it and removes its directory; safe to call twice and after a failed start. */
  stop(): Promise<void>;
}

/**
 * Starts a redis-server on a spare port. With `durable`, every write is fsynced to an append-only file
 * before Redis answers, so a SIGKILL loses nothing that was acknowledged, and a restart brings the
 * counters back (the test can then count admissions across the crash exactly). The file is in memory
 * (/dev/shm) where there is one: it outlives the process all the same, and an fsync to a disk that other
 * tests keep busy can stall Redis past the limiter's timeout, which is not the fault under test.
 */
export function startRedis(options: { durable?: boolean; args?: readonly string[] } = {}): Promise<TestRedis> {
  // On a port the OS says is free (not a fixed range that clones testing side by side would share).
  return withFreePorts(1, ([port]) => startRedisOn(port as number, options));
}

async function startRedisOn(
  port: number,
  options: { durable?: boolean; args?: readonly string[] },
): Promise<TestRedis> {
  const dir = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'floodgate-fault-redis-'));
  let child: ChildProcess | undefined;
  const killNow = () => child?.kill('SIGKILL');
  process.once('exit', killNow);
  const exited = (c: ChildProcess) =>
    new Promise<void>((resolve) => {
      if (c.exitCode !== null || c.signalCode !== null) return resolve();
      c.once('exit', () => resolve());
    });
  const args = [
    '--port',
    String(port),
    '--bind',
    HOST,
    '--dir',
    dir,
    '--save',
    '',
    '--daemonize',
    'no',
    '--logfile',
    join(dir, 'redis.log'),
    ...(options.durable ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']),
    ...(options.args ?? []),
  ];
  const server: TestRedis = {
    port,
    async kill() {
      const c = child;
      if (c === undefined) return;
      c.kill('SIGKILL');
      await exited(c);
      child = undefined;
    },
    async start() {
      const c = spawn('redis-server', args, { stdio: 'ignore' });
      child = c;
      // A server that exits while starting (its port taken meanwhile) fails at once, not after 10 s.
      await waitFor(
        `redis-server on ${port}`,
        async () => {
          if (c.exitCode !== null || c.signalCode !== null) throw new StartFailed(port);
          return (await redisCli(port, 'ping')) === 'PONG';
        },
        10_000,
      );
    },
    async stop() {
      process.removeListener('exit', killNow);
      const c = child;
      child = undefined;
      if (c !== undefined) {
        c.kill('SIGKILL');
        await exited(c);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    await server.start();
  } catch (error) {
    await server.stop();
    throw error;
  }
  return server;
}

/**
 * A TCP proxy in front of a server. `stall()` makes it a server that accepts connections and reads
 * requests but never answers (a frozen process, a black-holed network); `resume()` lets the held bytes
 * through in order and proxies normally again, as a frozen server would when it thaws; `cut()` instead
 * resets every connection (the network comes back, the connections do not).
 */
export interface StallingProxy {
  readonly port: number;
  stall(): void;
  resume(): void;
  cut(): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket;
  /** Bytes held while stalled, in arrival order. */
  requests: Buffer[];
  replies: Buffer[];
}

export async function stallingProxy(targetPort: number): Promise<StallingProxy> {
  let stalled = false;
  const pairs = new Set<Pair>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: HOST, port: targetPort });
    const pair: Pair = { client, upstream, requests: [], replies: [] };
    pairs.add(pair);
    client.on('data', (chunk) => {
      if (stalled) pair.requests.push(chunk);
      else upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (stalled) pair.replies.push(chunk);
      else client.write(chunk);
    });
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, HOST, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    stall() {
      stalled = true;
    },
    resume() {
      stalled = false;
      for (const pair of pairs) {
        for (const chunk of pair.replies) pair.client.write(chunk);
        for (const chunk of pair.requests) pair.upstream.write(chunk);
        pair.replies = [];
        pair.requests = [];
      }
    },
    cut() {
      for (const pair of pairs) {
        pair.client.resetAndDestroy();
        pair.upstream.destroy();
      }
      pairs.clear();
      stalled = false;
    },
    async close() {
      for (const pair of pairs) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
