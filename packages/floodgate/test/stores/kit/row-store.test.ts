import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra } from '../../../src/index.js';
import {
  type RowDatabase,
  type RowStore,
  type RowTransaction,
  rowStore,
  type StoredRow,
} from '../../../src/stores/index.js';
import { manualClock, runConformanceSuite, SCENARIO_START_MS, uniquePrefix } from '../../../src/testing/index.js';
import { PG_CONFIG, requirePostgres } from '../sql/postgres-env.js';

/**
 * The transaction builder on PostgreSQL, through an adapter of a few lines (below): a row per policy, an
 * advisory lock per user key for writes (a row lock would not cover a row not created yet). The whole
 * conformance suite on the real server, and exact counts when two stores race on one key.
 */

const available = await requirePostgres();
const table = `fg_rows_${process.pid}_${Date.now().toString(36)}`;
const pools: pg.Pool[] = [];

function pgRows(pool: pg.Pool, counts: { transactions: number }): RowDatabase {
  const t = `"${table}"`;
  const rowsOf = (client: pg.Pool | pg.PoolClient): RowTransaction => ({
    async read(keys) {
      const { rows } = await client.query(`SELECT key, state, at_us FROM ${t} WHERE key = ANY($1)`, [keys]);
      const found = new Map(rows.map((r) => [r.key as string, r]));
      return keys.map((key): StoredRow | undefined => {
        const row = found.get(key);
        return row === undefined ? undefined : { state: JSON.parse(row.state), atUs: Number(row.at_us) };
      });
    },
    async write(rows) {
      await client.query(
        `INSERT INTO ${t} (key, state, expires_at, at_us)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
         ON CONFLICT (key) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at, at_us = excluded.at_us`,
        [
          rows.map((r) => r.key),
          rows.map((r) => JSON.stringify(r.state)),
          rows.map((r) => r.expiresAtUs),
          rows.map((r) => r.atUs),
        ],
      );
    },
    async remove(keys) {
      await client.query(`DELETE FROM ${t} WHERE key = ANY($1)`, [keys]);
    },
  });
  return {
    async transaction(write, users, body) {
      counts.transactions++;
      // A read-only batch reads once, in one statement: consistent by itself, no transaction needed.
      if (!write) return body(rowsOf(pool));
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SELECT pg_advisory_xact_lock(hashtextextended(u, 0)) FROM unnest($1::text[]) AS u', [
          users,
        ]);
        const result = await body(rowsOf(client));
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    },
  };
}

function store(counts = { transactions: 0 }, maxInFlight = 4): RowStore {
  const pool = new pg.Pool({ ...PG_CONFIG, max: maxInFlight });
  pools.push(pool);
  return rowStore({ name: 'pg-rows', database: pgRows(pool, counts), expiryGrainUs: 60_000_000, maxInFlight });
}

let shared: RowStore;
beforeAll(async () => {
  if (!available) return;
  const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
  pools.push(pool);
  await pool.query(
    `CREATE TABLE "${table}" (key text PRIMARY KEY, state text NOT NULL, expires_at bigint NOT NULL, at_us bigint NOT NULL)`,
  );
  shared = store();
});
afterAll(async () => {
  await shared?.close();
  if (available) await pools[0]?.query(`DROP TABLE IF EXISTS "${table}"`);
  await Promise.all(pools.map((p) => p.end()));
});

describe.skipIf(!available)('rowStore on PostgreSQL (advisory locks per user key)', () => {
  runConformanceSuite({ describe, it }, { store: () => shared, randomRuns: 8 });

  it('admits exactly the limit when two stores race on one key; calls waiting share a transaction', async () => {
    const counts = { transactions: 0 };
    const [one, two] = [store(counts), store(counts)] as const;
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const prefix = uniquePrefix('race');
    const policies = [gcra({ limit: 50, periodMs: 60_000 }), fixedWindow({ limit: 70, windowMs: 60_000 })];
    const limiters = [one, two].map((s) => createLimiter({ store: s, clock, prefix, policies }));
    const decisions = await Promise.all(
      Array.from({ length: 300 }, (_, i) => (limiters[i % 2] as (typeof limiters)[0]).limit(`hot-${i % 3}`)),
    );
    expect(decisions.filter((d) => d.allowed).length).toBe(150);
    expect(counts.transactions).toBeLessThan(300);
    await Promise.all([one.close(), two.close()]);
  });

  it('rounds expiries up to its grain', async () => {
    const clock = manualClock({ startMs: SCENARIO_START_MS + 1 });
    const prefix = uniquePrefix('grain');
    const limiter = createLimiter({ store: shared, clock, prefix, policies: [gcra({ limit: 1, periodMs: 1000 })] });
    await limiter.limit('k');
    const { rows } = await (pools[0] as pg.Pool).query(`SELECT expires_at FROM "${table}" WHERE key LIKE $1`, [
      `${prefix}:%`,
    ]);
    expect(rows.map((r) => Number(r.expires_at))).toEqual([(SCENARIO_START_MS + 60_000) * 1000]);
  });
});
