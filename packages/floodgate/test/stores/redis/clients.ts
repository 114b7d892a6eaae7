import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
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

export type Driver = 'ioredis' | 'node-redis';
export const DRIVERS: readonly Driver[] = ['ioredis', 'node-redis'];

export async function connectSingle(driver: Driver, port = REDIS_PORT): Promise<DriverClient> {
  if (driver === 'ioredis') {
    const redis = new Redis({ host: REDIS_HOST, port });
    return { client: fromIoredis(redis), close: async () => void (await redis.quit()) };
  }
  const redis = await createClient({ socket: { host: REDIS_HOST, port } }).connect();
  return { client: fromNodeRedis(redis), close: async () => void (await redis.quit()) };
}

export async function connectCluster(driver: Driver, ports: readonly number[]): Promise<DriverClient> {
  if (driver === 'ioredis') {
    const cluster = new Cluster(ports.map((port) => ({ host: REDIS_HOST, port })));
    await new Promise<void>((resolve, reject) => {
      cluster.once('ready', () => resolve());
      cluster.once('error', reject);
    });
    return { client: fromIoredis(cluster), close: async () => void (await cluster.quit()) };
  }
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
