import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import {
  memoryOverrides,
  type OverrideBackend,
  postgresOverrides,
  redisOverrides,
  sqliteOverrides,
} from '../../src/overrides/index.js';
import { fromPg } from '../../src/stores/postgres/index.js';
import { fromIoredis } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable } from '../stores/redis/servers.js';
import { PG_CONFIG, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';

/** One override backend on a real server (or in process), and how to release it. */
export interface HeldBackend {
  name: string;
  /** A fresh backend over shared storage: two of them act as two processes. */
  open(): OverrideBackend;
  close(): Promise<void>;
}

export const redisUp = await redisAvailable();
export const postgresUp = await requirePostgres();

/** The backends to test: memory and SQLite always, Redis and PostgreSQL when their servers answer. */
export async function heldBackends(): Promise<HeldBackend[]> {
  const held: HeldBackend[] = [];
  const memory = memoryOverrides();
  held.push({ name: 'memory', open: () => memory, close: async () => {} });
  const db = new Database(':memory:');
  const sqliteTable = 'ov_test';
  await sqliteOverrides({ database: db, table: sqliteTable }).migrate();
  held.push({
    name: 'sqlite',
    open: () => sqliteOverrides({ database: db, table: sqliteTable }),
    close: async () => {
      db.close();
    },
  });
  if (redisUp) {
    const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
    const prefix = uniquePrefix('ov');
    held.push({
      name: 'redis',
      open: () => redisOverrides({ client: fromIoredis(redis), prefix }),
      close: async () => {
        await redis.del(...['records', 'index', 'expiry', 'version'].map((k) => `{${prefix}:overrides}:${k}`));
        await redis.quit();
      },
    });
  }
  if (postgresUp) {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 4 });
    const schema = uniqueSchema('ov');
    await postgresOverrides({ client: fromPg(pool), schema }).migrate();
    held.push({
      name: 'postgres',
      open: () => postgresOverrides({ client: fromPg(pool), schema }),
      close: async () => {
        await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
        await pool.end();
      },
    });
  }
  return held;
}
