// A separate process waiting for concurrency permits on a Redis Cluster (argv[2]: the nodes' ports, JSON),
// woken by sharded pub/sub: started by redis-cluster-permit-wait.test.ts. Each permit is reported with
// its enter (after the grant arrived) and exit (before the release is sent) on the machine's monotonic
// clock, one time line for every process.
import { Cluster } from 'ioredis';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore } from '../../../src/stores/redis/index.js';
import { holdFor, serveWaitOrders, type WaitOrder } from '../wait-worker-kit.js';
import { REDIS_HOST } from './servers.js';

export type ClusterWaitMessage = WaitOrder;

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

serveWaitOrders<ClusterWaitReply>(
  store,
  async (m, permit) => {
    const enterUs = monotonicUs();
    await holdFor(m.holdMs);
    const exitUs = monotonicUs();
    await permit.release();
    return { label: m.label, cost: m.cost, fence: permit.fence, enterUs, exitUs };
  },
  () => Promise.all([client.quit(), subscriber.quit()]),
);
