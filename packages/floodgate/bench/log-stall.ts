// One client's calls on a full countDenied sliding log against everyone else's calls on Redis.
//
//   npm run build && node --import tsx packages/floodgate/bench/log-stall.ts
//
// The attacker's key holds `slidingLog({ limit: 1000, windowMs: 3_600_000, countDenied: true })` filled
// with 1,000 events (the largest log a policy allows: each denied attempt reads, sums, logs and writes back
// 1,001 entries). Victims: BENCH_VICTIMS closed loops, each on a key of its own under
// `gcra({ limit: 1_000_000, periodMs: 1000 })` (always admitted), one call then a pause of BENCH_PAUSE_MS.
// Reported: the victims' call latencies (p50, p99, max) alone, then while BENCH_ATTACKERS closed loops
// call the full log without pause, for BENCH_MS each; the attacker's decisions per second; and the Lua
// time per script call (INFO commandstats: during a script Redis serves nobody else) and the longest script
// call (SLOWLOG, which keeps those over 1 ms).
//
// Two ways the attacker reaches Redis:
// - shared: the attacker's calls go through the victims' store (one client), as every caller of one
//   `floodgate serve` or one app server does;
// - apart: the attacker has a store and a connection of its own (another process of the fleet).
//
// Redis runs on a server of the benchmark's own (a spare port). Decisions on Redis time.
import { createLimiter, gcra, isFloodgateError, type Limiter, type Store, slidingLog } from 'floodgate';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { HOST, startRedisServer } from './redis-server.js';

const MS = Number(process.env.BENCH_MS ?? 4000);
const VICTIMS = Number(process.env.BENCH_VICTIMS ?? 20);
const PAUSE_MS = Number(process.env.BENCH_PAUSE_MS ?? 5);
const ATTACKERS = Number(process.env.BENCH_ATTACKERS ?? 1000);
const MODES = (process.env.BENCH_MODES ?? 'shared,apart').split(',');

const full = slidingLog({ limit: 1000, windowMs: 3_600_000, countDenied: true, name: 'log' });
const open = gcra({ limit: 1_000_000, periodMs: 1000, name: 'open' });

interface Latencies {
  p50: number;
  p99: number;
  max: number;
  calls: number;
}

function summarize(ms: number[]): Latencies {
  const sorted = ms.sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] ?? Number.NaN, calls: sorted.length };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Victims' loops until `until`: each call's latency in ms, a call that failed (the limiter's 1,000 ms
 * timeout) counted at the time it failed after.
 */
async function victims(limiter: Limiter, until: number): Promise<{ latencies: number[]; failed: number }> {
  const latencies: number[] = [];
  let failed = 0;
  await Promise.all(
    Array.from({ length: VICTIMS }, async (_, v) => {
      while (performance.now() < until) {
        const t = performance.now();
        try {
          if (!(await limiter.limit(`victim-${v}`)).allowed) throw new Error('a victim was denied');
        } catch (error) {
          if (!isFloodgateError(error)) throw error;
          failed++;
        }
        latencies.push(performance.now() - t);
        await sleep(PAUSE_MS);
      }
    }),
  );
  return { latencies, failed };
}

/** Attacker loops on the full log until `until`: the decisions made, and the calls that failed (timeouts). */
async function attack(limiter: Limiter, until: number): Promise<{ calls: number; failed: number }> {
  let calls = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: ATTACKERS }, async () => {
      while (performance.now() < until) {
        try {
          if ((await limiter.limit('mallory')).allowed) throw new Error('the full log admitted a call');
          calls++;
        } catch (error) {
          if (!isFloodgateError(error)) throw error;
          failed++;
          // A call that fails at once must not spin this process's event loop (the victims run in it).
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
    }),
  );
  return { calls, failed };
}

function line(label: string, { latencies, failed }: { latencies: number[]; failed: number }): string {
  const l = summarize(latencies);
  return `${label}: victims p50 ${l.p50.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms, max ${l.max.toFixed(1)} ms (${l.calls} calls, ${failed} failed)`;
}

async function luaStats(client: Redis): Promise<string> {
  const stats = await client.info('commandstats');
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
  const slow = (await client.call('SLOWLOG', 'GET', '100000')) as [number, number, number][];
  const longest = slow.reduce((most, entry) => Math.max(most, Number(entry[2])), 0);
  return m
    ? `${m[1]} script calls, ${(Number(m[3]) / 1000).toFixed(2)} ms of Lua each on average, longest ${(longest / 1000).toFixed(1)} ms`
    : '?';
}

async function main(): Promise<void> {
  const server = await startRedisServer(6500, 6600);
  const victimClient = new Redis({ host: HOST, port: server.port });
  const attackClient = new Redis({ host: HOST, port: server.port });
  try {
    await victimClient.config('SET', 'slowlog-log-slower-than', '1000');
    await victimClient.config('SET', 'slowlog-max-len', '100000');
    const victimStore = redisStore({ client: fromIoredis(victimClient) });
    const victimLimiter = createLimiter({ store: victimStore, policies: [open] });
    console.log(
      `victims: ${VICTIMS} loops, pause ${PAUSE_MS} ms; attacker: ${ATTACKERS} loops on slidingLog({ limit: 1000, countDenied: true }) full; ${MS} ms per phase`,
    );
    await victimLimiter.limit('warm-up');
    console.log(line('alone                 ', await victims(victimLimiter, performance.now() + MS)));
    for (const mode of MODES) {
      const attackStore: Store = mode === 'shared' ? victimStore : redisStore({ client: fromIoredis(attackClient) });
      // Its calls queue behind each other (Redis decides about a thousand a second on such a log): a long
      // timeout keeps them all at the store, the most work an attacker can make it do.
      const attacker = createLimiter({ store: attackStore, policies: [full], timeoutMs: 60_000 });
      await attacker.reset('mallory');
      for (let i = 0; i < 1000; i++) await attacker.limit('mallory');
      if ((await attacker.limit('mallory')).allowed) throw new Error('the log is not full');
      await victimClient.config('RESETSTAT');
      await victimClient.call('SLOWLOG', 'RESET');
      const until = performance.now() + MS;
      const [hit, { calls, failed }] = await Promise.all([victims(victimLimiter, until), attack(attacker, until)]);
      console.log(
        `${line(`attacked (${mode.padEnd(6)})     `, hit)}; attacker ${(calls / (MS / 1000)).toFixed(0)} decisions/s (${failed} calls failed); ${await luaStats(victimClient)}`,
      );
    }
  } finally {
    victimClient.disconnect();
    attackClient.disconnect();
    await server.stop();
  }
}

await main();
