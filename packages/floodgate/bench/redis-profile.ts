// Instructions redis-server spends per decision, counted by callgrind (deterministic, whatever the load):
//
//   node --import tsx packages/floodgate/bench/redis-profile.ts [floodgate|rate-limiter-flexible|minimal|set] [decisions]
//
// Starts its own redis-server under `valgrind --tool=callgrind` on a spare port, warms it up with the real
// client (IN_FLIGHT closed loops of decisions over 100k keys, as bench:redis runs them), zeroes the
// counters, runs `decisions` more, dumps, and prints instructions per decision, script calls and calls per
// script call, and where the instructions went (callgrind_annotate, inclusive, top functions). `set` is
// the floor: `SET key value PX ttl`, pipelined, same keys. ALGORITHM (gcra, fixed-window, sliding-window,
// token-interval)
// picks floodgate's policy; IN_FLIGHT=1 counts a call alone.
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createLimiter, fixedWindow, gcra, slidingWindow, tokenBucket } from 'floodgate';
import { fromIoredis, type RedisScriptClient, redisStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { MINIMAL_GCRA } from './redis-server.js';

const run = promisify(execFile);
const who = process.argv[2] ?? 'floodgate';
const DECISIONS = Number(process.argv[3] ?? 40_000);
const IN_FLIGHT = Number(process.env.IN_FLIGHT ?? 1000);
const PORT = Number(process.env.PROFILE_PORT ?? 7301);
const DISTINCT = Number(process.env.KEYS ?? 100_000);
/** 1000 ms as in bench:redis; a longer period keeps states alive under callgrind's slowdown (overwrites). */
const PERIOD_MS = Number(process.env.PERIOD_MS ?? 1000);
const LIMIT = Number(process.env.LIMIT ?? 100);
/** SEQUENTIAL=1: keys in turn instead of bench:redis's pseudo-random sequence (no key twice in a batch). */
const SEQUENTIAL = process.env.SEQUENTIAL === '1';
const ALGORITHM = process.env.ALGORITHM ?? 'gcra';
const ALGORITHMS = ['gcra', 'fixed-window', 'sliding-window', 'token-interval'];
if (!ALGORITHMS.includes(ALGORITHM)) {
  throw new Error(`ALGORITHM must be one of ${ALGORITHMS.join(', ')}, got ${JSON.stringify(ALGORITHM)}`);
}

const dir = await mkdtemp(join(tmpdir(), 'floodgate-callgrind-'));
const server = spawn(
  'valgrind',
  [
    '--tool=callgrind',
    `--callgrind-out-file=${dir}/cg.%p`,
    'redis-server',
    '--port',
    String(PORT),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
  ],
  { stdio: 'ignore' },
);
for (;;) {
  const pong = await run('redis-cli', ['-p', String(PORT), 'ping']).catch(() => ({ stdout: '' }));
  if (pong.stdout.trim() === 'PONG') break;
  await new Promise((resolve) => setTimeout(resolve, 300));
}
const admin = new Redis({ port: PORT, retryStrategy: () => null });

let scriptCalls = 0;
let failed = 0;
let decide: (key: string) => Promise<unknown>;
const client = new Redis({ port: PORT, retryStrategy: () => null });
if (who === 'floodgate') {
  const base = fromIoredis(client);
  const counted: RedisScriptClient = {
    cluster: false,
    evalsha: (sha, keys, args) => {
      scriptCalls++;
      return base.evalsha(sha, keys, args);
    },
    eval: base.eval,
  };
  const limiter = createLimiter({
    store: redisStore({ client: counted }),
    policies: [
      ALGORITHM === 'gcra'
        ? gcra({ limit: LIMIT, periodMs: PERIOD_MS })
        : ALGORITHM === 'fixed-window'
          ? fixedWindow({ limit: LIMIT, windowMs: PERIOD_MS })
          : ALGORITHM === 'sliding-window'
            ? slidingWindow({ limit: LIMIT, windowMs: PERIOD_MS })
            : tokenBucket({ capacity: LIMIT, refillAmount: LIMIT, refillIntervalMs: PERIOD_MS, refill: 'interval' }),
    ],
    prefix: 'bench',
  });
  decide = (key) => limiter.limit(key);
} else if (who === 'minimal') {
  const sha = (await admin.script('LOAD', MINIMAL_GCRA)) as string;
  const t = String((PERIOD_MS * 1000) / LIMIT);
  const tau = String(PERIOD_MS * 1000);
  decide = (key) => client.evalsha(sha, 1, `raw:{${key}}`, t, tau);
} else if (who === 'rate-limiter-flexible') {
  const rlf = new RateLimiterRedis({ storeClient: client, points: LIMIT, duration: PERIOD_MS / 1000 });
  decide = (key) => rlf.consume(key).catch((denied: unknown) => denied);
} else {
  decide = (key) => client.set(key, '1893456000000000', 'PX', 10);
}

async function drive(count: number): Promise<void> {
  let left = count;
  let seed = 1;
  const loop = async () => {
    while (left > 0) {
      left--;
      seed = SEQUENTIAL ? seed + 1 : (seed * 1103515245 + 12345) % 2147483648;
      await decide(`user-${seed % DISTINCT}`).catch((error: unknown) => {
        if (failed++ === 0) console.log(String(error));
      });
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop));
}

await drive(DECISIONS / 2);
console.log('warmed up');
await run('callgrind_control', ['-z', String(server.pid)]);
await admin.config('RESETSTAT');
const before = scriptCalls;
await drive(DECISIONS);
const calls = scriptCalls - before;
await run('callgrind_control', ['-d', String(server.pid)]);
let files: string[] = [];
while (files.length === 0) {
  files = (await readdir(dir)).filter((f) => /^cg\.\d+\.1$/.test(f));
  await new Promise((resolve) => setTimeout(resolve, 200));
}
const dump = join(dir, files[0] as string);
const annotate = (await run('callgrind_annotate', ['--inclusive=yes', dump], { maxBuffer: 1 << 26 })).stdout;
const total = Number(/([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS/.exec(annotate)?.[1]?.replaceAll(',', ''));
const stats = await admin.info('stats');
const commands = await admin.info('commandstats');
console.log(
  `${who}${who === 'floodgate' ? ` ${ALGORITHM}` : ''}: ${DECISIONS} decisions, ${IN_FLIGHT} in flight, ${DISTINCT} keys, period ${PERIOD_MS} ms`,
);
console.log(
  `  keyspace hits ${/keyspace_hits:(\d+)/.exec(stats)?.[1]}, misses ${/keyspace_misses:(\d+)/.exec(stats)?.[1]}, expired ${/expired_keys:(\d+)/.exec(stats)?.[1]} (measured part), SET calls ${/cmdstat_set:calls=(\d+)/.exec(commands)?.[1] ?? 0}`,
);
console.log(`  instructions per decision: ${Math.round(total / DECISIONS)}`);
if (who === 'floodgate')
  console.log(`  script calls: ${calls}, calls per script call ${(DECISIONS / calls).toFixed(1)}`);
if (failed > 0) console.log(`  failed calls: ${failed}`);
console.log(`  dump: ${dump}`);
console.log(
  annotate
    .split('\n')
    .filter((line) => /^\s*[\d,]+ \(/.test(line))
    .slice(0, Number(process.env.TOP ?? 45))
    .join('\n'),
);
client.disconnect();
await admin.shutdown('NOSAVE').catch(() => undefined);
admin.disconnect();
await new Promise((resolve) => server.once('exit', resolve));
process.exit(0);
