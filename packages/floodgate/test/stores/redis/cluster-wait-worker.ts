// A separate process waiting for concurrency permits on a Redis Cluster (argv[2]: the nodes' ports, JSON),
// woken by sharded pub/sub: started by redis-cluster-permit-wait.test.ts. Each permit is reported with
// its enter (after the grant arrived) and exit (before the release is sent) on the machine's monotonic
// clock, one time line for every process.
import { Cluster } from 'ioredis';
import { concurrency, createPermits, type Permits } from '../../../src/index.js';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore } from '../../../src/stores/redis/index.js';
import { REDIS_HOST } from './servers.js';

export interface ClusterWaitMessage {
  prefix: string;
  key: string;
  label: string;
  limit: number;
  cost: number;
  /** ms to hold the permit once granted. */
  holdMs: number;
  pollMs: number;
}

export type ClusterWaitReply =
  | { label: string; cost: number; fence: number; enterUs: number; exitUs: number }
  | { label: string; error: string };

const ports = JSON.parse(process.argv[2] as string) as number[];
const nodes = ports.map((port) => ({ host: REDIS_HOST, port }));
const client = new Cluster(nodes);
const subscriber = new Cluster(nodes, { shardedSubscribers: true });
await Promise.all(
  [client, subscriber].map(
    (c) => new Promise<void>((resolve, reject) => c.once('ready', resolve).once('error', reject)),
  ),
);
const store = redisPermitStore({
  client: fromIoredis(client),
  subscriber: fromIoredisSubscriber(subscriber, { sharded: true }),
});
const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);
const sets = new Map<string, Permits>();

async function run(m: ClusterWaitMessage): Promise<ClusterWaitReply> {
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
  const enterUs = monotonicUs();
  await new Promise((resolve) => setTimeout(resolve, m.holdMs));
  const exitUs = monotonicUs();
  await permit.release();
  return { label: m.label, cost: m.cost, fence: permit.fence, enterUs, exitUs };
}

process.on('message', (message: ClusterWaitMessage | 'exit') => {
  if (message === 'exit') {
    void Promise.all([client.quit(), subscriber.quit()]).then(() => process.exit(0));
    return;
  }
  void run(message).then(
    (reply) => process.send?.(reply),
    (error: unknown) => process.send?.({ label: message.label, error: String(error) } satisfies ClusterWaitReply),
  );
});

process.send?.('ready');
