import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, definePolicy, type PolicyInput } from '../../src/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import type { LeaseRunMessage, LeaseRunReply } from './fixtures/lease-worker.js';
import { REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

const WORKERS = 4;
const HOUR = 3_600_000;
/** Long enough that nothing refills or rolls over while the test runs. */
const LONG = 30 * 24 * HOUR;
const LIMIT = 1000;

/** Each policy admits exactly LIMIT calls of cost 1 from an untouched key within the test's seconds. */
const CASES: { name: string; policies: PolicyInput[] }[] = [
  { name: 'GCRA', policies: [{ algorithm: 'gcra', limit: LIMIT, periodMs: LONG }] },
  {
    name: 'token bucket, interval',
    policies: [
      { algorithm: 'token-bucket', capacity: LIMIT, refillAmount: 1, refillIntervalMs: LONG, refill: 'interval' },
    ],
  },
  {
    name: 'fixed window, first request',
    policies: [{ algorithm: 'fixed-window', limit: LIMIT, windowMs: HOUR, align: 'first-request' }],
  },
  { name: 'sliding window', policies: [{ algorithm: 'sliding-window', limit: LIMIT, windowMs: LONG }] },
  { name: 'sliding log', policies: [{ algorithm: 'sliding-log', limit: LIMIT, windowMs: HOUR }] },
  {
    name: 'two policies',
    policies: [
      { algorithm: 'gcra', limit: LIMIT, periodMs: LONG, name: 'g' },
      { algorithm: 'fixed-window', limit: LIMIT + 200, windowMs: HOUR, align: 'first-request', name: 'w' },
    ],
  },
];

function send(worker: ChildProcess, message: LeaseRunMessage): Promise<LeaseRunReply> {
  return new Promise((resolve) => {
    worker.once('message', (reply: LeaseRunReply) => resolve(reply));
    worker.send(message);
  });
}

describe.skipIf(!available)('leases on Redis: several processes on one hot key', () => {
  const workers: ChildProcess[] = [];
  let redis: Redis;
  beforeAll(async () => {
    redis = new Redis({ host: '127.0.0.1', port: REDIS_PORT });
    const path = fileURLToPath(new URL('./fixtures/lease-worker.ts', import.meta.url));
    for (let i = 0; i < WORKERS; i++) {
      const worker = fork(path, { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
      workers.push(worker);
      await new Promise((resolve) => worker.once('message', resolve));
    }
  }, 60_000);
  afterAll(async () => {
    await Promise.all(
      workers.map(
        (worker) =>
          new Promise<void>((resolve) => {
            if (worker.exitCode !== null) return resolve();
            worker.once('exit', () => resolve());
            worker.send('exit');
          }),
      ),
    );
    redis?.disconnect();
  });

  for (const testCase of CASES) {
    it(`${testCase.name}: admits at most the limit, and every unused unit comes back`, async () => {
      const prefix = uniquePrefix('lease');
      const key = 'hot key';
      // 4 processes × 8 callers × 50 calls = 1600 calls for 1000 units, leases of 16 lasting 20 ms.
      const replies = await Promise.all(
        workers.map((worker) =>
          send(worker, {
            port: REDIS_PORT,
            policies: testCase.policies,
            prefix,
            key,
            size: 16,
            ttlMs: 20,
            callers: 8,
            calls: 50,
          }),
        ),
      );
      expect(replies.map((r) => r.error)).toEqual(workers.map(() => undefined));
      const admitted = replies.reduce((sum, r) => sum + r.admitted, 0);
      // Zero over-admission: every admitted unit was consumed in Redis first.
      expect(admitted).toBeLessThanOrEqual(LIMIT);
      // Exact accounting: once every process gave its leases back, Redis holds exactly the admitted calls.
      const policies = testCase.policies.map((p, i) => definePolicy(p, `policies[${i}]`));
      const limiter = createLimiter({ store: redisStore({ client: fromIoredis(redis) }), policies, prefix });
      const status = await limiter.status(key);
      expect(status.policies[0]?.remaining).toBe(LIMIT - admitted);
      // Under-admission is bounded by what was leased and not yet given back when calls were denied.
      expect(admitted).toBeGreaterThan(LIMIT * 0.8);
      const storeCalls = replies.reduce((sum, r) => sum + r.storeCalls, 0);
      console.info(
        `${testCase.name}: ${admitted} of ${LIMIT} admitted from ${WORKERS * 8 * 50} calls, ${storeCalls} Redis calls, ${replies.reduce((s, r) => s + r.unitsReturned, 0)} units given back`,
      );
      await limiter.reset(key);
    }, 60_000);
  }
});
