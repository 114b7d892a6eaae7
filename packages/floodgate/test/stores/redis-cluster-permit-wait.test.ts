// Waiting for permits on a Redis Cluster: the queue's keys and the key's channel share the key's slot,
// the scripts publish with SPUBLISH on that shard, and an ioredis Cluster subscriber with sharded
// subscribers hears them.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits } from '../../src/index.js';
import { fromIoredis, fromIoredisSubscriber, hashSlot, redisPermitStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { mostHeld } from './fixtures/most-held.js';
import type { ClusterWaitMessage, ClusterWaitReply } from './redis/cluster-wait-worker.js';
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

const WORKER = fileURLToPath(new URL('./redis/cluster-wait-worker.ts', import.meta.url));

function startWorker(): Promise<ChildProcess> {
  const ports = JSON.stringify((cluster as TestCluster).ports);
  const worker = fork(WORKER, [ports], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    worker.once('message', () => resolve(worker));
    worker.once('exit', (code) => reject(new Error(`a waiting worker exited (${code}) before it was ready`)));
  });
}

/** Sends a wait to a worker; resolves with its report once it was granted and released. */
function waitIn(worker: ChildProcess, message: ClusterWaitMessage): Promise<ClusterWaitReply> {
  return new Promise((resolve) => {
    const onMessage = (reply: ClusterWaitReply) => {
      if (reply.label !== message.label) return;
      worker.off('message', onMessage);
      resolve(reply);
    };
    worker.on('message', onMessage);
    worker.send(message);
  });
}

type Held = Extract<ClusterWaitReply, { fence: number }>;

const spans = (held: readonly Held[]) => held.map((h) => ({ cost: h.cost, from: h.enterUs, to: h.exitUs }));

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

  describe('three processes', () => {
    const workers: ChildProcess[] = [];
    beforeAll(async () => {
      workers.push(...(await Promise.all([startWorker(), startWorker(), startWorker()])));
      // One wait each first, granted at once: a process's first wait loads and compiles what it runs.
      const warm = { prefix: uniquePrefix('warm'), limit: 2, cost: 1, holdMs: 0, pollMs: 200 };
      await Promise.all(workers.map((w, i) => waitIn(w, { ...warm, key: `w${i}`, label: 'warm' })));
    }, 60_000);
    afterAll(() => {
      for (const worker of workers) {
        if (worker.exitCode === null && worker.signalCode === null) worker.send('exit');
      }
    });
    // The holder's store publishes as the workers' do (SPUBLISH): a store without a sharded subscriber
    // would PUBLISH, which sharded subscribers never hear.
    const permitsOf = (prefix: string, limit: number) =>
      createPermits({
        store: redisPermitStore({
          client: fromIoredis(client),
          subscriber: fromIoredisSubscriber(subscriber, { sharded: true }),
        }),
        policy: concurrency({ limit, leaseMs: 30_000 }),
        prefix,
      });

    it('grant the waiters of three processes first come, first served, never beyond the limit, each woken by SPUBLISH', async () => {
      const prefix = uniquePrefix('cluster-procs');
      const queue = `${prefix}:{fleet}:concurrency:q`;
      const holder = await permitsOf(prefix, 2).acquire('fleet', { cost: 2 });
      const labels = Array.from({ length: 12 }, (_, i) => `${'abc'[i % 3]}${Math.floor(i / 3) + 1}`);
      const done: Promise<ClusterWaitReply>[] = [];
      for (const [i, label] of labels.entries()) {
        // Costs 1 and 2 alternate under a limit of 2: each grant has to wait for the one before it.
        // pollMs 5 s: a waiter that is not woken by its shard's message would make the run take minutes.
        const message = { prefix, key: 'fleet', label, limit: 2, cost: 1 + (i % 2), holdMs: 5, pollMs: 5000 };
        done.push(waitIn(workers[i % 3] as ChildProcess, message));
        for (let n = 0; n < 1000 && (await client.zcard(queue)) < i + 1; n++) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        expect(await client.zcard(queue)).toBe(i + 1);
      }
      const releasedMs = performance.now();
      await holder.permit.release();
      const replies = await Promise.all(done);
      const tookMs = performance.now() - releasedMs;
      for (const reply of replies) expect(reply).not.toHaveProperty('error');
      const granted = (replies as Held[]).slice().sort((x, y) => x.fence - y.fence);
      expect(granted.map((r) => r.label)).toEqual(labels);
      expect(mostHeld(spans(granted))).toBeLessThanOrEqual(2);
      // pollMs 5 s: one waiter that missed its message would take 5 s.
      expect(tookMs).toBeLessThan(2500);
      expect(await client.zcard(queue)).toBe(0);
    }, 60_000);

    it('many waiters at once from three processes: every one granted, never more than the limit held', async () => {
      const prefix = uniquePrefix('cluster-crowd');
      const limit = 3;
      const replies = await Promise.all(
        Array.from({ length: 45 }, (_, i) =>
          waitIn(workers[i % 3] as ChildProcess, {
            prefix,
            key: 'crowd',
            label: `w${i}`,
            limit,
            cost: 1 + (i % 3),
            holdMs: 3,
            pollMs: 5000,
          }),
        ),
      );
      for (const reply of replies) expect(reply).not.toHaveProperty('error');
      const held = replies as Held[];
      expect(held.length).toBe(45);
      expect(mostHeld(spans(held))).toBeLessThanOrEqual(limit);
      // Fences are distinct and rise: one grant at a time per key.
      expect(new Set(held.map((h) => h.fence)).size).toBe(45);
      expect(await client.zcard(`${prefix}:{crowd}:concurrency:q`)).toBe(0);
    }, 60_000);
  });
});
