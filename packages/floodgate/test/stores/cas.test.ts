import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PgCasStore, pgCasStore } from '../../examples/cas-store.js';
import { createLimiter, gcra, slidingLog } from '../../src/index.js';
import { recordKey } from '../../src/stores/index.js';
import {
  manualClock,
  runConformanceSuite,
  runPlainDataSuite,
  SCENARIO_START_MS,
  uniquePrefix,
} from '../../src/testing/index.js';
import { PG_CONFIG, requirePostgres } from './sql/postgres-env.js';

/**
 * The example store of docs/architecture.md ("How to write a store"): the kit's compare-and-swap builder
 * on a PostgreSQL table of versioned records, run as a store against the real server: the whole
 * conformance suite, and exact counts when two stores (two processes' worth of writers, each with its
 * own pool) race on one key.
 */

const available = await requirePostgres();
const table = `fg_cas_${process.pid}_${Date.now().toString(36)}`;
const pools: pg.Pool[] = [];
function pool(): pg.Pool {
  const p = new pg.Pool({ ...PG_CONFIG, max: 4 });
  pools.push(p);
  return p;
}

let store: PgCasStore;
beforeAll(async () => {
  if (!available) return;
  store = pgCasStore({ pool: pool(), table });
  await store.migrate();
  await store.migrate();
});
afterAll(async () => {
  await store?.close();
  if (available) await pools[0]?.query(`DROP TABLE IF EXISTS "${table}"`);
  await Promise.all(pools.map((p) => p.end()));
});

describe('the example store', () => {
  it('is the code docs/architecture.md shows', () => {
    const docs = readFileSync(new URL('../../../../docs/architecture.md', import.meta.url), 'utf8');
    const code = readFileSync(new URL('../../examples/cas-store.ts', import.meta.url), 'utf8');
    expect(docs).toContain(`\`\`\`ts\n${code}\`\`\``);
  });
});

describe.skipIf(!available)('the example store: compare-and-swap on PostgreSQL', () => {
  runConformanceSuite({ describe, it }, { store: () => store, randomRuns: 8 });
  runPlainDataSuite({ describe, it }, { store: () => store });

  it('admits exactly the limit when two stores race on one key, each retrying the writes it loses', async () => {
    const other = pgCasStore({ pool: pool(), table });
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const prefix = uniquePrefix('race');
    const policies = [gcra({ limit: 50, periodMs: 60_000 }), slidingLog({ limit: 60, windowMs: 60_000 })];
    const limiters = [store, other].map((s) => createLimiter({ store: s, clock, prefix, policies }));
    const decisions = await Promise.all(
      Array.from({ length: 200 }, (_, i) => (limiters[i % 2] as (typeof limiters)[0]).limit('hot')),
    );
    expect(decisions.filter((d) => d.allowed).length).toBe(50);
    const { rows } = await (pools[0] as pg.Pool).query(`SELECT version FROM "${table}" WHERE key = $1`, [
      recordKey(prefix, 'hot'),
    ]);
    // One write per batch of calls that found the record unchanged: far fewer than the 200 calls.
    expect(Number(rows[0]?.version)).toBeGreaterThan(1);
    expect(Number(rows[0]?.version)).toBeLessThan(200);
    await other.close();
  });

  it('prune() deletes the records that expired, and only those', async () => {
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const prefix = uniquePrefix('prune');
    const limiter = createLimiter({ store, clock, prefix, policies: [gcra({ limit: 5, periodMs: 1000 })] });
    await limiter.limit('a');
    await limiter.limit('b');
    // Untouched again after 200 ms, plus the kit's minute of grace.
    expect(await store.prune(SCENARIO_START_MS + 60_000)).toBe(0);
    clock.advance(120_000);
    await limiter.limit('b');
    const deleted = await store.prune(SCENARIO_START_MS + 61_000);
    expect(deleted).toBeGreaterThanOrEqual(1);
    const { rows } = await (pools[0] as pg.Pool).query(`SELECT key FROM "${table}" WHERE key = ANY($1)`, [
      [recordKey(prefix, 'a'), recordKey(prefix, 'b')],
    ]);
    expect(rows.map((r) => r.key)).toEqual([recordKey(prefix, 'b')]);
  });

  it('keeps hostile keys apart and stores them as data', async () => {
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const prefix = uniquePrefix('hostile');
    const limiter = createLimiter({ store, clock, prefix, policies: [gcra({ limit: 3, periodMs: 60_000 })] });
    const keys = ["o'brien", '"; DROP TABLE x; --', 'a}b{c', 'nul\0byte', '\ud800', '%7B', '{', 'k'.repeat(5000)];
    for (const [i, key] of keys.entries()) {
      for (let n = 0; n <= i % 3; n++) await limiter.limit(key);
    }
    for (const [i, key] of keys.entries()) expect((await limiter.status(key)).remaining).toBe(3 - ((i % 3) + 1));
    const { rows } = await (pools[0] as pg.Pool).query(`SELECT key FROM "${table}" WHERE key LIKE $1`, [`${prefix}:%`]);
    expect(rows.map((r) => r.key).sort()).toEqual(keys.map((key) => recordKey(prefix, key)).sort());
  });

  it('refuses a table name that is not a plain identifier', () => {
    expect(() => pgCasStore({ pool: pools[0] as pg.Pool, table: 'x"; DROP TABLE y; --' })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'table' }),
    );
  });
});
