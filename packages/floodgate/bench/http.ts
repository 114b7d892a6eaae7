// Requests per second through each framework bare, with floodgate, and with that framework's popular
// rate limiter, on loopback, in one run:
//
//   npm run bench:http      (builds, then runs this file)
//
// Each server runs in its own process and autocannon in this one, so on a 2-core machine each gets a
// core. Every limiter admits every request from the one client (one key) and sends its default headers.
// Modes are interleaved over rounds and each keeps its best round, which damps noise from other work
// on the machine. BENCH_SECONDS, BENCH_ROUNDS and BENCH_CONNECTIONS override the defaults.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
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

async function measure(mode: string, seconds: number): Promise<{ rps: number; non2xx: number; p99: number }> {
  const { child, port } = await startServer(mode);
  try {
    // A short warm-up lets the JIT settle before the measured run.
    await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: 2 });
    const result = await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: seconds });
    return { rps: result.requests.average, non2xx: result.non2xx, p99: result.latency.p99 };
  } finally {
    child.kill();
  }
}

const best = new Map<string, { rps: number; non2xx: number; p99: number }>();
for (let round = 1; round <= ROUNDS; round++) {
  for (const group of GROUPS) {
    for (const mode of group.modes) {
      const result = await measure(mode, SECONDS);
      const previous = best.get(mode);
      if (previous === undefined || result.rps > previous.rps) best.set(mode, result);
      console.error(`round ${round}: ${mode.padEnd(30)} ${Math.round(result.rps)} req/s`);
    }
  }
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US').padStart(8);
console.log(`\nHTTP, loopback, ${CONNECTIONS} connections, best of ${ROUNDS} rounds of ${SECONDS} s per mode\n`);
console.log(`${'mode'.padEnd(30)} ${'req/s'.padStart(8)}  ${'p99 ms'.padStart(6)}  vs bare  vs peer`);
for (const group of GROUPS) {
  const bare = best.get(group.modes[0] as string)?.rps ?? Number.NaN;
  const peer = group.peer === undefined ? undefined : best.get(group.modes[2] as string)?.rps;
  for (const mode of group.modes) {
    const result = best.get(mode);
    if (result === undefined) continue;
    if (result.non2xx > 0) console.log(`  (${mode}: ${result.non2xx} responses were not 2xx)`);
    const vsBare = mode === group.modes[0] ? '' : `${((result.rps / bare) * 100).toFixed(1)}%`;
    const vsPeer =
      mode.endsWith('+floodgate') && peer !== undefined ? `${((result.rps / peer) * 100).toFixed(1)}%` : '';
    console.log(
      `${mode.padEnd(30)} ${fmt(result.rps)}  ${String(result.p99).padStart(6)}  ${vsBare.padStart(7)}  ${vsPeer.padStart(7)}`,
    );
  }
}
const nodeBare = best.get('node')?.rps ?? Number.NaN;
const nodeFloodgate = best.get('node+floodgate')?.rps ?? Number.NaN;
console.log(`\nfloodgate overhead on node:http: ${((1 - nodeFloodgate / nodeBare) * 100).toFixed(1)}% (target ≤ 10%)`);
