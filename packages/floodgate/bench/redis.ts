// Redis: floodgate against the per-call ceiling and against rate-limiter-flexible, in one run.
//
//   npm run bench:redis      (builds, starts its own redis-server on a spare port, runs this file)
//
// 1. Ceiling: redis-benchmark running EVALSHA of a minimal GCRA script, pipelined (what Redis itself
//    can do one script call per decision).
// 2. Throughput from one Node process with 1000 decisions in flight (1000 closed loops over 100k keys):
//    floodgate's GCRA, rate-limiter-flexible's RateLimiterRedis and floodgate's fixed window (the peer's
//    algorithm: the same work), on the same ioredis client kind.
// 3. Sequential latency (one call at a time): p50 / p99 of a raw EVALSHA of the minimal script,
//    floodgate, rate-limiter-flexible and floodgate's fixed window (the peer's algorithm: the same work),
//    in blocks of 250 calls taken in turn.
// 4. Memory per key: INFO memory delta over 100k keys, per algorithm, rate-limiter-flexible, and a bare
//    `SET <floodgate's key> <integer> PX <ttl>` (the floor).
// 5. The fleet: 4 client processes at once against one redis-server (redis-fleet.ts), floodgate and
//    rate-limiter-flexible alternately: decisions per second, server CPU per decision, server busy time.
//    Two rows each. Real clients: 4 Node processes running ioredis and the library; on this 2-core machine
//    they use more CPU than the server and are the bound (the server is busy well under 100 %), so their
//    decisions per second understate what one Redis serves. Replayed (redis-replay.ts): the exact bytes
//    each real client wrote in its first round (its EVALSHA commands, batches as they were), sent again
//    by 4 processes that only frame replies, pipelined, at most 250 decisions outstanding each, looping:
//    the server runs the same scripts on the same arguments, decided on its own clock, and is the bound.
//    Their decisions per second are what one redis-server serves such a fleet, for each library in the
//    same run; the CPU per decision shows it whether or not the server was saturated ("one core: at
//    most" = 1 s / that CPU). A saturated server reads more commands per read than a lightly loaded one,
//    so the replayed CPU per decision is a little below the real clients'.
//
// What the server spends inside a decision: bench/redis-profile.ts counts it under callgrind.
//
// Environment: BENCH_MS (duration of one throughput round, default 2000), BENCH_ROUNDS (default 4; the
// contenders alternate, the best round of each is kept), BENCH_KEYS (keys for the memory figures,
// default 100000).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from 'floodgate';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { encodeKey, storageKey } from 'floodgate/store';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { type FleetRound, fleetRound } from './redis-fleet.js';
import { recordingsDir, replayRound } from './redis-replay.js';
import { HOST, MINIMAL_GCRA, startRedisServer } from './redis-server.js';

