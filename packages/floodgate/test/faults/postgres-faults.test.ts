import pg from 'pg';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
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

/** Waits (up to `ms`) until a backend of the store waits for a lock: a statement of it is in flight. */
async function statementWaiting(applicationName: string, ms: number): Promise<boolean> {
  const end = now() + ms;
  while (now() < end) {
    const result = await (admin as pg.Pool).query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
      [applicationName],
    );
    if ((result.rows[0] as { n: number }).n > 0) return true;
    await sleep(2);
  }
  return false;
}

/**
 * Terminates the store's backends while statements of it are running, again and again. A call alone is
 * one short statement, so a backend terminated at a random moment is mostly idle (the pool just opens
 * another connection) and the calls may all finish between terminations: each round therefore holds the
 * store's table locked (as a long transaction of another client would), so that the store's statements
 * wait on it, terminates the backends once one waits, and again once the next statement (the calls queued
 * meanwhile, of every limiter) waits, then lets go, well within the calls' timeout. Returns how many
 * rounds terminated a statement in flight.
 */
async function terminateMidStatement(applicationName: string, table: string, rounds: number): Promise<number> {
  let hits = 0;
  for (let round = 0; round < rounds; round++) {
    const holder = await (admin as pg.Pool).connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`LOCK TABLE ${table} IN EXCLUSIVE MODE`);
      let hit = false;
      for (let i = 0; i < 2; i++) {
        if (!(await statementWaiting(applicationName, 150))) break;
        if ((await terminate(applicationName)) > 0) hit = true;
      }
      if (hit) hits++;
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    await sleep(100);
  }
  return hits;
}

describe.skipIf(!available)('PostgreSQL faults, on the shared server', () => {
  for (const driver of ['pg', 'postgres'] as const) {
    it(`${driver}: backends terminated (pg_terminate_backend) mid-statement, again and again under load`, async () => {
      const schema = uniqueSchema('fault');
      schemas.push(schema);
      const applicationName = `floodgate-fault-${process.pid}-${driver}`;
      const connection = connect(driver, applicationName);
      try {
        const store = postgresStore({ client: connection.client, schema });
        await store.migrate();
        const calls = await faultScenario(
          store,
          async () => {
            const faultAt = now();
            const hits = await terminateMidStatement(applicationName, `"${store.schema}"."${store.table}"`, 8);
            if (hits === 0) throw new Error('no statement of the store was terminated in flight');
            return { faultAt, backAt: now() };
          },
          { label: `${driver}, backends terminated` },
        );
        // The terminations themselves surfaced: calls failed on the driver's error (ERR_STORE_UNAVAILABLE
        // with the driver's error as its cause), not only on the timeout or the open breaker that follow.
        const fromDriver = calls.throw.filter((c) => {
          const error = c.error as { code?: string; cause?: unknown } | undefined;
          return error?.code === 'ERR_STORE_UNAVAILABLE' && error.cause !== undefined;
        });
        expect(fromDriver.length).toBeGreaterThan(0);
      } finally {
        await connection.close();
      }
    }, 30_000);
  }
});
