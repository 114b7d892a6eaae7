// Where the time from a release to the next waiter's grant goes, on Redis: the handoff of
// `npm run bench:permits` (one key of limit 1, two sides on connections of their own, a random 0–10 ms
// pause before each release) cut into its steps, p50, p90 and p99 of each over BENCH_ROUNDS handoffs:
//
//   release → wake     from the release call to the wake message reaching the waiter's subscriber
//   wake → claim       the waiter's own work until its claim (the wait script) is sent
//   claim round trip   the claim, to its reply
//   claim → grant      the waiter's work from the reply to the decision with its permit
//
//   npm run build && node --import tsx packages/floodgate/bench/permit-handoff-profile.ts

import { loadavg } from 'node:os';
import { concurrency, createPermits, type Permits } from 'floodgate';
import { fromIoredis, fromIoredisSubscriber, type RedisSubscriber, redisPermitStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { HOST, startRedisServer } from './redis-server.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1000);
const WARM_UP = 20;
const server = await startRedisServer(6800, 6900);
const admin = new Redis({ host: HOST, port: server.port });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// When the last wake reached a subscriber, and when the last granted claim was sent and answered.
const at = { wake: 0, claim: 0, claimed: 0 };

/** One side: a client and a subscriber of its own, the subscriber's messages and the claims timed. */
function side(): { permits: Permits; close: () => void } {
  const client = new Redis({ host: HOST, port: server.port });
  const connection = new Redis({ host: HOST, port: server.port });
  const inner = fromIoredisSubscriber(connection);
  const subscriber: RedisSubscriber = {
    sharded: inner.sharded,
    subscribe: (channel, listener) =>
      inner.subscribe(channel, (message) => {
        at.wake = performance.now();
        listener(message);
      }),
    unsubscribe: (channel) => inner.unsubscribe(channel),
  };
  const store = redisPermitStore({ client: fromIoredis(client), subscriber });
  const wait = store.wait.bind(store);
  store.wait = async (key, args) => {
    const sentAt = performance.now();
    const reply = await wait(key, args);
    if (reply.granted) {
      at.claim = sentAt;
      at.claimed = performance.now();
    }
    return reply;
  };
  const permits = createPermits({ store, policy: concurrency({ limit: 1, leaseMs: 60_000 }), prefix: 'fg' });
  return {
    permits,
    close: () => {
      client.disconnect();
      connection.disconnect();
    },
  };
}

const sides = [side(), side()] as const;
const steps = ['release → wake', 'wake → claim', 'claim round trip', 'claim → grant', 'total'] as const;
const ms: number[][] = steps.map(() => []);
let held = (await sides[0].permits.acquire('h')).permit;
let turn: 0 | 1 = 1;
for (let i = -WARM_UP; i < ROUNDS; i++) {
  let grantedAt = 0;
  const next = sides[turn].permits.acquire('h').then((d) => {
    grantedAt = performance.now();
    return d.permit;
  });
  do await sleep(1);
  while ((await admin.zcard('fg:{h}:concurrency:q')) === 0);
  await sleep(Math.random() * 10);
  const releasedAt = performance.now();
  await held.release();
  held = await next;
  if (i >= 0) {
    const times = [at.wake - releasedAt, at.claim - at.wake, at.claimed - at.claim, grantedAt - at.claimed];
    times.push(grantedAt - releasedAt);
    for (const [j, t] of times.entries()) ms[j]?.push(t);
  }
  turn = turn === 0 ? 1 : 0;
}
const quantile = (values: readonly number[], q: number) =>
  ([...values].sort((a, b) => a - b)[Math.floor(q * values.length)] ?? Number.NaN).toFixed(3);
console.log(
  `${ROUNDS} handoffs; load average ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
console.log('| step (ms) | p50 | p90 | p99 |\n|---|---:|---:|---:|');
steps.forEach((name, j) => {
  const values = ms[j] ?? [];
  console.log(`| ${name} | ${quantile(values, 0.5)} | ${quantile(values, 0.9)} | ${quantile(values, 0.99)} |`);
});
await held.release();
for (const s of sides) s.close();
admin.disconnect();
await server.stop();
process.exit(0);
