// The fleet row where the server is the bound. With 4 Node client processes on this 2-core machine the
// clients, not Redis, run out of CPU first (redis-fleet.ts shows how busy the server was). So this records
// the exact bytes each library's real client sends for the fleet's workload (each client 250 closed loops
// of GCRA decisions over 100k keys, recorded through a proxy on the way to the benchmark's redis-server),
// and has PROCESSES light processes (redis-replay-worker.ts) send those recordings again, pipelined, at
// most 250 decisions outstanding each, looping over them. The server does the same work per decision as
// for the real client (same scripts, same arguments, same batches, decided on Redis time, keys expiring as
// they do), and the fleet's decisions per second are what one redis-server can serve.
import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { type FleetRound, redisCpu } from './redis-fleet.js';

const worker = fileURLToPath(new URL('./redis-replay-worker.ts', import.meta.url));

/** The EVALSHA commands of a client's stream from byte `from` on: [start, end, keys] each. */
function evalshaCommands(stream: Buffer, from: number): [number, number, number][] {
  const commands: [number, number, number][] = [];
  let at = 0;
  const line = (p: number) => {
    const eol = stream.indexOf(13, p);
    return [Number(stream.toString('latin1', p + 1, eol)), eol + 2] as const;
  };
  while (at < stream.length) {
    if (stream[at] !== 42) throw new Error(`unexpected command byte at ${at}`);
    const start = at;
    const [n, first] = line(at);
    at = first;
    const args: [number, number][] = [];
    for (let i = 0; i < n; i++) {
      const [len, data] = line(at);
      if (i < 3) args.push([data, len]);
      at = data + len + 2;
    }
    if (at > stream.length) break;
    const [nameAt, nameLen] = args[0] as [number, number];
    const name = stream.toString('latin1', nameAt, nameAt + nameLen).toLowerCase();
    if (name === 'evalsha' && start >= from) {
      const [keysAt, keysLen] = args[2] as [number, number];
      commands.push([start, at, Number(stream.toString('latin1', keysAt, keysAt + keysLen))]);
    }
  }
  return commands;
}

/**
 * A client's recorded bytes, kept as a replay file: its EVALSHA commands (every decision of both libraries
 * is one key of one), a header of u32 count, then per command u32 end offset and u32 keys; then the bytes.
 */
export function replayFile(stream: Buffer): Buffer {
  const commands = evalshaCommands(stream, 0);
  const header = Buffer.alloc(4 + commands.length * 8);
  header.writeUInt32LE(commands.length, 0);
  const parts: Buffer[] = [];
  let end = 0;
  commands.forEach(([start, stop, keys], j) => {
    parts.push(stream.subarray(start, stop));
    end += stop - start;
    header.writeUInt32LE(end, 4 + j * 8);
    header.writeUInt32LE(keys, 8 + j * 8);
  });
  return Buffer.concat([header, ...parts]);
}

/** One round: a replaying process per recording, `inFlight` decisions outstanding each, for `ms`. */
export async function replayRound(
  admin: Redis,
  port: number,
  files: readonly string[],
  inFlight: number,
  ms: number,
): Promise<FleetRound & { errors: number }> {
  const children = files.map((file, i) =>
    fork(worker, [String(port), file, String(inFlight), String(i * 7)], {
      execArgv: ['--import', 'tsx'],
      stdio: 'inherit',
    }),
  );
  try {
    await Promise.all(children.map((child) => new Promise((resolve) => child.once('message', resolve))));
    await new Promise((resolve) => setTimeout(resolve, 500));
    const cpuBefore = await redisCpu(admin);
    const start = performance.now();
    for (const child of children) child.send('start');
    await new Promise((resolve) => setTimeout(resolve, ms));
    const answers = children.map(
      (child) => new Promise<{ decided: number; errors: number }>((resolve) => child.once('message', resolve)),
    );
    for (const child of children) child.send('stop');
    const wallMs = performance.now() - start;
    const cpuUs = ((await redisCpu(admin)) - cpuBefore) * 1e6;
    const results = await Promise.all(answers);
    const decided = results.reduce((a, b) => a + b.decided, 0);
    const errors = results.reduce((a, b) => a + b.errors, 0);
    return { rate: (decided * 1000) / wallMs, redisUs: cpuUs / decided, redisBusy: cpuUs / 1000 / wallMs, errors };
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill();
  }
}

/** A scratch folder for the recordings. */
export async function recordingsDir(): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'floodgate-replay-'));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}
