import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, isFloodgateError, memoryPermitStore } from '../../src/index.js';
import {
  fromIoredis,
  fromIoredisSubscriber,
  fromNodeRedis,
  fromNodeRedisSubscriber,
  redisPermitStore,
} from '../../src/stores/redis/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import type { PermitWaitMessage, PermitWaitReply } from './redis/permit-wait-worker.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const WORKER = fileURLToPath(new URL('./redis/permit-wait-worker.ts', import.meta.url));

function startWorker(): Promise<ChildProcess> {
  const worker = fork(WORKER, { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  return new Promise((resolve) => worker.once('message', () => resolve(worker)));
}

/** Sends a wait to a worker; resolves with its report once it was granted and released. */
function waitIn(worker: ChildProcess, message: PermitWaitMessage): Promise<PermitWaitReply> {
  return new Promise((resolve) => {
    const onMessage = (reply: PermitWaitReply) => {
      if (reply.label !== message.label) return;
      worker.off('message', onMessage);
      resolve(reply);
    };
    worker.on('message', onMessage);
    worker.send(message);
  });
}

/** Passes a value on after running `fn`: records when a promise settled. */
function note<T>(fn: () => unknown): (value: T) => T {
  return (value) => {
    fn();
    return value;
  };
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('did not reject');
    },
    (error: unknown) => error,
  );
}

const codeOf = (error: unknown) => (isFloodgateError(error) ? error.code : String(error));

