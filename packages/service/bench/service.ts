// Decisions per second and latency of `floodgate serve`, over gRPC (Envoy's rate limit API) and over the
// HTTP JSON API, on the memory store and on Redis:
//
//   npm run bench:service      (builds, then runs this file)
//
// The service runs as its own process (the built CLI, as users run it) and the load comes from this
// one, so on a 2-core machine each gets a core. The gRPC load is node:http2 with pre-encoded messages,
// and, when it is installed, h2load (a client in C, as Envoy is one); the HTTP load is autocannon. The
// Node client's requests carry distinct keys drawn from 10,000 users, h2load's all carry one; the policy,
// GCRA, admits them all.
//
// For each store: the most decisions per second (closed loop: a fixed number of calls in flight), with
// 1 and with 4 descriptors per gRPC request (a request is decided descriptor by descriptor, so batching
// descriptors amortizes the per-call cost), then latency at a fixed rate (open loop: calls sent on a
// schedule whatever the answers do), at 10,000 decisions/s (half the 20,000 target) and at half the
// measured maximum. Besides throughput, the server's CPU time per decision is given: on a busy machine
// decisions/s swing with what else runs, CPU per decision stays put (1 s / CPU per decision is what one
// core would serve). Each scenario keeps its best of BENCH_ROUNDS rounds (default 2).
//
// Each round runs the gRPC scenarios on three transports, one after the other: the current one (`now`),
// the one before the hostile-peer bounds (`earlier`: bench/earlier/h2.ts, compiled by TypeScript's
// transpiler in a module hook and loaded in place of the built transport, on plain Node as `now`), and
// node:http2 running the same handler (`node:http2`: test/hostile/node-h2-server.ts, memory store only);
// the summary gives now's figures as ratios of the other two, from the same run.
//
// BENCH_SECONDS (5), BENCH_ROUNDS (2), BENCH_CONCURRENCY (64), BENCH_STORES (memory,redis) and
// BENCH_TRANSPORTS (now,earlier,node:http2) override.
import { type ChildProcess, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { type ClientHttp2Session, connect } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { loadSync } from '@grpc/proto-loader';
import autocannon from 'autocannon';
import { spawnServe } from './serve.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const STORES = (process.env.BENCH_STORES ?? 'memory,redis').split(',');
const TRANSPORTS = (process.env.BENCH_TRANSPORTS ?? 'now,earlier,node:http2').split(',');
const EARLIER = fileURLToPath(new URL('./earlier/register.mjs', import.meta.url));
const REFERENCE = fileURLToPath(new URL('../test/hostile/node-h2-server.ts', import.meta.url));
const USERS = 10_000;

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const PROTO_DIR = fileURLToPath(new URL('../proto', import.meta.url));
const STORE_URLS: Record<string, string> = { memory: 'memory', redis: 'redis://127.0.0.1:6379' };

const configFile = join(tmpdir(), `floodgate-bench-${randomBytes(4).toString('hex')}.yaml`);
writeFileSync(
  configFile,
  `prefix: bench-${randomBytes(4).toString('hex')}
domains:
  - domain: bench
    descriptors:
      - key: user
        policies:
          - { algorithm: gcra, name: per-user, limit: 1000000, periodMs: 1000 }
`,
);

interface Running {
  child: ChildProcess;
  httpPort: number;
  grpcPort: number;
}

async function startService(store: string, transport: string): Promise<Running> {
  if (transport === 'node:http2') {
    const { child, log } = await spawnServe(REFERENCE, [configFile], ['--import', 'tsx']);
    const port = (address: string) => Number(address.split(':').pop());
    return { child, httpPort: port(log.http), grpcPort: port(log.grpc ?? '') };
  }
  // Plain Node for both builds of the service (see earlier/hooks.mjs): under tsx, the process collected
  // garbage differently.
  const nodeArgs = transport === 'earlier' ? ['--import', EARLIER] : [];
  const { child, log } = await spawnServe(
    CLI,
    ['--config', configFile, '--store', store, '--port', '0', '--grpc-port', '0', '--no-watch'],
    nodeArgs,
  );
  const port = (address: string) => Number(address.split(':').pop());
  return { child, httpPort: port(log.http), grpcPort: port(log.grpc ?? '') };
}

/** CPU seconds the process has used (user + system), from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const definition = loadSync(['envoy/service/ratelimit/v3/rls.proto'], {
  includeDirs: [PROTO_DIR],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
});
const method = (
  definition['envoy.service.ratelimit.v3.RateLimitService'] as Record<
    string,
    { requestSerialize: (m: unknown) => Buffer; responseDeserialize: (b: Buffer) => unknown }
  >
).ShouldRateLimit;
if (method === undefined) throw new Error('ShouldRateLimit is missing from the proto');

/** gRPC frames of ShouldRateLimit requests with `perRequest` descriptors each, over all users. */
function frames(perRequest: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < USERS; i += perRequest) {
    const descriptors = [];
    for (let j = 0; j < perRequest; j++)
      descriptors.push({ entries: [{ key: 'user', value: `user-${(i + j) % USERS}` }] });
    const message = method?.requestSerialize({ domain: 'bench', descriptors }) as Buffer;
    const frame = Buffer.allocUnsafe(message.length + 5);
    frame[0] = 0;
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    out.push(frame);
  }
  return out;
}

