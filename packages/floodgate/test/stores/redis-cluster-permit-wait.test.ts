// Waiting for permits on a Redis Cluster: the queue's keys and the key's channel share the key's slot,
// the scripts publish with SPUBLISH on that shard, and an ioredis Cluster subscriber with sharded
// subscribers hears them.
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits } from '../../src/index.js';
import { fromIoredis, fromIoredisSubscriber, hashSlot, redisPermitStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, redisAvailable, requireServer, startCluster, type TestCluster } from './redis/servers.js';

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
let cluster: TestCluster | undefined;
let clusterError: unknown;
if (redisUp) {
  try {
    cluster = await startCluster();
  } catch (error) {
    clusterError = error;
  }
}
const clusterUp =
  redisUp &&
  requireServer(cluster !== undefined, `a Redis Cluster started from redis-server (${String(clusterError)})`);

/** Passes a value on after running `fn`: records when a promise settled. */
function note<T>(fn: () => unknown): (value: T) => T {
  return (value) => {
    fn();
    return value;
  };
}

describe.skipIf(!clusterUp)('waiting for permits on Redis Cluster (sharded pub/sub)', () => {
  let client: Cluster;
  let subscriber: Cluster;
  beforeAll(async () => {
    const nodes = (cluster as TestCluster).ports.map((port) => ({ host: REDIS_HOST, port }));
    client = new Cluster(nodes);
    subscriber = new Cluster(nodes, { shardedSubscribers: true });
    await Promise.all(
      [client, subscriber].map(
        (c) => new Promise<void>((resolve, reject) => c.once('ready', resolve).once('error', reject)),
      ),
    );
  }, 60_000);
  afterAll(async () => {
    await Promise.all([client?.quit(), subscriber?.quit()]);
    await cluster?.stop();
  });

  it('serves waiters in order, the large cost at the head first, each woken by SPUBLISH on its shard', async () => {
    const prefix = uniquePrefix('cluster-wait');
    const permits = createPermits({
      store: redisPermitStore({
        client: fromIoredis(client),
        subscriber: fromIoredisSubscriber(subscriber, { sharded: true }),
      }),
      policy: concurrency({ limit: 2, leaseMs: 30_000 }),
      prefix,
      // A waiter that missed its message would wait 5 s: the run takes far less.
      pollMs: 5000,
    });
    const base = `${prefix}:{tenant}:concurrency`;
    for (const suffix of ['l', 'c', 'f', 'q', 'x', 'w', 'n']) {
      expect(await client.cluster('KEYSLOT', `${base}:${suffix}`)).toBe(hashSlot('tenant'));
    }
    const held = [await permits.acquire('tenant'), await permits.acquire('tenant')];
    const order: string[] = [];
    const big = permits.acquire('tenant', { cost: 2 }).then(note(() => order.push('big')));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const small = permits.acquire('tenant').then(note(() => order.push('small')));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await client.zcard(`${base}:q`)).toBe(2);
    const startedMs = performance.now();
    await held[0]?.permit.release();
    await new Promise((resolve) => setTimeout(resolve, 100));
    // One permit free, the head wants 2: the small one behind it waits.
    expect(order).toEqual([]);
    await held[1]?.permit.release();
    await (await big).permit.release();
    await (await small).permit.release();
    expect(order).toEqual(['big', 'small']);
    expect(performance.now() - startedMs).toBeLessThan(2000);
    expect(await client.zcard(`${base}:q`)).toBe(0);
  }, 30_000);
});
