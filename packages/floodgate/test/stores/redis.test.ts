import { afterAll, beforeAll, describe, it } from 'vitest';
import { type RedisStore, redisStore } from '../../src/stores/redis/index.js';
import { runConformanceSuite } from '../../src/testing/index.js';
import { connectSingle, DRIVERS, type DriverClient } from './redis/clients.js';
import { redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

for (const driver of DRIVERS) {
  describe.skipIf(!available)(`redis store, single node, ${driver}`, () => {
    let connection: DriverClient;
    let store: RedisStore;
    beforeAll(async () => {
      connection = await connectSingle(driver);
      store = redisStore({ client: connection.client });
    });
    afterAll(async () => {
      await store?.close();
      await connection?.close();
    });
    runConformanceSuite({ describe, it }, { store: () => store, randomRuns: 16 });
  });
}