const HEADERS = {
  ':method': 'POST',
  ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
  'content-type': 'application/grpc',
  te: 'trailers',
};

interface Load {
  calls: number;
  errors: number;
  latenciesMs: Float64Array;
  seconds: number;
  /** This process's longest event-loop stall during the open loop, ms: time its own calls waited too. */
  clientStallMs?: number;
}

/** One gRPC call on raw HTTP/2; resolves to its latency in ms, or -1 for an error status. */
function call(session: ClientHttp2Session, frame: Buffer): Promise<number> {
  return new Promise((resolve) => {
    const start = performance.now();
    let ok = false;
    const stream = session.request(HEADERS);
    stream.on('response', (headers) => {
      if (headers['grpc-status'] !== undefined) ok = headers['grpc-status'] === '0';
    });
    stream.on('trailers', (trailers) => {
      ok = trailers['grpc-status'] === '0';
    });
    stream.on('data', () => {});
    // A refused or reset stream (the server past its stream limit under overload) counts as an error.
    stream.on('error', () => {});
    stream.on('close', () => resolve(ok ? performance.now() - start : -1));
    stream.end(frame);
  });
}

function sessions(port: number, count: number): ClientHttp2Session[] {
  return Array.from({ length: count }, () => {
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', () => {});
    return session;
  });
}

/** Closed loop: `concurrency` calls in flight for `seconds`. */
async function grpcClosedLoop(port: number, pool: Buffer[], concurrency: number, seconds: number): Promise<Load> {
  const list = sessions(port, 4);
  const latencies = new Float64Array(2_000_000);
  let calls = 0;
  let errors = 0;
  let next = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  const worker = async (session: ClientHttp2Session) => {
    while (performance.now() < end) {
      const ms = await call(session, pool[next++ % pool.length] as Buffer);
      if (ms < 0) errors++;
      else if (calls < latencies.length) latencies[calls++] = ms;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, i) => worker(list[i % list.length] as ClientHttp2Session)));
  const elapsed = (performance.now() - start) / 1000;
  for (const s of list) s.close();
  return { calls, errors, latenciesMs: latencies.subarray(0, calls), seconds: elapsed };
}

