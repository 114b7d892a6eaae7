// Waiting instead of failing: a job calls a paid API limited to 5 calls per second (burst 1). It waits
// with `acquire`, spaces a function with `throttle`, books slots ahead with reservations (and cancels one),
// and paces itself with the Guava-style smooth limiter. A manual clock stands in for time: the script
// moves it from one sleeper to the next, so it runs in no real time.
//
//   npm run build && npx tsx packages/floodgate/examples/waiting.ts
import { createLimiter, gcra, throttle } from 'floodgate';
import { smoothLimiter } from 'floodgate/smooth';
import { manualClock } from 'floodgate/testing';

const start = Date.UTC(2030, 0, 1, 12);
const clock = manualClock({ startMs: start });
const at = () => `t=${String(Math.round(clock.nowMs() - start)).padStart(4)}ms`;
const policies = gcra({ limit: 5, periodMs: 1000, burst: 1, name: 'paid-api' });

/** Runs `work` while moving the manual clock to each sleeper's time, as real time would. */
async function play(work: Promise<unknown>): Promise<void> {
  let done = false;
  void work.finally(() => {
    done = true;
  });
  while (!done) {
    await new Promise((resolve) => setImmediate(resolve));
    if (!done && clock.nextWakeUs !== Number.POSITIVE_INFINITY) clock.advanceUs(clock.nextWakeUs - clock.nowUs());
  }
  await work;
}

console.log('acquire: three jobs queue on one key, first come first served');
const limiter = createLimiter({ clock, policies, prefix: 'acquire' });
await play(
  Promise.all(
    ['a', 'b', 'c'].map((job) => limiter.acquire('paid-api').then(() => console.log(`  ${at()} job ${job} calls`))),
  ),
);
await play(
  limiter.acquire('paid-api', { timeoutMs: 100 }).catch((error: { code: string; message: string }) => {
    console.log(`  ${at()} a job that waits at most 100 ms: ${error.code} (${error.message})`);
  }),
);

console.log('throttle: a function whose calls are spaced by the limiter');
const send = throttle(async (id: number) => console.log(`  ${at()} send #${id}`), {
  policies,
  clock,
  maxQueue: 3,
});
await play(
  Promise.allSettled([1, 2, 3, 4, 5].map((id) => send(id))).then((results) => {
    const full = results.filter((r) => r.status === 'rejected').length;
    console.log(`  ${full} call(s) refused at once: ERR_QUEUE_FULL (maxQueue 3)`);
  }),
);

console.log('reservations: one store call books each slot ahead; cancelling the last one gives it back');
const fleet = createLimiter({ clock, policies, prefix: 'reserve' });
clock.advance(1000);
const t0 = clock.nowMs();
const booked = [];
for (let i = 0; i < 4; i++) booked.push(await fleet.limit('paid-api', { maxDelayMs: 10_000 }));
console.log(`  booked at t0, told to wait: ${booked.map((d) => `${d.delayMs ?? 0} ms`).join(', ')}`);
console.log(
  `  cancel the 2nd (a later one is booked behind it): gave back ${await fleet.cancel('paid-api', booked[1] as (typeof booked)[0])}`,
);
console.log(
  `  cancel the 4th (the last one): gave back ${await fleet.cancel('paid-api', booked[3] as (typeof booked)[0])}`,
);
const next = await fleet.limit('paid-api', { maxDelayMs: 10_000 });
console.log(`  the next booking takes its slot: wait ${next.delayMs} ms (${clock.nowMs() - t0} ms after t0)`);

console.log('smooth limiter (Guava RateLimiter): the next caller pays; a cold one warms up');
const smooth = smoothLimiter({ permitsPerSecond: 2, warmupMs: 4000, clock });
const waits: string[] = [];
for (let i = 0; i < 8; i++) {
  const waiting = smooth.acquire();
  await play(waiting);
  waits.push((await waiting).toFixed(3));
}
console.log(`  cold start, seconds waited per permit: ${waits.join(', ')}`);
