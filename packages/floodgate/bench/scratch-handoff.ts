import { concurrency, createPermits } from 'floodgate';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { HOST, startRedisServer } from './redis-server.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1000);
const server = await startRedisServer(6800, 6900);
const admin = new Redis({ host: HOST, port: server.port });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let tMsg = 0;
let tClaim = 0;
let tClaimed = 0;
const sides = [0, 1].map(() => {
  const client = new Redis({ host: HOST, port: server.port });
  const sub = fromIoredisSubscriber(new Redis({ host: HOST, port: server.port }));
  const timed = {
    sharded: sub.sharded,
    subscribe: (c: string, l: (m: string) => void) =>
      sub.subscribe(c, (m) => {
        tMsg = performance.now();
        l(m);
      }),
    unsubscribe: (c: string) => sub.unsubscribe(c),
  };
  const store = redisPermitStore({ client: fromIoredis(client), subscriber: timed });
  const wait = store.wait.bind(store);
  store.wait = async (k, a) => {
    const s = performance.now();
    const r = await wait(k, a);
    if (r.granted) {
      tClaim = s;
      tClaimed = performance.now();
    }
    return r;
  };
  return createPermits({ store, policy: concurrency({ limit: 1, leaseMs: 60000 }), prefix: 'fg' });
});
let held = (await sides[0]!.acquire('h')).permit;
let side = 1;
const seg: number[][] = [[], [], [], [], []];
for (let i = -20; i < ROUNDS; i++) {
  let tGrant = 0;
  const next = sides[side]!.acquire('h').then((d) => {
    tGrant = performance.now();
    return d.permit;
  });
  do await sleep(1);
  while ((await admin.zcard('fg:{h}:concurrency:q')) === 0);
  await sleep(Math.random() * 10);
  const t0 = performance.now();
  await held.release();
  held = await next;
  if (i >= 0) {
    seg[0]!.push(tMsg - t0);
    seg[1]!.push(tClaim - tMsg);
    seg[2]!.push(tClaimed - tClaim);
    seg[3]!.push(tGrant - tClaimed);
    seg[4]!.push(tGrant - t0);
  }
  side = 1 - side;
}
const q = (a: number[], p: number) => [...a].sort((x, y) => x - y)[Math.floor(p * a.length)]!.toFixed(3);
for (const [i, name] of ['release→msg', 'msg→claim sent', 'claim RT', 'claimed→grant', 'total'].entries()) {
  console.log(name.padEnd(16), 'p50', q(seg[i]!, 0.5), 'p90', q(seg[i]!, 0.9), 'p99', q(seg[i]!, 0.99));
}
await held.release();
admin.disconnect();
await server.stop();
process.exit(0);