/** Open loop: calls sent on a schedule of `rate` per second for `seconds`, whatever the answers do. */
async function grpcOpenLoop(port: number, pool: Buffer[], rate: number, seconds: number): Promise<Load> {
  const list = sessions(port, 4);
  const total = Math.floor(rate * seconds);
  const latencies = new Float64Array(total);
  let calls = 0;
  let errors = 0;
  let sent = 0;
  const stalls = monitorEventLoopDelay({ resolution: 1 });
  stalls.enable();
  const start = performance.now();
  // Counts answers instead of keeping every call's promise: a run's worth of live promises would make this
  // process collect garbage in long pauses, and its pauses would count as the service's latency.
  await new Promise<void>((resolve) => {
    let answered = 0;
    const done = (ms: number) => {
      if (ms < 0) errors++;
      else latencies[calls++] = ms;
      if (++answered === total) resolve();
    };
    const tick = () => {
      const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate));
      while (sent < due) {
        const session = list[sent % list.length] as ClientHttp2Session;
        void call(session, pool[sent % pool.length] as Buffer).then(done);
        sent++;
      }
      if (sent < total) setTimeout(tick, 1);
    };
    if (total === 0) resolve();
    else tick();
  });
  const elapsed = (performance.now() - start) / 1000;
  stalls.disable();
  for (const s of list) s.close();
  return {
    calls,
    errors,
    latenciesMs: latencies.subarray(0, calls),
    seconds: elapsed,
    clientStallMs: stalls.max / 1e6,
  };
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;
}

interface Row {
  transport: string;
  store: string;
  scenario: string;
  decisionsPerSecond: number;
  p50: number;
  p99: number;
  cpuUsPerDecision: number;
  errors: number;
  clientStallMs?: number | undefined;
  serviceStallMs?: number | undefined;
}

/**
 * The longest gap between the service's event-loop samples since the last call, in ms, from its own
 * metrics: prom-client samples the loop every 10 ms and resets on each scrape, and Node records the whole
 * gap between samples, so the longest stall lies between this less 10 ms and this (see {@link stallRange}).
 */
async function serviceStallMs(httpPort: number): Promise<number> {
  // A new connection each time (no keep-alive): spawnSync holds this event loop while h2load runs, so a
  // pooled connection would not hear that the service closed it meanwhile.
  const text = await new Promise<string>((resolve, reject) => {
    get({ host: '127.0.0.1', port: httpPort, path: '/metrics', agent: false }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        body += chunk;
      });
      response.on('end', () => resolve(body));
    }).on('error', reject);
  });
  const max = Number(/^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)?.[1]);
  return max * 1000;
}

async function httpLoad(port: number, seconds: number, overallRate?: number): Promise<autocannon.Result> {
  return autocannon({
    url: `http://127.0.0.1:${port}/v1/decide`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"user-[<id>]"}]}]}',
    idReplacement: true,
    connections: overallRate === undefined ? CONCURRENCY : 16,
    duration: seconds,
    ...(overallRate === undefined ? {} : { overallRate }),
  });
}

