import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, definePolicy, type PolicyInput } from '../../src/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { connectSingle, DRIVERS, holdStore } from './redis/clients.js';
import { redisAvailable, requireServer } from './redis/servers.js';
import type { RunMessage, RunReply } from './redis/worker.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

const WORKERS = 4;
const REQUESTS_PER_WORKER = 120;
const HOUR = 3_600_000;
/** Long enough that nothing refills or rolls over while the test runs. */
const LONG = 30 * 24 * HOUR;
const LIMIT = 137;

/** Each policy admits exactly LIMIT calls of cost 1 from an untouched key within the test's few seconds. */
const CASES: { name: string; policies: PolicyInput[]; admits: number }[] = [
  { name: 'GCRA', policies: [{ algorithm: 'gcra', limit: LIMIT, periodMs: HOUR }], admits: LIMIT },
  {
    name: 'token bucket, continuous',
    policies: [{ algorithm: 'token-bucket', capacity: LIMIT, refillAmount: 1, refillIntervalMs: HOUR }],
    admits: LIMIT,
  },
  {
    name: 'token bucket, interval',
    policies: [
      { algorithm: 'token-bucket', capacity: LIMIT, refillAmount: 1, refillIntervalMs: HOUR, refill: 'interval' },
    ],
    admits: LIMIT,
  },
  {
    name: 'leaky bucket, meter',
    policies: [{ algorithm: 'leaky-bucket', capacity: LIMIT, leakPerSecond: 1 / 3600 }],
    admits: LIMIT,
  },
  {
    name: 'leaky bucket, queue',
    policies: [{ algorithm: 'leaky-bucket', capacity: LIMIT, leakPerSecond: 1 / 3600, mode: 'queue' }],
    admits: LIMIT,
  },
  {
    name: 'fixed window, first request',
    policies: [{ algorithm: 'fixed-window', limit: LIMIT, windowMs: HOUR, align: 'first-request' }],
    admits: LIMIT,
  },
  {
    name: 'fixed window, clock',
    policies: [{ algorithm: 'fixed-window', limit: LIMIT, windowMs: LONG }],
    admits: LIMIT,
  },
  { name: 'sliding window', policies: [{ algorithm: 'sliding-window', limit: LIMIT, windowMs: LONG }], admits: LIMIT },
  { name: 'sliding log', policies: [{ algorithm: 'sliding-log', limit: LIMIT, windowMs: HOUR }], admits: LIMIT },
  {
    name: 'sliding log counting denials, with a penalty box',
    policies: [{ algorithm: 'sliding-log', limit: LIMIT, windowMs: HOUR, countDenied: true, blockMs: HOUR }],
    admits: LIMIT,
  },
  {
    name: 'two policies (GCRA binds first)',
    policies: [
      { algorithm: 'gcra', limit: 60, periodMs: HOUR, name: 'g' },
      { algorithm: 'fixed-window', limit: 100, windowMs: HOUR, align: 'first-request', name: 'w' },
    ],
    admits: 60,
  },
  {
    name: 'two policies (the window binds first)',
    policies: [
      { algorithm: 'gcra', limit: 100, periodMs: HOUR, name: 'g' },
      { algorithm: 'fixed-window', limit: 60, windowMs: HOUR, align: 'first-request', name: 'w' },
    ],
    admits: 60,
  },
];

function send(worker: ChildProcess, message: RunMessage): Promise<RunReply> {
  return new Promise((resolve) => {
    worker.once('message', (reply: RunReply) => resolve(reply));
    worker.send(message);
  });
}

describe.skipIf(!available)('redis store: exact admissions from several processes at once', () => {
  const workers: ChildProcess[] = [];
  beforeAll(async () => {
    const path = fileURLToPath(new URL('./redis/worker.ts', import.meta.url));
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
  });

  for (const driver of DRIVERS) {
    describe(driver, () => {
      const held = holdStore(() => connectSingle(driver));

      for (const testCase of CASES) {
        it(`${testCase.name}: ${WORKERS} processes × ${REQUESTS_PER_WORKER} calls in flight admit exactly ${testCase.admits}`, async () => {
          const prefix = uniquePrefix('conc');
          const key = 'one key';
          const replies = await Promise.all(
            workers.map((worker) =>
              send(worker, { driver, policies: testCase.policies, prefix, key, requests: REQUESTS_PER_WORKER }),
            ),
          );
          expect(replies.map((r) => r.error)).toEqual(workers.map(() => undefined));
          const admitted = replies.reduce((sum, r) => sum + r.admitted, 0);
          expect(admitted).toBe(testCase.admits);
          expect(admitted + replies.reduce((sum, r) => sum + r.denied, 0)).toBe(WORKERS * REQUESTS_PER_WORKER);

          // Denied calls consumed nothing: every policy holds exactly the admitted calls.
          const policies = testCase.policies.map((p, i) => definePolicy(p, `policies[${i}]`));
          const limiter = createLimiter({ store: held.store, policies, prefix });
          const status = await limiter.status(key);
          for (const [i, part] of status.policies.entries()) {
            const policy = policies[i];
            const capacity = policy === undefined ? 0 : 'limit' in policy ? policy.limit : policy.capacity;
            if (part.reason === 'blocked') continue;
            expect(part.remaining, part.policy).toBe(capacity - testCase.admits);
          }
          await limiter.reset(key);
        }, 60_000);
      }
    });
  }
});
