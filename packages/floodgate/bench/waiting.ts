// What waiting costs when nobody has to wait: calls per second through `limit`, `acquire`, `throttle`
// and the smooth limiter on a rate high enough that every call is admitted at once, against the `limiter`
// package's RateLimiter (`removeTokens`), in one process on one key.
//
//   npm run bench:waiting
//
// The numbers are the bookkeeping of each path (validation, the per-key queue, promises), not sleeping.
import { createLimiter, gcra, memoryStore, throttle } from 'floodgate';
import { smoothLimiter } from 'floodgate/smooth';
import { RateLimiter } from 'limiter';

const ROUND_MS = Number(process.env.BENCH_MS ?? 300);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** One call per µs, with a burst of a million: no round of ROUND_MS ever waits. */
const policies = gcra({ limit: 1_000_000, periodMs: 1000, burst: 1_000_000 });

type Call = () => Promise<unknown>;

function fresh(): ReturnType<typeof createLimiter> {
  return createLimiter({ store: memoryStore(), policies });
}

const contenders: { name: string; make: () => Call }[] = [
  {
    name: 'limiter.limit (memory)',
    make: () => {
      const limiter = fresh();
      return () => limiter.limit('k');
    },
  },
  {
    name: 'limiter.acquire (memory)',
    make: () => {
      const limiter = fresh();
      return () => limiter.acquire('k');
    },
  },
  {
    name: 'limiter.acquire reserve (memory)',
    make: () => {
      const limiter = fresh();
      return () => limiter.acquire('k', { reserve: true });
    },
  },
  {
    name: 'throttle(fn)',
    make: () => {
      const fn = throttle(async () => 1, { limiter: fresh(), maxQueue: Number.POSITIVE_INFINITY });
      return () => fn();
    },
  },
  {
    name: 'smoothLimiter.acquire',
    make: () => {
      const limiter = smoothLimiter({ permitsPerSecond: Number.POSITIVE_INFINITY });
      return () => limiter.acquire();
    },
  },
  {
    name: 'limiter (npm) RateLimiter.removeTokens',
    make: () => {
      const limiter = new RateLimiter({ tokensPerInterval: 1_000_000_000, interval: 'second' });
      return () => limiter.removeTokens(1);
    },
  },
];

/** Calls per second over one round, one call at a time (each awaited, as a job loop does). */
async function round(call: Call): Promise<number> {
  let calls = 0;
  const start = performance.now();
  const end = start + ROUND_MS;
  while (performance.now() < end) {
    for (let i = 0; i < 100; i++) await call();
    calls += 100;
  }
  return (calls * 1000) / (performance.now() - start);
}

async function main(): Promise<void> {
  console.log(
    `floodgate waiting benchmark: node ${process.version}; best of ${ROUNDS} interleaved rounds of ${ROUND_MS} ms\n`,
  );
  const calls = contenders.map((c) => c.make());
  const best = contenders.map(() => 0);
  for (let r = 0; r < ROUNDS; r++) {
    for (const [i, call] of calls.entries()) best[i] = Math.max(best[i] as number, await round(call));
  }
  const width = Math.max(...contenders.map((c) => c.name.length));
  for (const [i, contender] of contenders.entries()) {
    console.log(
      `${contender.name.padEnd(width)}  ${Math.round(best[i] as number)
        .toLocaleString('en-US')
        .padStart(11)} calls/s`,
    );
  }
}

await main();
