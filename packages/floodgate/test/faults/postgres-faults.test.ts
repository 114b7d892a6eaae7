import pg from 'pg';
import postgres from 'postgres';
import { afterAll, describe, it } from 'vitest';
import { fromPg, fromPostgres, type PostgresClient, postgresStore } from '../../src/stores/postgres/index.js';
import { PG_CONFIG, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';
import { sleep } from './load.js';
import { faultScenario, now } from './scenario.js';

const available = await requirePostgres();
const admin = available ? new pg.Pool({ ...PG_CONFIG, max: 2 }) : undefined;
const schemas: string[] = [];

afterAll(async () => {
  for (const schema of schemas) await admin?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin?.end();
});

type Driver = 'pg' | 'postgres';

/** A pool whose connections carry `application_name`, so the test can find and terminate its backends. */
function connect(driver: Driver, applicationName: string): { client: PostgresClient; close(): Promise<void> } {
  if (driver === 'pg') {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 8, application_name: applicationName });
    // An idle connection whose backend is terminated is reported as a pool error event; without a
    // listener Node would crash. The failure-modes guide tells applications to add one.
    pool.on('error', () => {});
    return { client: fromPg(pool), close: () => pool.end() };
  }
  // fetch_types: false: Postgres.js fetches array types on each new connection and drops that query's
  // promise, so a backend terminated at that moment surfaces as an unhandled rejection (a driver bug,
  // porsager/postgres#1192). The store sends and reads text only; it needs no type catalog.
  const sql = postgres({
    ...PG_CONFIG,
    max: 8,
    onnotice: () => {},
    fetch_types: false,
    connection: { application_name: applicationName },
  });
  return { client: fromPostgres(sql), close: () => sql.end({ timeout: 1 }) };
}

async function terminate(applicationName: string): Promise<number> {
  const result = await (admin as pg.Pool).query(
    'SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
    [applicationName],
  );
  return result.rows.length;
}

describe.skipIf(!available)('PostgreSQL faults, on the shared server', () => {
  for (const driver of ['pg', 'postgres'] as const) {
    it(`${driver}: backends terminated (pg_terminate_backend) again and again mid-load`, async () => {
      const schema = uniqueSchema('fault');
      schemas.push(schema);
      const applicationName = `floodgate-fault-${process.pid}-${driver}`;
      const connection = connect(driver, applicationName);
      try {
        const store = postgresStore({ client: connection.client, schema });
        await store.migrate();
        await faultScenario(
          store,
          async () => {
            const faultAt = now();
            let terminated = 0;
            for (let i = 0; i < 10; i++) {
              terminated += await terminate(applicationName);
              await sleep(100);
            }
            if (terminated === 0) throw new Error('no backend of the store was found to terminate');
            return { faultAt, backAt: now() };
          },
          { label: `${driver}, backends terminated` },
        );
      } finally {
        await connection.close();
      }
    }, 30_000);
  }
});
