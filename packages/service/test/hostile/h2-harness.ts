// What the HTTP/2 attack tests (h2-*.test.ts) and the attack measurements (bench/h2-attacks.ts) share:
// the service started as its own process from the built CLI (so that its RSS is its own), the attacks of
// h2-attack.py (python3-h2, an HTTP/2 stack independent of ours), and normal gRPC calls made with
// node:http2 during an attack, whose latency is measured.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { type ClientHttp2Session, connect } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Debian's python, which has python3-h2 (the default `python3` may be another build). */
const PYTHON = '/usr/bin/python3';
const ATTACK = fileURLToPath(new URL('./h2-attack.py', import.meta.url));
const DEFAULT_CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const REFERENCE = fileURLToPath(new URL('./node-h2-server.ts', import.meta.url));

/**
 * Whether python3-h2 is there. Under CI=true its absence fails the run (`.ci/run` installs it); elsewhere
 * the attack tests are skipped with a loud message.
 */
export function pythonH2(): boolean {
  const found = spawnSync(PYTHON, ['-c', 'import h2, hpack, hyperframe'], { stdio: 'ignore' }).status === 0;
  if (!found) {
    const message = `${PYTHON} has no python3-h2: apt-get install -y python3-h2 (the HTTP/2 attack tests need it)`;
    if (process.env.CI === 'true') throw new Error(message);
    console.warn(`\n*** SKIPPED: ${message} ***\n`);
  }
  return found;
}

const CONFIG = `
domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - { algorithm: gcra, name: per-ip, limit: 1000000, periodMs: 1000 }
`;

/** The service (or the node:http2 reference), running as a child process. */
export interface Running {
  /** `floodgate` (our transport) or `node:http2` (the reference). */
  name: string;
  child: ChildProcess;
  /** Whether the gRPC port speaks TLS. */
  tls: boolean;
  grpcPort: number;
  httpPort: number;
  /** Its resident set size now, in MB. */
  rssMb(): number;
  /** CPU time it has used, in seconds. */
  cpuSeconds(): number;
  /** Sockets it holds open now (listening ones included), from /proc. */
  sockets(): number;
  /** The value of a Prometheus counter line (0 when absent). */
  metric(line: RegExp): Promise<number>;
  stop(): Promise<void>;
}

/** Starts `floodgate serve` from `cli` (the built one by default) with extra flags. */
export function serve(args: string[] = [], cli = DEFAULT_CLI): Promise<Running> {
  return start('floodgate', args.includes('--grpc-tls-cert'), (config) => [
    cli,
    'serve',
    '-c',
    config,
    '--port',
    '0',
    '--grpc-port',
    '0',
    '--log-level',
    'info',
    ...args,
  ]);
}

/**
 * Starts the reference: a node:http2 server with the same gRPC handler (node-h2-server.ts), over TLS
 * when given a certificate and key.
 */
export function serveReference(tls?: { cert: string; key: string }): Promise<Running> {
  return start('node:http2', tls !== undefined, (config) => [
    '--import',
    'tsx',
    REFERENCE,
    config,
    ...(tls === undefined ? [] : [tls.cert, tls.key]),
  ]);
}

async function start(name: string, tls: boolean, argv: (config: string) => string[]): Promise<Running> {
  const config = join(tmpdir(), `floodgate-h2-${randomBytes(4).toString('hex')}.yaml`);
  writeFileSync(config, CONFIG);
  const child = spawn(process.execPath, argv(config), { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    if (out.length < 1_000_000) out += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const serving = await new Promise<{ http: string; grpc: string }>((resolve, reject) => {
    const deadline = Date.now() + 30_000;
    const poll = setInterval(() => {
      const line = out.split('\n').find((l) => l.includes('"floodgate is serving"'));
      if (line !== undefined) {
        clearInterval(poll);
        resolve(JSON.parse(line) as { http: string; grpc: string });
      } else if (child.exitCode !== null || Date.now() > deadline) {
        clearInterval(poll);
        // Not left running behind the test.
        child.kill('SIGKILL');
        reject(new Error(`floodgate did not start: ${err}`));
      }
    }, 20);
  });
  const port = (address: string) => Number(address.split(':').pop());
  const httpPort = port(serving.http);
  return {
    name,
    child,
    tls,
    grpcPort: port(serving.grpc),
    httpPort,
    rssMb: () => {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
    },
    cpuSeconds: () => {
      const fields = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      // utime and stime, in clock ticks (100 a second on Linux).
      return (Number(fields[11]) + Number(fields[12])) / 100;
    },
    sockets: () => {
      let count = 0;
      for (const fd of readdirSync(`/proc/${child.pid}/fd`)) {
        try {
          if (readlinkSync(`/proc/${child.pid}/fd/${fd}`).startsWith('socket:')) count++;
        } catch {
          // Closed while listed.
        }
      }
      return count;
    },
    metric: async (line) => {
      const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text();
      return Number(line.exec(text)?.[1] ?? 0);
    },
    stop: async () => {
      rmSync(config, { force: true });
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Runs one attack of h2-attack.py against `port`; resolves to what it printed. */
export function attack<T = Record<string, unknown>>(
  mode: string,
  port: number,
  ...args: Array<string | number>
): Promise<T> {
  return attackWhenReady<T>(undefined, mode, port, ...args);
}

/**
 * {@link attack}, calling `onReady` once the attacker says its connections are all open (READY on
 * stderr), for attacks that hold connections while something else is measured.
 */
export function attackWhenReady<T = Record<string, unknown>>(
  onReady: (() => void) | undefined,
  mode: string,
  port: number,
  ...args: Array<string | number>
): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [ATTACK, mode, String(port), ...args.map(String)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
      if (onReady !== undefined && err.includes('READY\n')) {
        const ready = onReady;
        onReady = undefined;
        ready();
      }
    });
    child.on('exit', (code) => {
      if (code === 0) resolve(JSON.parse(out) as T);
      else reject(new Error(`h2-attack.py ${mode} exited ${code}: ${err}`));
    });
  });
}

// RateLimitRequest { domain: "api", descriptors: [{ entries: [{ key: "remote_address", value }] }] }.
export function rateLimitRequest(value: string): Buffer {
  const entry = Buffer.concat([
    Buffer.from([0x0a, 14]),
    Buffer.from('remote_address'),
    Buffer.from([0x12, value.length]),
    Buffer.from(value),
  ]);
  const descriptor = Buffer.concat([Buffer.from([0x0a, entry.length]), entry]);
  const message = Buffer.concat([
    Buffer.from([0x0a, 3]),
    Buffer.from('api'),
    Buffer.from([0x12, descriptor.length]),
    descriptor,
  ]);
  const framed = Buffer.alloc(5 + message.length);
  framed.writeUInt32BE(message.length, 1);
  message.copy(framed, 5);
  return framed;
}

/** One normal gRPC call; resolves to its latency in ms, or rejects. */
export function call(session: ClientHttp2Session, body: Buffer): Promise<number> {
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    let status: string | undefined;
    stream.on('trailers', (trailers) => {
      status = trailers['grpc-status'] as string | undefined;
    });
    stream.on('error', reject);
    stream.resume();
    stream.on('close', () =>
      status === '0' ? resolve(performance.now() - start) : reject(new Error(`grpc-status ${status}`)),
    );
    stream.end(body);
  });
}

