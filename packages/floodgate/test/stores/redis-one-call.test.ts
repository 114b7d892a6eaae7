import { afterAll, beforeAll, describe } from 'vitest';
import type { Store } from '../../src/index.js';
import { type RedisScriptClient, redisPermitStore, redisStore } from '../../src/stores/redis/index.js';
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