async function scenarios(store: string, transport: string): Promise<Row[]> {
  const url = STORE_URLS[store];
  if (url === undefined) throw new Error(`unknown store ${store}`);
  const service = await startService(url, transport);
  const gRpcOnly = transport !== 'now';
  const pid = service.child.pid as number;
  const rows: Row[] = [];
  const one = frames(1);
  const four = frames(4);
  try {
    // Warm-up: let the JIT settle, the keys exist.
    await grpcClosedLoop(service.grpcPort, one, CONCURRENCY, 2);
    if (!gRpcOnly) await httpLoad(service.httpPort, 1);

    const grpcRow = async (scenario: string, run: () => Promise<Load>, perRequest: number): Promise<Row> => {
      await serviceStallMs(service.httpPort);
      const cpuBefore = cpuSeconds(pid);
      const load = await run();
      const cpu = cpuSeconds(pid) - cpuBefore;
      const serviceStall = await serviceStallMs(service.httpPort);
      const sorted = Float64Array.from(load.latenciesMs).sort();
      const decisions = load.calls * perRequest;
      return {
        transport,
        store,
        scenario,
        decisionsPerSecond: decisions / load.seconds,
        p50: percentile(sorted, 0.5),
        p99: percentile(sorted, 0.99),
        cpuUsPerDecision: (cpu * 1e6) / decisions,
        errors: load.errors,
        clientStallMs: load.clientStallMs,
        serviceStallMs: serviceStall,
      };
    };
    const max1 = await grpcRow(
      `gRPC max, 1 descriptor/call, ${CONCURRENCY} in flight`,
      () => grpcClosedLoop(service.grpcPort, one, CONCURRENCY, SECONDS),
      1,
    );
    rows.push(max1);
    if (!gRpcOnly)
      rows.push(
        await grpcRow(
          `gRPC max, 4 descriptors/call, ${CONCURRENCY} in flight`,
          () => grpcClosedLoop(service.grpcPort, four, CONCURRENCY, SECONDS),
          4,
        ),
      );
    rows.push(
      await grpcRow('gRPC at 10,000/s (open loop)', () => grpcOpenLoop(service.grpcPort, one, 10_000, SECONDS), 1),
    );
    const half = Math.round(max1.decisionsPerSecond / 2);
    if (!gRpcOnly)
      rows.push(
        await grpcRow(
          `gRPC at half the max: ${half.toLocaleString('en-US')}/s`,
          () => grpcOpenLoop(service.grpcPort, one, half, SECONDS),
          1,
        ),
      );

    // A client in C, when there is one (Debian: nghttp2-client): the Node client above costs more CPU per
    // call than the service, and pauses for its own garbage collection, so on 2 cores it, not the service,
    // limits the closed loop and adds its pauses to the latency. h2load is closer to the real client, Envoy.
    if (spawnSync('h2load', ['--version']).status === 0) {
      const body = join(tmpdir(), `floodgate-bench-${randomBytes(4).toString('hex')}.bin`);
      writeFileSync(body, one[0] as Buffer);
      const h2loadRow = async (scenario: string, args: string[]): Promise<Row | undefined> => {
        const log = join(tmpdir(), `floodgate-bench-${randomBytes(4).toString('hex')}.log`);
        await serviceStallMs(service.httpPort);
        const cpuBefore = cpuSeconds(pid);
        const run = spawnSync(
          'h2load',
          [
            ...args,
            '-d',
            body,
            '-H',
            'content-type: application/grpc',
            '-H',
            'te: trailers',
            `--log-file=${log}`,
            `http://127.0.0.1:${service.grpcPort}${HEADERS[':path']}`,
          ],
          { encoding: 'utf8' },
        );
        const cpu = cpuSeconds(pid) - cpuBefore;
        const serviceStall = await serviceStallMs(service.httpPort);
        const seconds = Number(/finished in ([\d.]+)s/.exec(run.stdout)?.[1]);
        if (!Number.isFinite(seconds)) {
          console.error(`h2load failed: ${run.stdout}${run.stderr}`);
          return undefined;
        }
        // Each line: start (µs since the epoch), HTTP status, µs to the end of the response. h2load
        // counts a call by its HTTP status, so its gRPC status is not checked here; the service answers
        // them all OK under this policy (the Node client above checks every grpc-status).
        const lines = readFileSync(log, 'utf8').trim().split('\n');
        rmSync(log, { force: true });
        // A stream that failed is logged with status -1: an error, not a latency.
        const answered = lines.filter((line) => line.split('\t')[1] === '200');
        const latencies = Float64Array.from(answered, (line) => Number(line.split('\t')[2]) / 1000).sort();
        const failed = lines.length - answered.length;
        return {
          transport,
          store,
          scenario,
          decisionsPerSecond: answered.length / seconds,
          p50: percentile(latencies, 0.5),
          p99: percentile(latencies, 0.99),
          cpuUsPerDecision: (cpu * 1e6) / answered.length,
          errors: failed,
          serviceStallMs: serviceStall,
        };
      };
      const clients = 4;
      const rows2 = [
        await h2loadRow('gRPC max, h2load client, 4 x 32 in flight', [
          '-D',
          String(SECONDS),
          '-c',
          String(clients),
          '-m',
          '32',
        ]),
        // --rps: each client sends on a schedule (open loop), up to 256 calls in flight each.
        await h2loadRow('gRPC at 10,000/s, h2load client (open loop)', [
          '-D',
          String(SECONDS),
          '-c',
          String(clients),
          '-m',
          '256',
          '--rps',
          String(10_000 / clients),
        ]),
      ];
      for (const row of rows2) if (row !== undefined) rows.push(row);
      rmSync(body, { force: true });
    }

    const httpRow = async (scenario: string, overallRate?: number): Promise<Row> => {
      const cpuBefore = cpuSeconds(pid);
      const result = await httpLoad(service.httpPort, SECONDS, overallRate);
      const cpu = cpuSeconds(pid) - cpuBefore;
      return {
        transport,
        store,
        scenario,
        decisionsPerSecond: result.requests.total / result.duration,
        p50: result.latency.p50,
        p99: result.latency.p99,
        cpuUsPerDecision: (cpu * 1e6) / result.requests.total,
        errors: result.non2xx + result.errors,
      };
    };
    if (!gRpcOnly) {
      const httpMax = await httpRow(`HTTP max, 1 descriptor/call, ${CONCURRENCY} connections`);
      rows.push(httpMax);
      rows.push(await httpRow(`HTTP at half the max`, Math.round(httpMax.decisionsPerSecond / 2)));
    }
  } finally {
    service.child.kill('SIGTERM');
  }
  return rows;
}

