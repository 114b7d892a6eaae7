// The fleet case: several app-server processes share one Redis. What caps the fleet is the server's work
// per decision; this runs PROCESSES client processes at once against one redis-server and reports the
// fleet's decisions per second, the server's CPU per decision, and how busy the server was (near 100 %:
// Redis, not the clients, is the bound).
import { fork } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { Contender } from './redis-fleet-worker.js';

export interface FleetRound {
  rate: number;
  /** redis-server CPU µs per decision. */
  redisUs: number;
  /** redis-server CPU time over wall time during the round (1 = one core all the time). */
  redisBusy: number;
}

const worker = fileURLToPath(new URL('./redis-fleet-worker.ts', import.meta.url));

/** redis-server's CPU seconds so far (user + system). */
export async function redisCpu(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  return Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
}

/** One round: `processes` clients, `inFlight` closed loops each, for `ms`. */
export async function fleetRound(
  admin: Redis,
  port: number,
  contender: Contender,
  options: { processes: number; inFlight: number; keys: number; limit: number; periodMs: number; ms: number },
  /** When given, each client keeps the bytes it sent during the round in this folder (redis-replay.ts). */
  recordIn?: string,
): Promise<FleetRound & { recordings: string[] }> {
  const recordings = Array.from({ length: options.processes }, (_, i) =>
    recordIn === undefined ? '' : join(recordIn, `${contender}-${i}.resp`),
  );
  const children = recordings.map((recording) =>
    fork(
      worker,
      [
        String(port),
        contender,
        String(options.inFlight),
        String(options.keys),
        String(options.limit),
        String(options.periodMs),
        ...(recording === '' ? [] : [recording]),
      ],
      { execArgv: ['--import', 'tsx'], stdio: 'inherit' },
    ),
  );
  try {
    await Promise.all(children.map((child) => new Promise((resolve) => child.once('message', resolve))));
    // Warm up: scripts loaded, connections open, JIT done.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const cpuBefore = await redisCpu(admin);
    const start = performance.now();
    for (const child of children) child.send('start');
    await new Promise((resolve) => setTimeout(resolve, options.ms));
    const answers = children.map((child) => new Promise<number>((resolve) => child.once('message', resolve)));
    for (const child of children) child.send('stop');
    const wallMs = performance.now() - start;
    const cpuUs = ((await redisCpu(admin)) - cpuBefore) * 1e6;
    const decided = (await Promise.all(answers)).reduce((a, b) => a + b, 0);
    // The stop messages arrive a little after the wall time is read; the difference is a few ms of 2 s.
    return {
      rate: (decided * 1000) / wallMs,
      redisUs: cpuUs / decided,
      redisBusy: cpuUs / 1000 / wallMs,
      recordings: recordIn === undefined ? [] : recordings,
    };
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill();
  }
}
