// Settle against charge-at-the-end, on one traffic. Parallel callers spend one key's budget with calls
// whose cost is known only at their end: each call has an estimate (1 to 20) and an actual cost (0 to 40),
// and runs 0 to 5 ms, all drawn from a seeded generator, so both ways replay the same calls.
//
// - settle: `limit(key, { cost: estimate, settle: true })`, then `settle(key, decision, { cost: actual })`.
// - charge at the end (Envoy's `apply_on_stream_done`, Gubernator's DRAIN_OVER_LIMIT): a check before the
//   call (denied while the key is in debt), `charge(key, { cost: actual })` after it.
//
// The budget does not refill while a round runs (LIMIT per 30 days), so the actual cost admitted past
// LIMIT is the overshoot. The bound (docs/algorithms.md, "Settling") is the most the calls in flight at
// one moment were underestimated by: actual − estimate for settle, the whole actual cost for charging at
// the end (its estimate is 0). Printed: the worst overshoot of ROUNDS rounds and the bound of that round,
// on the memory store and on a redis-server of the benchmark's own.
//
//   npm run bench:settle
import { createLimiter, gcra, type Limiter, memoryStore, type Store } from 'floodgate';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { seededRandom } from 'floodgate/testing';
import { Redis } from 'ioredis';
import { HOST, startRedisServer } from './redis-server.js';

const CALLERS = 32;
const CALLS = 50;
const LIMIT = 2000;
const PERIOD_MS = 30 * 24 * 3_600_000;
const ROUNDS = 5;

interface Call {
  estimate: number;
  actual: number;
  workMs: number;
}

interface Span {
  under: number;
  actual: number;
  startMs: number;
  endMs: number;
}

type Way = 'settle' | 'end';

/** The traffic of one round: CALLERS lists of CALLS calls, from `seed`. */
function traffic(seed: number): Call[][] {
  const random = seededRandom(seed);
  return Array.from({ length: CALLERS }, () =>
    Array.from({ length: CALLS }, () => ({
      estimate: 1 + Math.floor(random() * 20),
      actual: Math.floor(random() * 41),
      workMs: Math.floor(random() * 6),
    })),
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs one round's traffic one way; returns the admitted calls' spans. */
async function round(limiter: Limiter, key: string, calls: Call[][], way: Way): Promise<Span[]> {
  const spans: Span[] = [];
  await Promise.all(
    calls.map(async (list) => {
      for (const call of list) {
        const startMs = performance.now();
        if (way === 'settle') {
          const decision = await limiter.limit(key, { cost: call.estimate, settle: true });
          if (!decision.allowed) {
            await sleep(1);
            continue;
          }
          await sleep(call.workMs);
          await limiter.settle(key, decision, { cost: call.actual });
          spans.push({
            under: Math.max(0, call.actual - call.estimate),
            actual: call.actual,
            startMs,
            endMs: performance.now(),
          });
        } else {
          if (!(await limiter.check(key, { cost: 0 })).allowed) {
            await sleep(1);
            continue;
          }
          await sleep(call.workMs);
          await limiter.charge(key, { cost: call.actual });
          spans.push({ under: call.actual, actual: call.actual, startMs, endMs: performance.now() });
        }
      }
    }),
  );
  return spans;
}

/** The largest sum of underestimates over spans that hold one moment (touching spans overlap). */
function worstInFlight(spans: readonly Span[]): number {
  const events: [number, number][] = [];
  for (const s of spans) if (s.under > 0) events.push([s.startMs, s.under], [s.endMs, -s.under]);
  events.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  let current = 0;
  let worst = 0;
  for (const [, delta] of events) {
    current += delta;
    worst = Math.max(worst, current);
  }
  return worst;
}

interface Worst {
  overshoot: number;
  bound: number;
  held: boolean;
  admitted: number;
}

async function measure(store: Store, name: string): Promise<Record<Way, Worst>> {
  const limiter = createLimiter({
    store,
    prefix: `bench-settle-${Date.now()}`,
    policies: gcra({ name: 'budget', limit: LIMIT, periodMs: PERIOD_MS }),
  });
  const worst: Record<Way, Worst> = {
    settle: { overshoot: Number.NEGATIVE_INFINITY, bound: 0, held: true, admitted: 0 },
    end: { overshoot: Number.NEGATIVE_INFINITY, bound: 0, held: true, admitted: 0 },
  };
  for (let seed = 1; seed <= ROUNDS; seed++) {
    const calls = traffic(seed);
    for (const way of ['settle', 'end'] as const) {
      const spans = await round(limiter, `${way}-${seed}`, calls, way);
      const overshoot = spans.reduce((sum, s) => sum + s.actual, 0) - LIMIT;
      const bound = worstInFlight(spans);
      const w = worst[way];
      w.held &&= overshoot <= bound;
      if (overshoot > w.overshoot) Object.assign(w, { overshoot, bound, admitted: spans.length });
    }
  }
  for (const way of ['settle', 'end'] as const) {
    const w = worst[way];
    console.log(
      `${name.padEnd(7)} ${(way === 'settle' ? 'settle' : 'charge at the end').padEnd(18)} worst overshoot ${String(w.overshoot).padStart(5)} units past ${LIMIT} (bound in that round: ${String(w.bound).padStart(5)}, ${w.admitted} calls admitted); overshoot ≤ bound in every round: ${w.held ? 'yes' : 'NO'}`,
    );
  }
  return worst;
}

console.log(
  `${ROUNDS} rounds of ${CALLERS} parallel callers × ${CALLS} calls (estimate 1–20, actual 0–40, 0–5 ms each, seeds 1–${ROUNDS}) on one key of ${LIMIT} units per 30 days`,
);
await measure(memoryStore(), 'memory');
const server = await startRedisServer(7150, 7200);
const client = new Redis({ host: HOST, port: server.port });
try {
  await measure(redisStore({ client: fromIoredis(client) }), 'redis');
} finally {
  client.disconnect();
  await server.stop();
}
