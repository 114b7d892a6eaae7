// A separate process holding concurrency permits on Redis: started by redis-permits.test.ts.
// Each holder records its enter and exit on Redis TIME (µs), so every process shares one time line.
import { Redis } from 'ioredis';
import { concurrency, createPermits } from '../../../src/index.js';
import { fromIoredis, redisPermitStore } from '../../../src/stores/redis/index.js';
import { REDIS_HOST, REDIS_PORT } from './servers.js';

export interface PermitRunMessage {
  prefix: string;
  key: string;
  limit: number;
  leaseMs: number;
  /** Attempts, one after another in each of `lanes` loops. */
  attempts: number;
  lanes: number;
  /** Cost of each attempt, cycled. */
  costs: number[];
  /** ms to hold each permit. */
  holdMs: number;
  /** Take one permit, report it, and never release it (the test then kills this process). */
  holdForever?: boolean;
}

export interface PermitRunReply {
  /** [enterUs, exitUs, cost] of each permit held. */
  spans: [number, number, number][];
  refused: number;
  fence?: number;
  error?: string;
}

const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });

async function redisNowUs(): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1_000_000 + Number(us);
}

async function run(m: PermitRunMessage): Promise<PermitRunReply> {
  const permits = createPermits({
    store: redisPermitStore({ client: fromIoredis(redis) }),
    policy: concurrency({ limit: m.limit, leaseMs: m.leaseMs }),
    prefix: m.prefix,
  });
  if (m.holdForever === true) {
    const d = await permits.limit(m.key);
    return { spans: [], refused: d.allowed ? 0 : 1, ...(d.permit ? { fence: d.permit.fence } : {}) };
  }
  const spans: [number, number, number][] = [];
  let refused = 0;
  let next = 0;
  const lane = async () => {
    while (next < m.attempts) {
      const cost = m.costs[next++ % m.costs.length] as number;
      const d = await permits.limit(m.key, { cost });
      if (d.permit === undefined) {
        refused++;
        continue;
      }
      // Enter after the grant, exit before the release: the span lies inside the lease.
      const enter = await redisNowUs();
      await new Promise((resolve) => setTimeout(resolve, m.holdMs));
      const exit = await redisNowUs();
      spans.push([enter, exit, cost]);
      await d.permit.release();
    }
  };
  await Promise.all(Array.from({ length: m.lanes }, lane));
  return { spans, refused };
}

process.on('message', (message: PermitRunMessage | 'exit') => {
  if (message === 'exit') {
    void redis.quit().then(() => process.exit(0));
    return;
  }
  void run(message).then(
    (reply) => process.send?.(reply),
    (error: unknown) => process.send?.({ spans: [], refused: 0, error: String(error) } satisfies PermitRunReply),
  );
});

process.send?.('ready');
