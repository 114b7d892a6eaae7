import { Cluster, Redis } from 'ioredis';
import { Cluster as Cluster5, Redis as Redis5 } from 'ioredis5';
import { createClient, createCluster } from 'redis';
import { createClient as createClient4, createCluster as createCluster4 } from 'redis4';
import { createClient as createClient5 } from 'redis5';
import { afterAll, beforeAll } from 'vitest';
import {
  fromIoredis,
  fromNodeRedis,
  type RedisScriptClient,
  type RedisStore,
  type RedisStoreOptions,
  redisStore,
} from '../../../src/stores/redis/index.js';
import { REDIS_HOST, REDIS_PORT } from './servers.js';

/** A connected client of one driver, adapted for the store, and how to close it. */
export interface DriverClient {
  readonly client: RedisScriptClient;
  close(): Promise<void>;
}

/**
 * `ioredis` and `node-redis` are the installed majors (ioredis 6, node-redis 6); the others are the
 * older majors the peer dependency ranges promise (`ioredis >=5`, `redis >=4`), installed under npm
 * aliases (`ioredis5`, `redis4`, `redis5`).
 */
export type Driver = 'ioredis' | 'node-redis' | 'ioredis 5' | 'node-redis 4' | 'node-redis 5';
/** The installed majors: every Redis test runs on these. */
export const DRIVERS: readonly Driver[] = ['ioredis', 'node-redis'];
/** Every supported major: the single-node suite (conformance, randomized comparison) runs on all of them. */
export const ALL_DRIVERS: readonly Driver[] = [...DRIVERS, 'ioredis 5', 'node-redis 4', 'node-redis 5'];

export async function connectSingle(driver: Driver, port = REDIS_PORT): Promise<DriverClient> {
  switch (driver) {
    case 'ioredis': {
      const redis = new Redis({ host: REDIS_HOST, port });
      return { client: fromIoredis(redis), close: async () => void (await redis.quit()) };
    }
    case 'ioredis 5': {
      const redis = new Redis5({ host: REDIS_HOST, port });
      return { client: fromIoredis(redis), close: async () => void (await redis.quit()) };
    }
    case 'node-redis': {
      const redis = await createClient({ socket: { host: REDIS_HOST, port } }).connect();
      return { client: fromNodeRedis(redis), close: async () => void (await redis.quit()) };
    }
    case 'node-redis 4': {
      const redis = createClient4({ socket: { host: REDIS_HOST, port } });
      await redis.connect();
      return { client: fromNodeRedis(redis), close: async () => void (await redis.quit()) };
    }
    case 'node-redis 5': {
      const redis = await createClient5({ socket: { host: REDIS_HOST, port } }).connect();
      return { client: fromNodeRedis(redis), close: async () => void (await redis.quit()) };
    }
  }
}

export async function connectCluster(driver: Driver, ports: readonly number[]): Promise<DriverClient> {
  if (driver === 'ioredis' || driver === 'ioredis 5') {
    const nodes = ports.map((port) => ({ host: REDIS_HOST, port }));
    const cluster = driver === 'ioredis' ? new Cluster(nodes) : new Cluster5(nodes);
    await new Promise<void>((resolve, reject) => {
      cluster.once('ready', () => resolve());
      cluster.once('error', reject);
    });
    return { client: fromIoredis(cluster), close: async () => void (await cluster.quit()) };
  }
  if (driver === 'node-redis 4') {
    // node-redis 4's cluster connect() resolves to nothing, not to the client.
    const cluster = createCluster4({ rootNodes: ports.map((port) => ({ socket: { host: REDIS_HOST, port } })) });
    await cluster.connect();
    return { client: fromNodeRedis(cluster), close: async () => void (await cluster.quit()) };
  }
  if (driver === 'node-redis 5') throw new Error('node-redis 5 is tested on a single node only');
  const cluster = await createCluster({
    rootNodes: ports.map((port) => ({ socket: { host: REDIS_HOST, port } })),
  }).connect();
  return { client: fromNodeRedis(cluster), close: async () => void (await cluster.quit()) };
}

/** A store on a client connected before the suite's tests and closed after them. */
export interface HeldStore {
  readonly connection: DriverClient;
  readonly store: RedisStore;
}

/** Connects in `beforeAll`, builds the store, and closes both in `afterAll` (call inside a `describe`). */
export function holdStore(
  connect: () => Promise<DriverClient>,
  options: Omit<RedisStoreOptions, 'client'> = {},
): HeldStore {
  const held: { connection?: DriverClient; store?: RedisStore } = {};
  beforeAll(async () => {
    held.connection = await connect();
    held.store = redisStore({ client: held.connection.client, ...options });
  });
  afterAll(async () => {
    await held.store?.close();
    await held.connection?.close();
  });
  return held as HeldStore;
}