describe.skipIf(!available)('redis permit store: waiting', () => {
  let redis: Redis;
  let subscriber: Redis;
  let probe: Redis;
  beforeAll(() => {
    redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
    subscriber = redis.duplicate();
    probe = redis.duplicate();
  });
  afterAll(async () => {
    await Promise.all([redis.quit(), subscriber.quit(), probe.quit()]);
  });

  function permitsOn(prefix: string, limit: number, extra: { maxQueue?: number; pollMs?: number } = {}) {
    return createPermits({
      store: redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(subscriber) }),
      policy: concurrency({
        limit,
        leaseMs: 30_000,
        ...(extra.maxQueue === undefined ? {} : { maxQueue: extra.maxQueue }),
      }),
      prefix,
      pollMs: extra.pollMs ?? 5000,
    });
  }
  const queueOf = (prefix: string, key: string) => `${prefix}:{${key}}:concurrency`;
  async function queueLength(prefix: string, key: string): Promise<number> {
    return probe.zcard(`${queueOf(prefix, key)}:q`);
  }
  async function untilQueued(prefix: string, key: string, n: number): Promise<void> {
    for (let i = 0; i < 500 && (await queueLength(prefix, key)) < n; i++) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(await queueLength(prefix, key)).toBe(n);
  }

  it('decides every random sequence of waits, leaves and releases exactly like the memory store (the model)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(
            fc.record({ op: fc.constant('acquire' as const), cost: fc.integer({ min: 1, max: 3 }) }),
            fc.record({ op: fc.constant('wait' as const), cost: fc.integer({ min: 1, max: 3 }), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('leave' as const), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('release' as const), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('advance' as const), us: fc.integer({ min: 0, max: 300_000 }) }),
          ),
          { maxLength: 40 },
        ),
        async (steps) => {
          const clock = manualClock();
          const memory = memoryPermitStore({ clock });
          const store = redisPermitStore({ client: fromIoredis(redis) });
          const key = `${uniquePrefix('wait-model')}:{k}:concurrency`;
          const ids: string[] = [];
          const common = { limit: 3, leaseUs: 1_000_000, maxQueue: 4, waiterUs: 500_000 };
          for (const step of steps) {
            const nowUs = clock.nowUs();
            if (step.op === 'advance') {
              clock.advanceUs(step.us);
              continue;
            }
            if (step.op === 'acquire' || (step.op === 'wait' && step.pick >= ids.length)) {
              const leaseId = `${'A'.repeat(20)}${String(ids.length).padStart(2, '0')}`;
              ids.push(leaseId);
              const args = { ...common, cost: step.cost, leaseId, nowUs };
              if (step.op === 'acquire') expect(await store.acquire(key, args)).toEqual(memory.acquire(key, args));
              else expect(await store.wait(key, args)).toEqual(memory.wait(key, args));
              continue;
            }
            const leaseId = ids[step.pick % Math.max(1, ids.length)];
            if (leaseId === undefined) continue;
            if (step.op === 'wait') {
              const args = { ...common, cost: 1 + (ids.indexOf(leaseId) % 3), leaseId, nowUs };
              expect(await store.wait(key, args)).toEqual(memory.wait(key, args));
            } else if (step.op === 'leave') {
              expect(await store.leave(key, { limit: 3, leaseId, nowUs })).toEqual(
                memory.leave(key, { limit: 3, leaseId, nowUs }),
              );
            } else {
              expect(await store.release(key, { limit: 3, leaseId, nowUs })).toEqual(
                memory.release(key, { limit: 3, leaseId, nowUs }),
              );
            }
          }
        },
      ),
      { numRuns: 60 },
    );
  }, 60_000);

  describe('two processes', () => {
    const workers: ChildProcess[] = [];
    beforeAll(async () => {
      workers.push(...(await Promise.all([startWorker(), startWorker()])));
    }, 60_000);
    afterAll(() => {
      for (const worker of workers) {
        if (worker.exitCode === null && worker.signalCode === null) worker.send('exit');
      }
    });

    it('grant waiters first come, first served across processes, each woken by notification', async () => {
      const prefix = uniquePrefix('wait-fifo');
      const holder = await permitsOn(prefix, 1).acquire('fifo');
      const labels = ['a1', 'b1', 'a2', 'b2', 'a3', 'b3', 'a4', 'b4'];
      const done: Promise<PermitWaitReply>[] = [];
      for (const [i, label] of labels.entries()) {
        // pollMs 5 s: a waiter that is not woken by notification would make the run take seconds.
        const message = { prefix, key: 'fifo', label, limit: 1, cost: 1, holdMs: 2, pollMs: 5000 };
        done.push(waitIn(workers[i % 2] as ChildProcess, message));
        await untilQueued(prefix, 'fifo', i + 1);
      }
      const releasedAt = performance.now();
      await holder.permit.release();
      const replies = await Promise.all(done);
      const tookMs = performance.now() - releasedAt;
      for (const reply of replies) expect(reply).not.toHaveProperty('error');
      const granted = (replies as { label: string; grantedUs: number; fence: number }[])
        .slice()
        .sort((x, y) => x.grantedUs - y.grantedUs);
      expect(granted.map((r) => r.label)).toEqual(labels);
      // Fences rise in the same order.
      expect(granted.map((r) => r.fence)).toEqual(granted.map((r) => r.fence).sort((x, y) => x - y));
      expect(tookMs).toBeLessThan(2000);
      expect(await queueLength(prefix, 'fifo')).toBe(0);
    }, 30_000);

    it('a waiter whose process is killed leaves the queue after its place expires (3 polls), never sooner', async () => {
      const prefix = uniquePrefix('wait-crash');
      const mine = permitsOn(prefix, 1, { pollMs: 100 });
      const holder = await mine.acquire('crash');
      const victim = await startWorker();
      void waitIn(victim, { prefix, key: 'crash', label: 'victim', limit: 1, cost: 1, holdMs: 0, pollMs: 100 });
      await untilQueued(prefix, 'crash', 1);
      victim.kill('SIGKILL');
      await new Promise((resolve) => victim.once('exit', resolve));
      const killedMs = performance.now();
      let grantedMs = 0;
      const next = mine.acquire('crash').then(note(() => (grantedMs = performance.now())));
      await untilQueued(prefix, 'crash', 2);
      await holder.permit.release();
      const d = await next;
      // The dead waiter held the head for up to 300 ms after its last ask (before the kill).
      expect(grantedMs - killedMs).toBeLessThan(300 + 100 + 200);
      expect(grantedMs - killedMs).toBeGreaterThan(150);
      await d.permit.release();
      expect(await queueLength(prefix, 'crash')).toBe(0);
    }, 30_000);
  });

  it('a sharded subscriber (SSUBSCRIBE, and SPUBLISH in the scripts) wakes waiters as well', async () => {
    const shardSubscriber = redis.duplicate();
    try {
      const permits = createPermits({
        store: redisPermitStore({
          client: fromIoredis(redis),
          subscriber: fromIoredisSubscriber(shardSubscriber, { sharded: true }),
        }),
        policy: concurrency({ limit: 1, leaseMs: 30_000 }),
        prefix: uniquePrefix('wait-sharded'),
        pollMs: 5000,
      });
      const holder = await permits.acquire('s');
      let grantedMs = 0;
      const next = permits.acquire('s').then(note(() => (grantedMs = performance.now())));
      await new Promise((resolve) => setTimeout(resolve, 50));
      const releasedMs = performance.now();
      await holder.permit.release();
      await (await next).permit.release();
      // Far sooner than the 5 s poll: the sharded message woke it.
      expect(grantedMs - releasedMs).toBeLessThan(1000);
    } finally {
      await shardSubscriber.quit();
    }
  });

  for (const sharded of [false, true]) {
    it(`a node-redis subscriber (sharded: ${sharded}) wakes waiters as well`, async () => {
      const client = await createClient({ socket: { host: REDIS_HOST, port: REDIS_PORT } }).connect();
      const listener = await client.duplicate().connect();
      try {
        const permits = createPermits({
          store: redisPermitStore({
            client: fromNodeRedis(client),
            subscriber: fromNodeRedisSubscriber(listener, { sharded }),
          }),
          policy: concurrency({ limit: 1, leaseMs: 30_000 }),
          prefix: uniquePrefix('wait-node-redis'),
          pollMs: 5000,
        });
        const holder = await permits.acquire('n');
        let grantedMs = 0;
        const next = permits.acquire('n').then(note(() => (grantedMs = performance.now())));
        await new Promise((resolve) => setTimeout(resolve, 50));
        const releasedMs = performance.now();
        await holder.permit.release();
        await (await next).permit.release();
        expect(grantedMs - releasedMs).toBeLessThan(1000);
      } finally {
        await Promise.all([client.quit(), listener.quit()]);
      }
    });
  }

  it('a waiter on a key whose channel is already subscribed asks once, then claims once when woken', async () => {
    const store = redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(subscriber) });
    let asks = 0;
    const wait = store.wait.bind(store);
    store.wait = (key, args) => {
      asks++;
      return wait(key, args);
    };
    const prefix = uniquePrefix('wait-joined');
    const permits = createPermits({ store, policy: concurrency({ limit: 1, leaseMs: 30_000 }), prefix, pollMs: 5000 });
    const holder = await permits.acquire('j');
    // The first waiter subscribes the channel: it asks, subscribes, and asks again (a wake between its
    // ask and the subscription is not lost), then claims when woken.
    asks = 0;
    const first = permits.acquire('j', { timeoutMs: 10_000 });
    await untilQueued(prefix, 'j', 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await holder.permit.release();
    const a = await first;
    expect(asks).toBe(3);
    // The channel lingers subscribed: the next waiter joins it before its ask, and asks once.
    asks = 0;
    const second = permits.acquire('j', { timeoutMs: 10_000 });
    await untilQueued(prefix, 'j', 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(asks).toBe(1);
    await a.permit.release();
    const b = await second;
    expect(asks).toBe(2);
    expect(b.permit.fence).toBeGreaterThan(a.permit.fence);
    await b.permit.release();
    expect(await queueLength(prefix, 'j')).toBe(0);
  });

  it('a subscriber that cannot subscribe leaves waiters to their poll', async () => {
    const closed = redis.duplicate();
    await closed.quit();
    const permits = createPermits({
      store: redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(closed) }),
      policy: concurrency({ limit: 1, leaseMs: 30_000 }),
      prefix: uniquePrefix('wait-no-subscriber'),
      pollMs: 50,
    });
    const holder = await permits.acquire('p');
    const next = permits.acquire('p', { timeoutMs: 5000 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    await holder.permit.release();
    const d = await next;
    expect(d.allowed).toBe(true);
    await d.permit.release();
  });

  it('a large cost at the head is not starved by smaller ones that come after it', async () => {
    const prefix = uniquePrefix('wait-big');
    const permits = permitsOn(prefix, 4);
    const held = await Promise.all([1, 2, 3, 4].map(() => permits.acquire('big')));
    const order: string[] = [];
    const big = permits.acquire('big', { cost: 4 }).then(note(() => order.push('big')));
    await untilQueued(prefix, 'big', 1);
    const small = [1, 2, 3].map((i) => permits.acquire('big').then(note(() => order.push(`small${i}`))));
    await untilQueued(prefix, 'big', 4);
    for (const h of held.slice(0, 3)) await h.permit.release();
    // Three permits free, but the head asks for 4: nobody passes it, not even a call that does not wait.
    expect((await permits.limit('big')).allowed).toBe(false);
    expect(order).toEqual([]);
    await held[3]?.permit.release();
    const bigPermit = await big;
    expect(order).toEqual(['big']);
    await bigPermit.permit.release();
    for (const s of await Promise.all(small)) await s.permit.release();
    expect(order).toEqual(['big', 'small1', 'small2', 'small3']);
    expect(await queueLength(prefix, 'big')).toBe(0);
  });

  it('a timeout and an abort leave nothing behind: the queue is back to 0 and its keys are gone', async () => {
    const prefix = uniquePrefix('wait-clean');
    const permits = permitsOn(prefix, 1, { pollMs: 50 });
    const holder = await permits.acquire('clean');
    const timedOut = rejectionOf(permits.acquire('clean', { timeoutMs: 150 }));
    const controller = new AbortController();
    const aborted = rejectionOf(permits.acquire('clean', { signal: controller.signal }));
    await untilQueued(prefix, 'clean', 2);
    controller.abort();
    expect(codeOf(await aborted)).toBe('ERR_ABORTED');
    expect(await queueLength(prefix, 'clean')).toBe(1);
    expect(codeOf(await timedOut)).toBe('ERR_TIMEOUT');
    expect(await queueLength(prefix, 'clean')).toBe(0);
    const base = queueOf(prefix, 'clean');
    expect(await probe.exists(`${base}:q`, `${base}:x`, `${base}:w`)).toBe(0);
    await holder.permit.release();
  });

  it('refuses a waiter beyond maxQueue with ERR_QUEUE_FULL, counting the whole fleet, per key', async () => {
    const prefix = uniquePrefix('wait-full');
    const one = permitsOn(prefix, 1, { maxQueue: 2 });
    const two = createPermits({
      store: redisPermitStore({ client: fromIoredis(probe) }),
      policy: concurrency({ limit: 1, leaseMs: 30_000, maxQueue: 2 }),
      prefix,
    });
    const holder = await one.acquire('full');
    const waiting = [one.acquire('full'), two.acquire('full')];
    await untilQueued(prefix, 'full', 2);
    const error = await rejectionOf(two.acquire('full'));
    expect(codeOf(error)).toBe('ERR_QUEUE_FULL');
    expect(await queueLength(prefix, 'full')).toBe(2);
    // Another key's queue is its own.
    const otherHolder = await one.acquire('other');
    const other = one.acquire('other');
    await untilQueued(prefix, 'other', 1);
    await holder.permit.release();
    await otherHolder.permit.release();
    // Each waiter releases once granted, letting the next one in.
    await Promise.all([...waiting, other].map(async (d) => (await d).permit.release()));
    expect(await queueLength(prefix, 'full')).toBe(0);
  });
});