/** A normal client's connection to the gRPC port (from 127.0.0.1, the address it connects to). */
export function open(running: Running): ClientHttp2Session {
  return running.tls
    ? connect(`https://127.0.0.1:${running.grpcPort}`, { rejectUnauthorized: false })
    : connect(`http://127.0.0.1:${running.grpcPort}`);
}

/**
 * New normal clients: `count` connections opened one after the other, one call each; resolves to how
 * many failed (refused, reset or not answered within `timeoutMs`).
 */
export async function newClients(running: Running, count: number, timeoutMs = 5000): Promise<number> {
  let failed = 0;
  for (let i = 0; i < count; i++) {
    const session = open(running);
    session.on('error', () => {});
    const timer = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('timeout')), timeoutMs).unref());
    try {
      await Promise.race([call(session, rateLimitRequest(`new-${i}`)), timer]);
    } catch {
      failed++;
    } finally {
      session.destroy();
    }
  }
  return failed;
}

/** What normal calls and the service's memory did while something ran. */
export interface Measured<T> {
  result: T;
  /** RSS before, and the most during, in MB. */
  rssBeforeMb: number;
  rssMaxMb: number;
  /** CPU time the service used meanwhile, in seconds, and how long it took, in seconds. */
  cpuSeconds: number;
  seconds: number;
  /** Normal calls made, failed, and their p99 latency in ms. */
  calls: number;
  failed: number;
  p99Ms: number;
}

/**
 * Runs `work` (an attack) while making normal gRPC calls at `callsPerSecond` on a connection of their
 * own (opened before the attack, as a proxy's would be), and sampling the service's RSS every 50 ms.
 */
export async function measure<T>(running: Running, work: () => Promise<T>, callsPerSecond = 100): Promise<Measured<T>> {
  const session = open(running);
  session.on('error', () => {});
  const latencies: number[] = [];
  let failed = 0;
  let n = 0;
  // A first call, so that the connection is up before the attack.
  await call(session, rateLimitRequest('warm'));
  const rssBeforeMb = running.rssMb();
  const cpuBefore = running.cpuSeconds();
  const started = performance.now();
  let rssMaxMb = rssBeforeMb;
  const sampler = setInterval(() => {
    try {
      rssMaxMb = Math.max(rssMaxMb, running.rssMb());
    } catch {
      // The process is gone: the test sees it elsewhere.
    }
  }, 50);
  const pending: Promise<void>[] = [];
  const caller = setInterval(() => {
    pending.push(
      call(session, rateLimitRequest(`10.0.${(n >> 8) & 255}.${n++ & 255}`)).then(
        (ms) => {
          latencies.push(ms);
        },
        () => {
          failed++;
        },
      ),
    );
  }, 1000 / callsPerSecond);
  try {
    const result = await work();
    return await finish(result);
  } finally {
    clearInterval(caller);
    clearInterval(sampler);
    session.destroy();
  }

  async function finish(result: T): Promise<Measured<T>> {
    clearInterval(caller);
    await Promise.all(pending);
    clearInterval(sampler);
    latencies.sort((a, b) => a - b);
    const p99Ms =
      latencies.length === 0
        ? Number.NaN
        : (latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))] as number);
    const cpuSeconds = running.cpuSeconds() - cpuBefore;
    const seconds = (performance.now() - started) / 1000;
    return { result, rssBeforeMb, rssMaxMb, cpuSeconds, seconds, calls: latencies.length + failed, failed, p99Ms };
  }
}
