// Requests per second through each framework bare, with floodgate, and with that framework's popular
// rate limiter, on loopback, in one run:
//
//   npm run bench:http      (builds, then runs this file)
//
// Each server runs in its own process and autocannon in this one, so on a 2-core machine each gets a
// core. Every limiter admits every request from the one client (one key) and sends its default headers.
// Modes are interleaved over rounds and each keeps its best round, which damps noise from other work
// on the machine. Besides req/s, each server reports the CPU time it spent per request: on a busy machine
// req/s swings with what else runs, while CPU per request stays put, so the ratios are also given per
// CPU-second (1 s / CPU time per request: what one core would serve). BENCH_SECONDS, BENCH_ROUNDS and
// BENCH_CONNECTIONS override the defaults.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);

const GROUPS: { framework: string; modes: string[]; peer?: string }[] = [
  { framework: 'node:http', modes: ['node', 'node+floodgate'] },
  {
    framework: 'express',
    modes: ['express', 'express+floodgate', 'express+express-rate-limit'],
    peer: 'express-rate-limit',
  },
  {
    framework: 'fastify',
    modes: ['fastify', 'fastify+floodgate', 'fastify+@fastify/rate-limit'],
    peer: '@fastify/rate-limit',
  },
];

const serverFile = fileURLToPath(new URL('./http-server.ts', import.meta.url));

async function startServer(mode: string): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(serverFile, [mode], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (message) => resolve((message as { port: number }).port));
    child.once('exit', (code) => reject(new Error(`server ${mode} exited with ${code}`)));
  });
  return { child, port };
}

interface Result {
  rps: number;
  /** Requests per CPU-second of the server process. */
  perCpu: number;
  non2xx: number;
  p99: number;
}

function cpuOf(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (message) => resolve((message as { cpuUs: number }).cpuUs));
    child.send('cpu');
  });
}

async function measure(mode: string, seconds: number): Promise<Result> {
  const { child, port } = await startServer(mode);
  try {
    // A short warm-up lets the JIT settle before the measured run.
    await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: 2 });
    child.send('mark');
    const result = await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: seconds });
    const cpuUs = await cpuOf(child);
    return {
      rps: result.requests.average,
      perCpu: (result.requests.total / cpuUs) * 1e6,
      non2xx: result.non2xx,
      p99: result.latency.p99,
    };
  } finally {
    child.kill();
  }
}

const best = new Map<string, Result>();
for (let round = 1; round <= ROUNDS; round++) {
  for (const group of GROUPS) {
    for (const mode of group.modes) {
      const result = await measure(mode, SECONDS);
      const previous = best.get(mode);
      best.set(mode, {
        rps: Math.max(result.rps, previous?.rps ?? 0),
        perCpu: Math.max(result.perCpu, previous?.perCpu ?? 0),
        non2xx: result.non2xx + (previous?.non2xx ?? 0),
        p99: Math.min(result.p99, previous?.p99 ?? Number.POSITIVE_INFINITY),
      });
      console.error(
        `round ${round}: ${mode.padEnd(30)} ${Math.round(result.rps)} req/s, ${Math.round(result.perCpu)} req per CPU-second`,
      );
    }
  }
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US').padStart(8);
const pct = (n: number) => `${(n * 100).toFixed(1)}%`.padStart(7);
console.log(`\nHTTP, loopback, ${CONNECTIONS} connections, best of ${ROUNDS} rounds of ${SECONDS} s per mode\n`);
console.log(
  `${'mode'.padEnd(30)} ${'req/s'.padStart(8)} ${'vs bare'.padStart(7)} ${'vs peer'.padStart(7)}  ${'req/CPU-s'.padStart(9)} ${'vs bare'.padStart(7)} ${'vs peer'.padStart(7)}  p99 ms`,
);
for (const group of GROUPS) {
  const bare = best.get(group.modes[0] as string);
  const peer = group.peer === undefined ? undefined : best.get(group.modes[2] as string);
  for (const mode of group.modes) {
    const r = best.get(mode);
    if (r === undefined || bare === undefined) continue;
    if (r.non2xx > 0) console.log(`  (${mode}: ${r.non2xx} responses were not 2xx)`);
    const isBare = mode === group.modes[0];
    const isOurs = mode.endsWith('+floodgate') && peer !== undefined;
    console.log(
      `${mode.padEnd(30)} ${fmt(r.rps)} ${isBare ? ''.padStart(7) : pct(r.rps / bare.rps)} ${isOurs ? pct(r.rps / (peer?.rps ?? 1)) : ''.padStart(7)}  ${fmt(r.perCpu).padStart(9)} ${isBare ? ''.padStart(7) : pct(r.perCpu / bare.perCpu)} ${isOurs ? pct(r.perCpu / (peer?.perCpu ?? 1)) : ''.padStart(7)}  ${r.p99}`,
    );
  }
}
const node = best.get('node');
const ours = best.get('node+floodgate');
if (node !== undefined && ours !== undefined) {
  console.log(
    `\nfloodgate overhead on node:http: ${pct(1 - ours.rps / node.rps).trim()} of req/s, ${pct(1 - ours.perCpu / node.perCpu).trim()} of req per CPU-second (target ≤ 10%)`,
  );
}