/** A service stall as the range its sampling allows (see {@link serviceStallMs}). */
const stallRange = (gapMs: number) => `${Math.max(0, gapMs - 10).toFixed(1)}-${gapMs.toFixed(1)} ms`;
const minOf = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined ? undefined : Math.min(a, b);
const best = new Map<string, Row>();
for (let round = 1; round <= ROUNDS; round++) {
  for (const [store, transport] of STORES.flatMap((st) =>
    TRANSPORTS.filter((t) => t === 'now' || st === 'memory').map((t) => [st, t] as const),
  )) {
    let rows: Row[];
    try {
      rows = await scenarios(store, transport);
    } catch (error) {
      console.error(`${store}: ${(error as Error).message}`, (error as Error).cause);
      continue;
    }
    for (const row of rows) {
      const id = `${row.transport}|${row.store}|${row.scenario.replace(/: [\d,]+\/s$/, '')}`;
      const previous = best.get(id);
      console.error(
        `round ${round} ${transport.padEnd(10)} ${store.padEnd(6)} ${row.scenario.padEnd(48)} ${Math.round(row.decisionsPerSecond).toLocaleString('en-US').padStart(7)}/s  p50 ${row.p50.toFixed(2)} ms  p99 ${row.p99.toFixed(2)} ms  ${row.cpuUsPerDecision.toFixed(1)} µs CPU/decision${row.serviceStallMs === undefined ? '' : `  service stalled ${stallRange(row.serviceStallMs)}`}${row.clientStallMs === undefined ? '' : `, client ${row.clientStallMs.toFixed(1)} ms`}${row.errors > 0 ? `  ${row.errors} errors` : ''}`,
      );
      if (previous === undefined) {
        best.set(id, row);
      } else {
        best.set(id, {
          ...row,
          scenario: row.decisionsPerSecond > previous.decisionsPerSecond ? row.scenario : previous.scenario,
          decisionsPerSecond: Math.max(row.decisionsPerSecond, previous.decisionsPerSecond),
          p50: Math.min(row.p50, previous.p50),
          p99: Math.min(row.p99, previous.p99),
          cpuUsPerDecision: Math.min(row.cpuUsPerDecision, previous.cpuUsPerDecision),
          errors: row.errors + previous.errors,
          clientStallMs: minOf(row.clientStallMs, previous.clientStallMs),
          serviceStallMs: minOf(row.serviceStallMs, previous.serviceStallMs),
        });
      }
    }
  }
}

