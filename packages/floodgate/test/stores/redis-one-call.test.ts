import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createLimiter, gcra, type Store } from '../../src/index.js';
import { fromIoredis, type RedisScriptClient, redisPermitStore, redisStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { runOneCallSuite } from '../permits/one-call-kit.js';
import { connectCluster, connectSingle, DRIVERS, type Driver, type DriverClient } from './redis/clients.js';
import { redisAvailable, requireServer, startCluster, type TestCluster } from './redis/servers.js';

// The one-call path (a limit and its permit in one script) on a Redis server and on a Redis Cluster
// started here (3 primaries, 3 replicas): the client is the real one, wrapped only to count its script
// calls (each one round trip).

const single = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
let cluster: TestCluster | undefined;
let startError: unknown;
try {
  cluster = await startCluster();
} catch (error) {
  startError = error;
}
const clustered = requireServer(
  cluster !== undefined,
  `a Redis Cluster started from redis-server (${String(startError)})`,
);

afterAll(async () => {
  await cluster?.stop();
});

/** The client, its EVALSHA and EVAL calls counted. */
function counted(client: RedisScriptClient): { client: RedisScriptClient; calls: () => number } {
  let calls = 0;
  return {
    client: {
      cluster: client.cluster,
      evalsha: (sha, keys, args) => {
        calls++;
        return client.evalsha(sha, keys, args);
      },
      eval: (script, keys, args) => {
        calls++;
        return client.eval(script, keys, args);
      },
      unreachable: () => client.unreachable?.(),
    },
    calls: () => calls,
  };
}

function suiteOn(name: string, connect: () => Promise<DriverClient>): void {
  const held: { connection?: DriverClient; counted?: ReturnType<typeof counted>; stores: Store[] } = { stores: [] };
  beforeAll(async () => {
    held.connection = await connect();
    held.counted = counted(held.connection.client);
  });
  afterAll(async () => {
    for (const store of held.stores) await store.close?.();
    await held.connection?.close();
  });
  const keep = <S extends Store>(store: S): S => {
    held.stores.push(store);
    return store;
  };
  runOneCallSuite({
    name,
    own: () => keep(redisStore({ client: held.counted?.client as RedisScriptClient })),
    separate: () => {
      const client = held.connection?.client as RedisScriptClient;
      return { store: keep(redisStore({ client })), permits: redisPermitStore({ client }) };
    },
    calls: () => held.counted?.calls() ?? Number.NaN,
  });
}

for (const driver of DRIVERS) {
  describe.skipIf(!single)(`the one-call path on Redis, ${driver}`, () => {
    suiteOn(`redis ${driver}`, () => connectSingle(driver));
  });
  describe.skipIf(!clustered)(`the one-call path on Redis Cluster, ${driver}`, () => {
    suiteOn(`redis cluster ${driver}`, () => connectCluster(driver as Driver, (cluster as TestCluster).ports));
  });
}

const run = promisify(execFile);
const worker = fileURLToPath(new URL('./redis/one-call-worker.ts', import.meta.url));

describe.skipIf(!single)('the one-call path on Redis across processes', () => {
  // Four processes of ten calls in flight each, 60 calls a process, none released: whatever the
  // interleaving, the binding policy admits exactly its limit, a concurrency refusal charges no rate, and
  // a rate denial holds no permit.
  const fleet = async (prefix: string, key: string, rate: number, inFlight: number) => {
    const replies = await Promise.all(
      [1, 2, 3, 4].map(() =>
        run(process.execPath, ['--import', 'tsx', worker, prefix, key, String(rate), String(inFlight), '60', '10'], {
          encoding: 'utf8',
        }),
      ),
    );
    const counts = replies.map((r) => JSON.parse(r.stdout) as { admitted: number; inflight: number; rate: number });
    return counts.reduce((a, b) => ({
      admitted: a.admitted + b.admitted,
      inflight: a.inflight + b.inflight,
      rate: a.rate + b.rate,
    }));
  };

  it('admits exactly the limit of the binding policy, charging and holding nothing more', async () => {
    const redis = new Redis({ host: '127.0.0.1', port: 6379 });
    try {
      const prefix = uniquePrefix('fleet');
      const policies = (rate: number, inFlight: number) => [
        gcra({ limit: rate, periodMs: 86_400_000, name: 'rate' }),
        concurrency({ limit: inFlight, leaseMs: 600_000, name: 'inflight' }),
      ];
      const leases = async (key: string) => redis.zcard(`${prefix}:{${key}}:inflight:l`);
      // The concurrency policy binds: 25 admitted and held; the rate charged for those 25 only.
      const held = await fleet(prefix, 'held', 40, 25);
      expect(held).toEqual({ admitted: 25, inflight: 215, rate: 0 });
      expect(await leases('held')).toBe(25);
      const store = redisStore({ client: fromIoredis(redis) });
      const onHeld = createLimiter({ policies: policies(40, 25), store, prefix });
      expect((await onHeld.status('held')).policies[0]).toMatchObject({ policy: 'rate', remaining: 15 });
      // The rate binds: 20 admitted, and only their 20 permits held.
      const rated = await fleet(prefix, 'rated', 20, 50);
      expect(rated.admitted).toBe(20);
      expect(rated.inflight + rated.rate).toBe(220);
      expect(await leases('rated')).toBe(20);
      await store.close();
    } finally {
      await redis.quit();
    }
  }, 120_000);
});
