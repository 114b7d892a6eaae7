// Pruning on a clock that runs ahead: a victim limiter on the system clock spends its 5 of
// `fixedWindow({ limit: 5, windowMs: 3_600_000 })`, then a limiter whose clock runs two hours ahead creates 40
// keys in the same table (each new row prunes expired ones), then the victim tries 5 more calls. Reports the
// victim's rows left and the calls it got back (exact: 1 row, 0 more). SQLite (a file in a temporary
// directory) and PostgreSQL (127.0.0.1:5432, database `test`, a schema of its own dropped at the end).
//
//   npm run build && node --import tsx packages/floodgate/bench/prune-ahead.ts
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createLimiter, fixedWindow, type Store } from 'floodgate';
import { fromPg, postgresStore } from 'floodgate/postgres';
import { sqliteStore } from 'floodgate/sqlite';
import { manualClock } from 'floodgate/testing';
import pg from 'pg';

const HOUR_MS = 3_600_000;
const policy = fixedWindow({ limit: 5, windowMs: HOUR_MS, name: 'hour' });

async function attack(store: Store, victimRows: () => Promise<number>): Promise<string> {
  const victim = createLimiter({ store, prefix: 'victim', policies: [policy] });
  let admitted = 0;
  for (let i = 0; i < 5; i++) if ((await victim.limit('v')).allowed) admitted++;
  const ahead = createLimiter({
    store,
    prefix: 'ahead',
    clock: manualClock({ startMs: Date.now() + 2 * HOUR_MS }),
    policies: [policy],
  });
  for (let i = 0; i < 40; i++) await ahead.limit(`new-${i}`);
  const left = await victimRows();
  let extra = 0;
  for (let i = 0; i < 5; i++) if ((await victim.limit('v')).allowed) extra++;
  return `victim admitted ${admitted} of 5, its rows left after the limiter ahead: ${left}, then ${extra} more of 5 admitted`;
}

const directory = mkdtempSync(join(tmpdir(), 'floodgate-prune-'));
try {
  const database = new Database(join(directory, 'state.db'));
  const store = sqliteStore({ database });
  store.migrate();
  const rows = async () =>
    (database.prepare("SELECT count(*) AS n FROM floodgate_state WHERE key LIKE 'victim:%'").get() as { n: number }).n;
  console.log(`sqlite:   ${await attack(store, rows)}`);
  database.close();
} finally {
  rmSync(directory, { recursive: true, force: true });
}

const pool = new pg.Pool({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test', max: 2 });
const schema = `bench_prune_${process.pid}`;
try {
  const store = postgresStore({ client: fromPg(pool), schema, table: 'state' });
  await store.migrate();
  const rows = async () =>
    Number((await pool.query(`SELECT count(*) AS n FROM ${schema}.state WHERE key LIKE 'victim:%'`)).rows[0].n);
  console.log(`postgres: ${await attack(store, rows)}`);
  await store.close();
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await pool.end();
}
