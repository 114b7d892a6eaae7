import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, definePolicy, type PolicyInput, type Store } from '../../src/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import type { SyncedRunMessage, SyncedRunReply } from './fixtures/synced-worker.js';
import { REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const postgresUp = await requirePostgres();

const WORKERS = 4;
const HOUR = 3_600_000;
const LIMIT = 1000;
const BUDGET = 16;
const BOUND = WORKERS * BUDGET;

/** Each policy admits exactly LIMIT calls of cost 1 from an untouched key within the test's seconds. */
const CASES: { name: string; policies: PolicyInput[] }[] = [
  {
    name: 'fixed window',
    policies: [{ algorithm: 'fixed-window', limit: LIMIT, windowMs: HOUR, align: 'first-request' }],
  },
  { name: 'GCRA', policies: [{ algorithm: 'gcra', limit: LIMIT, periodMs: 30 * 24 * HOUR }] },
  { name: 'sliding log', policies: [{ algorithm: 'sliding-log', limit: LIMIT, windowMs: HOUR }] },
];

function send(worker: ChildProcess, message: SyncedRunMessage): Promise<SyncedRunReply> {
  return new Promise((resolve) => {
    worker.once('message', (reply: SyncedRunReply) => resolve(reply));
    worker.send(message);
  });
}

for (const kind of ['redis', 'postgres'] as const) {
  const up = kind === 'redis' ? redisUp : postgresUp;
  describe.skipIf(!up)(`synced limiter on ${kind}: several processes on one hot key`, () => {
    const workers: ChildProcess[] = [];
    const schema = uniqueSchema('synced');
    let store: Store;
    let redis: Redis | undefined;
    let connection: Connection | undefined;
    beforeAll(async () => {
      if (kind === 'redis') {
        redis = new Redis({ host: '127.0.0.1', port: REDIS_PORT });
        store = redisStore({ client: fromIoredis(redis) });
      } else {
        connection = connect('pg', 2);
        const pgStore = postgresStore({ client: connection.client, schema, table: 'synced' });
        await pgStore.migrate();
        store = pgStore;
      }
      const path = fileURLToPath(new URL('./fixtures/synced-worker.ts', import.meta.url));
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
      if (connection !== undefined) {
        await connection.sql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await connection.close();
      }
    });

    for (const testCase of CASES) {
      it(`${testCase.name}: over-admits at most ${WORKERS} processes × a budget of ${BUDGET}`, async () => {
        const prefix = uniquePrefix('synced');
        const key = 'hot key';
        // 4 processes × 8 callers × 50 calls = 1600 calls for 1000 units, syncing every 10 ms.
        const replies = await Promise.all(
          workers.map((worker) =>
            send(worker, {
              store: kind,
              redisPort: REDIS_PORT,
              schema,
              policies: testCase.policies,
              prefix,
              key,
              syncMs: 10,
              localBudget: BUDGET,
              callers: 8,
              calls: 50,
            }),
          ),
        );
        expect(replies.map((r) => r.error)).toEqual(workers.map(() => undefined));
        const admitted = replies.reduce((sum, r) => sum + r.admitted, 0);
        const over = admitted - LIMIT;
        // Never under: every unit the store had was admitted by someone; never over by more than the bound.
        expect(over).toBeGreaterThanOrEqual(0);
        expect(over).toBeLessThanOrEqual(BOUND);
        // The store counted the whole limit: every admission was pushed, or owed when it did not fit.
        const policies = testCase.policies.map((p, i) => definePolicy(p, `policies[${i}]`));
        const limiter = createLimiter({ store, policies, prefix });
        expect((await limiter.status(key)).remaining).toBe(0);
        const local = replies.reduce((sum, r) => sum + r.localDecisions, 0);
        const storeCalls = replies.reduce((sum, r) => sum + r.storeCalls, 0);
        const owed = replies.reduce((sum, r) => sum + r.unitsOwed, 0);
        expect(local).toBeGreaterThan(0);
        console.info(
          `synced, ${kind}, ${testCase.name}: ${admitted} of ${LIMIT} admitted (over by ${over}, bound ${BOUND}) from ${WORKERS * 8 * 50} calls; ${local} decided locally, ${storeCalls} store calls, ${owed} units owed`,
        );
        await limiter.reset(key);
      }, 60_000);
    }
  });
}
