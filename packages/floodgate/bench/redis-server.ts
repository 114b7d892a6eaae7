// A redis-server of the benchmark's own, on a spare port, in its own session.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const HOST = '127.0.0.1';

/** The least a GCRA script can do: read the clock, GET, compare, SET with an expiry. */
export const MINIMAL_GCRA = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + tonumber(ARGV[1])
if new - now > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000))
return 1
`;

async function freePort(from: number, to: number): Promise<number> {
  for (let port = from; port < to; port++) {
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(false));
      server.listen(port, HOST, () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free port in ${from}–${to - 1}`);
}

/** Starts a redis-server without persistence on the first free port in [from, to). */
export async function startRedisServer(from: number, to: number): Promise<{ port: number; stop: () => Promise<void> }> {
  const port = await freePort(from, to);
  const dir = await mkdtemp(join(tmpdir(), 'floodgate-bench-'));
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', dir],
    // Its own session, like a real server: on a shared machine the scheduler then weighs it apart from
    // this process instead of splitting one share between the two.
    { stdio: 'ignore', detached: true },
  );
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  for (let i = 0; ; i++) {
    try {
      const { stdout } = await run('redis-cli', ['-h', HOST, '-p', String(port), 'ping']);
      if (stdout.trim() === 'PONG') break;
    } catch {
      if (i > 100) throw new Error('redis-server did not start');
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    port,
    stop: async () => {
      process.removeListener('exit', kill);
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      });
      await rm(dir, { recursive: true, force: true });
    },
  };
}