const run = promisify(execFile);
const ROUND_MS = Number(process.env.BENCH_MS ?? 2000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const MEMORY_KEYS = Number(process.env.BENCH_KEYS ?? 100_000);
const IN_FLIGHT = 1000;
const DISTINCT = 100_000;
const SEQUENTIAL = 5000;
const LIMIT = 100;
const PERIOD_MS = 1000;
/** Client processes in the fleet row. */
const FLEET = Number(process.env.BENCH_FLEET ?? 4);

const T_US = String((PERIOD_MS * 1000) / LIMIT);
const TAU_US = String(PERIOD_MS * 1000);

type Decide = (key: string) => Promise<unknown>;

/** CPU seconds the Redis server has used so far (user + system). */
async function redisCpu(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  return Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
}

interface Round {
  rate: number;
  /** CPU µs per decision, this process and the Redis server: what a decision costs whatever the load. */
  nodeUs: number;
  redisUs: number;
}

/** Decisions per second with IN_FLIGHT closed loops, each awaiting its previous call. */
async function throughput(decide: Decide, admin: Redis): Promise<Round> {
  let done = 0;
  let stop = false;
  let seed = 1;
  const loop = async () => {
    while (!stop) {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      await decide(`user-${seed % DISTINCT}`);
      done++;
    }
  };
  const loops = Array.from({ length: IN_FLIGHT }, loop);
  await new Promise((resolve) => setTimeout(resolve, 300));
  const start = performance.now();
  const before = done;
  const cpu = process.cpuUsage();
  const redisBefore = await redisCpu(admin);
  await new Promise((resolve) => setTimeout(resolve, ROUND_MS));
  const decided = done - before;
  const rate = (decided * 1000) / (performance.now() - start);
  const used = process.cpuUsage(cpu);
  const redisUs = ((await redisCpu(admin)) - redisBefore) * 1e6;
  stop = true;
  await Promise.all(loops);
  return { rate, nodeUs: (used.user + used.system) / decided, redisUs: redisUs / decided };
}

interface Latency {
  p50: number;
  p99: number;
}

/** Calls of one contender in a row, between the others' (`latencies`). */
const SEQUENTIAL_BLOCK = 250;

/**
 * p50 and p99 of one call at a time, µs, for each contender: SEQUENTIAL calls each, in blocks of
 * SEQUENTIAL_BLOCK taken in turn, the order rotating each turn (A B C, B C A, C A B, …), so that a quieter
 * or busier spell of the machine falls on every contender alike.
 */
async function latencies(decides: Decide[]): Promise<Latency[]> {
  for (const decide of decides) for (let i = 0; i < 500; i++) await decide(`warm-${i % 100}`);
  const samples = decides.map(() => new Float64Array(SEQUENTIAL));
  for (let done = 0, turn = 0; done < SEQUENTIAL; done += SEQUENTIAL_BLOCK, turn++) {
    for (let j = 0; j < decides.length; j++) {
      const who = (j + turn) % decides.length;
      const decide = decides[who] as Decide;
      const own = samples[who] as Float64Array;
      for (let i = done; i < Math.min(done + SEQUENTIAL_BLOCK, SEQUENTIAL); i++) {
        const key = `seq-${i % DISTINCT}`;
        const start = process.hrtime.bigint();
        await decide(key);
        own[i] = Number(process.hrtime.bigint() - start) / 1000;
      }
    }
  }
  return samples.map((own) => {
    own.sort();
    return { p50: own[Math.floor(SEQUENTIAL * 0.5)] as number, p99: own[Math.floor(SEQUENTIAL * 0.99)] as number };
  });
}

async function usedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)?.[1]);
}

/** Bytes per key after `fill` writes MEMORY_KEYS keys into an empty database. */
async function memoryPerKey(redis: Redis, fill: (i: number) => Promise<unknown>): Promise<number> {
  await redis.flushall();
  const before = await usedMemory(redis);
  for (let i = 0; i < MEMORY_KEYS; i += IN_FLIGHT) {
    const batch: Promise<unknown>[] = [];
    for (let j = i; j < Math.min(i + IN_FLIGHT, MEMORY_KEYS); j++) batch.push(fill(j));
    await Promise.all(batch);
  }
  const keys = await redis.dbsize();
  if (keys !== MEMORY_KEYS) throw new Error(`expected ${MEMORY_KEYS} keys, found ${keys}`);
  const bytes = ((await usedMemory(redis)) - before) / MEMORY_KEYS;
  await redis.flushall();
  return bytes;
}

