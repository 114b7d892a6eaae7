// A separate process waiting for concurrency permits on Redis: started by redis-permit-wait.test.ts.
// Each grant is reported with the Redis TIME (µs) it was seen at, so every process shares one time line.
import { Redis } from 'ioredis';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore } from '../../../src/stores/redis/index.js';
import { holdFor, serveWaitOrders, type WaitOrder } from '../wait-worker-kit.js';
import { REDIS_HOST, REDIS_PORT } from './servers.js';

export type PermitWaitMessage = WaitOrder;

export type PermitWaitReply = { label: string; grantedUs: number; fence: number } | { label: string; error: string };

const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
const subscriber = redis.duplicate();
const store = redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(subscriber) });

async function redisNowUs(): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1_000_000 + Number(us);
}

serveWaitOrders<PermitWaitReply>(
  store,
  async (m, permit) => {
    const grantedUs = await redisNowUs();
    await holdFor(m.holdMs);
    await permit.release();
    return { label: m.label, grantedUs, fence: permit.fence };
  },
  () => Promise.all([redis.quit(), subscriber.quit()]),
);
