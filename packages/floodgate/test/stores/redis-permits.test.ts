import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, memoryPermitStore } from '../../src/index.js';
import { fromIoredis, redisPermitStore } from '../../src/stores/redis/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { connectSingle, DRIVERS, type DriverClient } from './redis/clients.js';
import type { PermitRunMessage, PermitRunReply } from './redis/permit-worker.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const WORKER = fileURLToPath(new URL('./redis/permit-worker.ts', import.meta.url));

function startWorker(): Promise<ChildProcess> {
  const worker = fork(WORKER, { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  return new Promise((resolve) => worker.once('message', () => resolve(worker)));
}

function send(worker: ChildProcess, message: PermitRunMessage): Promise<PermitRunReply> {
  return new Promise((resolve) => {
    worker.once('message', (reply: PermitRunReply) => resolve(reply));
    worker.send(message);
  });
}

/** The most cost in flight at once over all spans: a sweep over enter (+cost) and exit (−cost) events. */
function maxInFlight(spans: readonly [number, number, number][]): number {
  const events = spans.flatMap(([enter, exit, cost]) => [
    [enter, cost],
    [exit, -cost],
  ]);
  // At equal times exits first: a span that ends when another starts did not overlap it.
  events.sort((a, b) => (a[0] as number) - (b[0] as number) || (a[1] as number) - (b[1] as number));
  let now = 0;
  let max = 0;
  for (const [, delta] of events) {
    now += delta as number;
    max = Math.max(max, now);
  }
  return max;
}

describe.skipIf(!available)('redis permit store', () => {
  for (const driver of DRIVERS) {
    describe(driver, () => {
      let connection: DriverClient;
      beforeAll(async () => {
        connection = await connectSingle(driver);
      });
      afterAll(async () => {
        await connection.close();
      });

      it('decides every random sequence exactly like the memory store (the model), on a shared manual clock', async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(
              fc.oneof(
                fc.record({
                  op: fc.constant('acquire' as const),
                  key: fc.nat(1),
                  cost: fc.integer({ min: 1, max: 4 }),
                }),
                fc.record({ op: fc.constant('release' as const), pick: fc.nat(20) }),
                fc.record({ op: fc.constant('refresh' as const), pick: fc.nat(20) }),
                fc.record({ op: fc.constant('advance' as const), us: fc.integer({ min: 0, max: 400_000 }) }),
              ),
              { maxLength: 40 },
            ),
            async (steps) => {
              const clock = manualClock();
              const policy = concurrency({ limit: 4, leaseMs: 1000 });
              const prefix = uniquePrefix('permits');
              const memory = createPermits({ store: memoryPermitStore(), policy, clock, prefix });
              const redis = createPermits({
                store: redisPermitStore({ client: connection.client }),
                policy,
                clock,
                prefix,
              });
              const held: { key: string; m: string; r: string }[] = [];
              for (const step of steps) {
                if (step.op === 'advance') {
                  clock.advanceUs(step.us);
                } else if (step.op === 'acquire') {
                  const key = `k${step.key}`;
                  const [m, r] = [
                    await memory.limit(key, { cost: step.cost }),
                    await redis.limit(key, { cost: step.cost }),
                  ];
                  const { permit: mp, ...md } = m;
                  const { permit: rp, ...rd } = r;
                  expect(rd).toEqual(md);
                  expect(rp?.fence).toBe(mp?.fence);
                  if (mp && rp) held.push({ key, m: mp.leaseId, r: rp.leaseId });
                } else {
                  const lease = held[step.pick % Math.max(1, held.length)];
                  if (lease === undefined) continue;
                  const m = await memory[step.op](lease.key, lease.m);
                  expect(await redis[step.op](lease.key, lease.r)).toBe(m);
                }
              }
            },
          ),
          { numRuns: 40 },
        );
      }, 60_000);

      it('a forged lease id releases nothing, and its state lives in one slot that expires', async () => {
        const policy = concurrency({ limit: 2, leaseMs: 2000 });
        const prefix = uniquePrefix('permits');
        const permits = createPermits({ store: redisPermitStore({ client: connection.client }), policy, prefix });
        const d = await permits.limit('{evil}:key', { cost: 2 });
        expect(d.allowed).toBe(true);
        expect(await permits.release('{evil}:key', 'AAAAAAAAAAAAAAAAAAAAAA')).toBe(false);
        expect(await permits.refresh('{evil}:key', 'AAAAAAAAAAAAAAAAAAAAAA')).toBe(false);
        expect((await permits.limit('{evil}:key')).allowed).toBe(false);
        const probe = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
        try {
          const keys = (await probe.keys(`${prefix}:*`)).sort();
          expect(keys).toEqual([
            `${prefix}:{%7Bevil%7D:key}:concurrency:c`,
            `${prefix}:{%7Bevil%7D:key}:concurrency:f`,
            `${prefix}:{%7Bevil%7D:key}:concurrency:l`,
          ]);
          for (const key of keys) {
            const ttl = await probe.pttl(key);
            expect(ttl).toBeGreaterThan(2000);
            expect(ttl).toBeLessThanOrEqual(7000);
          }
          await d.permit?.release();
          // No lease left: the leases and costs go at once; the fence stays until its grace passed.
          expect((await probe.keys(`${prefix}:*`)).map((k) => k.slice(-1))).toEqual(['f']);
        } finally {
          await probe.quit();
        }
      });
    });
  }

  describe('several processes on Redis TIME', () => {
    const workers: ChildProcess[] = [];
    beforeAll(async () => {
      workers.push(...(await Promise.all([startWorker(), startWorker(), startWorker(), startWorker()])));
    }, 60_000);
    afterAll(async () => {
      for (const worker of workers) {
        if (worker.exitCode === null && worker.signalCode === null) worker.send('exit');
      }
    });

    it('holders that record their own enter and exit never overlap beyond the limit', async () => {
      const limit = 5;
      const message: PermitRunMessage = {
        prefix: uniquePrefix('permits'),
        key: 'shared',
        limit,
        leaseMs: 10_000,
        attempts: 150,
        lanes: 4,
        costs: [1, 2, 1, 3],
        holdMs: 2,
      };
      const replies = await Promise.all(workers.map((w) => send(w, message)));
      expect(replies.map((r) => r.error)).toEqual(workers.map(() => undefined));
      const spans = replies.flatMap((r) => r.spans);
      expect(spans.length).toBeGreaterThan(40);
      expect(replies.reduce((sum, r) => sum + r.refused, 0)).toBeGreaterThan(0);
      const max = maxInFlight(spans);
      expect(max).toBeLessThanOrEqual(limit);
      // The limit was reached, so the check had something to catch.
      expect(max).toBeGreaterThanOrEqual(limit - 2);
    }, 60_000);

    it('a holder killed with SIGKILL frees its permit after leaseMs, not before; fences keep rising', async () => {
      const leaseMs = 1500;
      const prefix = uniquePrefix('permits');
      const victim = await startWorker();
      const grant = await send(victim, {
        prefix,
        key: 'crash',
        limit: 1,
        leaseMs,
        attempts: 1,
        lanes: 1,
        costs: [1],
        holdMs: 0,
        holdForever: true,
      });
      expect(grant.fence).toBeGreaterThan(0);
      victim.kill('SIGKILL');
      await new Promise((resolve) => victim.once('exit', resolve));
      const client = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
      try {
        const permits = createPermits({
          store: redisPermitStore({ client: fromIoredis(client) }),
          policy: concurrency({ limit: 1, leaseMs }),
          prefix,
        });
        const startedUs = await redisTimeUs(client);
        let retryAfterMs = 0;
        for (;;) {
          const d = await permits.limit('crash');
          const nowUs = await redisTimeUs(client);
          if (d.permit !== undefined) {
            // Freed no sooner than the lease: the grant came after fence (its grant time) + leaseMs.
            expect(nowUs - (grant.fence as number)).toBeGreaterThanOrEqual(leaseMs * 1000);
            // ... and within the lease plus one polling round (20 ms) and scheduling slack.
            expect(nowUs - startedUs).toBeLessThan(leaseMs * 1000 + 200_000);
            expect(d.permit.fence).toBeGreaterThan(grant.fence as number);
            await d.permit.release();
            break;
          }
          retryAfterMs = d.retryAfterMs;
          expect(retryAfterMs).toBeGreaterThan(0);
          expect(retryAfterMs).toBeLessThanOrEqual(leaseMs);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      } finally {
        await client.quit();
      }
    }, 30_000);
  });
});

async function redisTimeUs(client: Redis): Promise<number> {
  const [s, us] = await client.time();
  return Number(s) * 1_000_000 + Number(us);
}
