// A separate process waiting for concurrency permits on Redis: started by redis-permit-wait.test.ts.
// Each grant is reported with the Redis TIME (µs) it was seen at, so every process shares one time line.
import { Redis } from 'ioredis';
import { concurrency, createPermits, type Permits } from '../../../src/index.js';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore } from '../../../src/stores/redis/index.js';
import { REDIS_HOST, REDIS_PORT } from './servers.js';

export interface PermitWaitMessage {
  prefix: string;
  key: string;
  label: string;
  limit: number;
  cost: number;
  /** ms to hold the permit once granted. */
  holdMs: number;
  pollMs: number;
}

export type PermitWaitReply = { label: string; grantedUs: number; fence: number } | { label: string; error: string };

const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
const subscriber = redis.duplicate();
const store = redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(subscriber) });
const sets = new Map<string, Permits>();

async function redisNowUs(): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1_000_000 + Number(us);
}

async function run(m: PermitWaitMessage): Promise<PermitWaitReply> {
  const id = `${m.prefix} ${m.limit} ${m.pollMs}`;
  let permits = sets.get(id);
  if (permits === undefined) {
    permits = createPermits({
      store,
      policy: concurrency({ limit: m.limit, leaseMs: 30_000 }),
      prefix: m.prefix,
      pollMs: m.pollMs,
    });
    sets.set(id, permits);
  }
  const { permit } = await permits.acquire(m.key, { cost: m.cost });
  const grantedUs = await redisNowUs();
  await new Promise((resolve) => setTimeout(resolve, m.holdMs));
  await permit.release();
  return { label: m.label, grantedUs, fence: permit.fence };
}

process.on('message', (message: PermitWaitMessage | 'exit') => {
  if (message === 'exit') {
    void Promise.all([redis.quit(), subscriber.quit()]).then(() => process.exit(0));
    return;
  }
  void run(message).then(
    (reply) => process.send?.(reply),
    (error: unknown) => process.send?.({ label: message.label, error: String(error) } satisfies PermitWaitReply),
  );
});

process.send?.('ready');