console.log(
  `\nfloodgate serve, loopback, best of ${ROUNDS} round${ROUNDS === 1 ? '' : 's'} of ${SECONDS} s per scenario\n`,
);
console.log(
  `${'transport'.padEnd(11)}${'store'.padEnd(7)} ${'scenario'.padEnd(48)} ${'decisions/s'.padStart(11)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)} ${'CPU µs/decision'.padStart(15)}`,
);
for (const row of best.values()) {
  console.log(
    `${row.transport.padEnd(11)}${row.store.padEnd(7)} ${row.scenario.padEnd(48)} ${Math.round(row.decisionsPerSecond).toLocaleString('en-US').padStart(11)} ${row.p50.toFixed(2).padStart(7)} ${row.p99.toFixed(2).padStart(7)} ${row.cpuUsPerDecision.toFixed(1).padStart(15)}${row.serviceStallMs === undefined ? '' : `  stalls: service ${stallRange(row.serviceStallMs)}`}${row.clientStallMs === undefined ? '' : `, client ${row.clientStallMs.toFixed(1)} ms`}${row.errors > 0 ? `  (${row.errors} errors)` : ''}`,
  );
}
const memoryMax = best.get(`now|memory|gRPC max, 1 descriptor/call, ${CONCURRENCY} in flight`);
const h2loadMax = best.get('now|memory|gRPC max, h2load client, 4 x 32 in flight');
const rate = (row: Row | undefined) =>
  row === undefined ? 'not run' : `${Math.round(row.decisionsPerSecond).toLocaleString('en-US')}/s`;
const p99 = (row: Row | undefined) => (row === undefined ? 'not run' : `${row.p99.toFixed(2)} ms`);
if (memoryMax !== undefined) {
  console.log(
    `\ntargets on the memory store:\n  ≥ 20,000 gRPC decisions/s (1 descriptor/call): Node client ${rate(memoryMax)}, h2load ${rate(h2loadMax)}; one core at ${memoryMax.cpuUsPerDecision.toFixed(1)} µs/decision: ${Math.round(1e6 / memoryMax.cpuUsPerDecision).toLocaleString('en-US')}/s\n  p99 < 5 ms at 10,000/s: Node client ${p99(best.get('now|memory|gRPC at 10,000/s (open loop)'))}, h2load ${p99(best.get('now|memory|gRPC at 10,000/s, h2load client (open loop)'))}`,
  );
}

// now against the earlier transport and node:http2, same run: calls/s at max (higher is better) and p99 at
// 10,000/s (lower is better); targets: ≥ 1× the earlier transport, ≥ 1.8× node:http2 at max.
const compared: Array<[string, 'rate' | 'p99']> = [
  [`gRPC max, 1 descriptor/call, ${CONCURRENCY} in flight`, 'rate'],
  ['gRPC max, h2load client, 4 x 32 in flight', 'rate'],
  ['gRPC at 10,000/s (open loop)', 'p99'],
  ['gRPC at 10,000/s, h2load client (open loop)', 'p99'],
];
console.log('\nnow against the others (memory store, same run):');
for (const [scenario, what] of compared) {
  const now = best.get(`now|memory|${scenario}`);
  if (now === undefined) continue;
  const parts = TRANSPORTS.filter((t) => t !== 'now').map((t) => {
    const other = best.get(`${t}|memory|${scenario}`);
    if (other === undefined) return `${t}: not run`;
    return what === 'rate'
      ? `${Math.round(other.decisionsPerSecond).toLocaleString('en-US')}/s, now ${(now.decisionsPerSecond / other.decisionsPerSecond).toFixed(2)}×`
      : `p99 ${other.p99.toFixed(2)} ms, now ${now.p99.toFixed(2)} ms (${(now.p99 / other.p99).toFixed(2)}×)`;
  });
  console.log(
    `  ${scenario}: now ${what === 'rate' ? `${Math.round(now.decisionsPerSecond).toLocaleString('en-US')}/s` : `p99 ${now.p99.toFixed(2)} ms`}; ${TRANSPORTS.filter(
      (t) => t !== 'now',
    )
      .map((t, i) => `${t} ${parts[i]}`)
      .join('; ')}`,
  );
}