function ceilingFromRedisBenchmark(output: string): number {
  const match = /([\d.]+) requests per second/.exec(output);
  if (match === null) throw new Error(`unexpected redis-benchmark output: ${output}`);
  return Number(match[1]);
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

async function main(): Promise<void> {
  const server = await startRedisServer(7050, 7100);
  const port = server.port;
  console.log(
    `redis-server ${(await run('redis-server', ['--version'])).stdout.trim().split(' ')[2]} on ${HOST}:${port}`,
  );
  const redis = new Redis({ host: HOST, port });
  try {
    const sha = (await redis.script('LOAD', MINIMAL_GCRA)) as string;

    // 1. The ceiling: pipelined EVALSHA of the minimal script, straight from redis-benchmark.
    const bench = await run('redis-benchmark', [
      '-h',
      HOST,
      '-p',
      String(port),
      '-n',
      '400000',
      '-c',
      '50',
      '-P',
      '32',
      '-r',
      String(DISTINCT),
      '-q',
      'EVALSHA',
      sha,
      '1',
      'ceil:{__rand_int__}',
      T_US,
      TAU_US,
    ]);
    const ceiling = ceilingFromRedisBenchmark(bench.stdout);
    await redis.flushall();

    // 2. Throughput, 1000 in flight from this process.
    const storeClient = new Redis({ host: HOST, port });
    const store = redisStore({ client: fromIoredis(storeClient) });
    const floodgate = createLimiter({
      store,
      policies: [gcra({ limit: LIMIT, periodMs: PERIOD_MS })],
      prefix: 'bench',
    });
    const floodgateDecide: Decide = (key) => floodgate.limit(key);
    const rlfClient = new Redis({ host: HOST, port });
    const rlf = new RateLimiterRedis({ storeClient: rlfClient, points: LIMIT, duration: PERIOD_MS / 1000 });
    const rlfDecide: Decide = (key) => rlf.consume(key).catch((denied: unknown) => denied);
    const rawClient = new Redis({ host: HOST, port });
    const rawDecide: Decide = (key) => rawClient.evalsha(sha, 1, `raw:{${key}}`, T_US, TAU_US);
    // The peer's algorithm: a fixed window of LIMIT per PERIOD_MS, for the same work one call at a time.
    const windowed = createLimiter({
      store,
      policies: [fixedWindow({ limit: LIMIT, windowMs: PERIOD_MS })],
      prefix: 'bench-window',
    });
    const windowDecide: Decide = (key) => windowed.limit(key);

    let floodgateBest: Round = { rate: 0, nodeUs: 0, redisUs: 0 };
    let rlfBest: Round = { rate: 0, nodeUs: 0, redisUs: 0 };
    let windowBest: Round = { rate: 0, nodeUs: 0, redisUs: 0 };
    const rounds: string[] = [];
    const decides = { floodgate: floodgateDecide, rlf: rlfDecide, window: windowDecide };
    for (let round = 0; round < ROUNDS; round++) {
      // Rotate who goes first: the machine's load drifts.
      const all = ['floodgate', 'rlf', 'window'] as const;
      const order = all.map((_, i) => all[(i + round) % all.length] as (typeof all)[number]);
      for (const who of order) {
        const result = await throughput(decides[who], redis);
        if (who === 'floodgate' && result.rate > floodgateBest.rate) floodgateBest = result;
        if (who === 'rlf' && result.rate > rlfBest.rate) rlfBest = result;
        if (who === 'window' && result.rate > windowBest.rate) windowBest = result;
        rounds.push(`${who} ${fmt(result.rate)}`);
      }
    }
    const floodgateRate = floodgateBest.rate;
    const rlfRate = rlfBest.rate;

    // 3. Sequential latency.
    const [rawLatency, floodgateLatency, rlfLatency, windowLatency] = (await latencies([
      rawDecide,
      floodgateDecide,
      rlfDecide,
      windowDecide,
    ])) as [Latency, Latency, Latency, Latency];

    console.log('\nthroughput, decisions per second');
    console.log(`  ceiling: redis-benchmark EVALSHA minimal GCRA, 50 clients, pipeline 32   ${fmt(ceiling)}`);
    console.log(`  floodgate redisStore GCRA, 1000 in flight, one process                 ${fmt(floodgateRate)}`);
    console.log(`  rate-limiter-flexible RateLimiterRedis, 1000 in flight, one process     ${fmt(rlfRate)}`);
    console.log(`  (rounds: ${rounds.join(', ')}; best of each kept)`);
    console.log(
      `  CPU per decision in the best round, µs (this process + redis-server): floodgate ${floodgateBest.nodeUs.toFixed(1)} + ${floodgateBest.redisUs.toFixed(2)} (redis-server target ≤ 2.5), rate-limiter-flexible ${rlfBest.nodeUs.toFixed(1)} + ${rlfBest.redisUs.toFixed(2)}`,
    );
    console.log(
      `  floodgate redisStore fixed window, 1000 in flight: ${fmt(windowBest.rate)}, CPU per decision ${windowBest.nodeUs.toFixed(1)} + ${windowBest.redisUs.toFixed(2)} µs`,
    );
    console.log(`  floodgate / rate-limiter-flexible: ${(floodgateRate / rlfRate).toFixed(2)}×`);
    console.log(
      `  same work, 1000 in flight, floodgate fixed window / rate-limiter-flexible: ${(windowBest.rate / rlfRate).toFixed(2)}× decisions/s, ${(rlfBest.redisUs / windowBest.redisUs).toFixed(2)}× less redis-server CPU per decision`,
    );
    console.log(`  floodgate / per-call EVALSHA ceiling: ${(floodgateRate / ceiling).toFixed(2)}×`);
    console.log(`  rate-limiter-flexible / ceiling: ${(rlfRate / ceiling).toFixed(2)}×`);

    console.log('\nsequential latency, one call at a time, µs (p50 / p99)');
    console.log(
      `  raw EVALSHA, minimal GCRA (ioredis)       ${rawLatency.p50.toFixed(0)} / ${rawLatency.p99.toFixed(0)}`,
    );
    console.log(
      `  floodgate redisStore GCRA                 ${floodgateLatency.p50.toFixed(0)} / ${floodgateLatency.p99.toFixed(0)}`,
    );
    console.log(
      `  rate-limiter-flexible RateLimiterRedis    ${rlfLatency.p50.toFixed(0)} / ${rlfLatency.p99.toFixed(0)}`,
    );
    console.log(
      `  floodgate redisStore fixed window         ${windowLatency.p50.toFixed(0)} / ${windowLatency.p99.toFixed(0)}`,
    );
    console.log(`  floodgate p50 / raw EVALSHA p50: ${(floodgateLatency.p50 / rawLatency.p50).toFixed(2)}×`);
    console.log(`  floodgate p50 / rate-limiter-flexible p50: ${(floodgateLatency.p50 / rlfLatency.p50).toFixed(2)}×`);
    console.log(
      `  same work, sequential p50, floodgate fixed window / rate-limiter-flexible: ${(windowLatency.p50 / rlfLatency.p50).toFixed(2)}×`,
    );

    // 4. Memory per key.
    console.log(`\nRedis memory per key, bytes (INFO memory used_memory delta over ${fmt(MEMORY_KEYS)} keys)`);
    const floor = await memoryPerKey(redis, (i) =>
      redis.set(
        storageKey('bench', encodeKey(`user-${i}`), gcraPolicy.name),
        String(1_893_456_000_000_000 + i),
        'PX',
        HOUR_MS,
      ),
    );
    console.log(`  floor: SET <the same key> <integer> PX 3600000                 ${floor.toFixed(1)}`);
    // Every algorithm under the same policy name, so its keys are exactly the floor's keys.
    for (const [label, policy] of MEMORY_POLICIES) {
      const limiter = createLimiter({ store, policies: [policy], prefix: 'bench' });
      const bytes = await memoryPerKey(redis, (i) => limiter.limit(`user-${i}`));
      console.log(`  floodgate ${label.padEnd(46)} ${bytes.toFixed(1)}  (${(bytes / floor).toFixed(2)}× floor)`);
    }
    const rlfHour = new RateLimiterRedis({ storeClient: rlfClient, points: LIMIT, duration: HOUR_MS / 1000 });
    const rlfBytes = await memoryPerKey(redis, (i) => rlfHour.consume(`user-${i}`));
    console.log(
      `  rate-limiter-flexible RateLimiterRedis (key rlflx:<key>)       ${rlfBytes.toFixed(1)}  (${(rlfBytes / floor).toFixed(2)}× floor)`,
    );

    // 5. The fleet.
    const fleetOptions = {
      processes: FLEET,
      inFlight: 250,
      keys: DISTINCT,
      limit: LIMIT,
      periodMs: PERIOD_MS,
      ms: ROUND_MS,
    };
    const contenders = ['floodgate', 'rate-limiter-flexible'] as const;
    type Who = (typeof contenders)[number];
    const empty = (): FleetRound => ({ rate: 0, redisUs: 0, redisBusy: 0 });
    const best: Record<Who, FleetRound> = { floodgate: empty(), 'rate-limiter-flexible': empty() };
    const replayed: Record<Who, FleetRound> = { floodgate: empty(), 'rate-limiter-flexible': empty() };
    const recordings: Record<Who, string[]> = { floodgate: [], 'rate-limiter-flexible': [] };
    const fleetRounds: string[] = [];
    const replayRounds: string[] = [];
    const scratch = await recordingsDir();
    try {
      for (let round = 0; round < Math.max(2, ROUNDS / 2); round++) {
        const order = round % 2 === 0 ? contenders : ([...contenders].reverse() as Who[]);
        for (const who of order) {
          await redis.flushall();
          // The first round of each keeps what its clients sent, for the replayed rows.
          const result = await fleetRound(redis, port, who, fleetOptions, round < 2 ? scratch.dir : undefined);
          if (result.recordings.length > 0 && recordings[who].length === 0) recordings[who] = result.recordings;
          if (result.rate > best[who].rate) best[who] = result;
          fleetRounds.push(`${who} ${fmt(result.rate)}`);
        }
      }
      for (let round = 0; round < Math.max(2, ROUNDS / 2); round++) {
        const order = round % 2 === 0 ? contenders : ([...contenders].reverse() as Who[]);
        for (const who of order) {
          await redis.flushall();
          const result = await replayRound(redis, port, recordings[who], fleetOptions.inFlight, ROUND_MS);
          if (result.errors > 0) throw new Error(`${who}: ${result.errors} error replies while replaying`);
          if (result.rate > replayed[who].rate) replayed[who] = result;
          replayRounds.push(`${who} ${fmt(result.rate)}`);
        }
      }
    } finally {
      await scratch.remove();
    }
    const row = (who: Who, r: FleetRound) =>
      `    ${who.padEnd(24)} ${fmt(r.rate).padStart(9)} decisions/s   redis-server ${r.redisUs.toFixed(2)} µs CPU per decision, busy ${(r.redisBusy * 100).toFixed(0)} %   (one core: at most ${fmt(1e6 / r.redisUs)}/s)`;
    console.log(
      `\nthe fleet: ${FLEET} client processes × 250 in flight against one redis-server, GCRA over ${fmt(DISTINCT)} keys`,
    );
    console.log('  real clients (ioredis and the library, one Node process each):');
    for (const who of contenders) console.log(row(who, best[who]));
    console.log(`    (rounds: ${fleetRounds.join(', ')}; best of each kept)`);
    console.log(
      `  replayed: the exact bytes each real client sent in its first round, sent again by ${FLEET} processes that only frame replies, ≤ 250 decisions outstanding each, so that Redis and not the clients is the bound (busy: how near it came):`,
    );
    for (const who of contenders) console.log(row(who, replayed[who]));
    console.log(`    (rounds: ${replayRounds.join(', ')}; best of each kept)`);
    const ratio = (r: Record<Who, FleetRound>) =>
      `${(r.floodgate.rate / r['rate-limiter-flexible'].rate).toFixed(2)}× decisions/s, ${(r['rate-limiter-flexible'].redisUs / r.floodgate.redisUs).toFixed(2)}× less server CPU per decision`;
    console.log(`  floodgate / rate-limiter-flexible, real clients: ${ratio(best)}`);
    console.log(`  floodgate / rate-limiter-flexible, replayed: ${ratio(replayed)}`);

    await store.close();
    await Promise.all([storeClient.quit(), rlfClient.quit(), rawClient.quit()]);
  } finally {
    redis.disconnect();
    await server.stop();
  }
  process.exit(0);
}

// Memory is measured on keys that stay alive while they are counted: rates per hour.
const HOUR_MS = 3_600_000;
const NAME = 'per-hour';
const gcraPolicy = gcra({ limit: LIMIT, periodMs: HOUR_MS, name: NAME });
const MEMORY_POLICIES: [string, Policy][] = [
  ['gcra', gcraPolicy],
  [
    'token bucket, continuous',
    tokenBucket({ capacity: LIMIT, refillAmount: LIMIT, refillIntervalMs: HOUR_MS, name: NAME }),
  ],
  [
    'token bucket, interval',
    tokenBucket({ capacity: LIMIT, refillAmount: LIMIT, refillIntervalMs: HOUR_MS, refill: 'interval', name: NAME }),
  ],
  ['leaky bucket, meter', leakyBucket({ capacity: LIMIT, leakPerSecond: LIMIT / 3600, name: NAME })],
  ['leaky bucket, queue', leakyBucket({ capacity: LIMIT, leakPerSecond: LIMIT / 3600, mode: 'queue', name: NAME })],
  ['fixed window', fixedWindow({ limit: LIMIT, windowMs: HOUR_MS, name: NAME })],
  ['sliding window', slidingWindow({ limit: LIMIT, windowMs: HOUR_MS, name: NAME })],
  ['sliding log, one event', slidingLog({ limit: LIMIT, windowMs: HOUR_MS, name: NAME })],
];

await main();
