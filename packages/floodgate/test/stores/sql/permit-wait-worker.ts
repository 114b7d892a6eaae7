// A separate process waiting for concurrency permits on PostgreSQL or SQLite: started by
// sql-permit-wait.test.ts with `<pg|postgres|sqlite> <schema|file>`. PostgreSQL waiters are woken by
// LISTEN/NOTIFY (pg: a client held from the pool; postgres.js: sql.listen); SQLite ones poll.
import Database from 'better-sqlite3';
import pg from 'pg';
import postgres from 'postgres';
import type { PermitStore } from '../../../src/permits/store.js';
import {
  fromPg,
  fromPgListener,
  fromPostgres,
  fromPostgresListener,
  postgresPermitStore,
} from '../../../src/stores/postgres/index.js';
import { sqlitePermitStore } from '../../../src/stores/sqlite/index.js';
import { holdFor, serveWaitOrders, type WaitOrder } from '../wait-worker-kit.js';
import { PG_CONFIG } from './postgres-env.js';

export type PermitWaitMessage = WaitOrder;

export type PermitWaitReply =
  | { label: string; cost: number; fence: number; grantedMs: number; releasedMs: number }
  | { label: string; error: string };

const [kind, target] = process.argv.slice(2) as ['pg' | 'postgres' | 'sqlite', string];
let store: PermitStore;
let close: () => Promise<void>;
if (kind === 'pg') {
  const pool = new pg.Pool({ ...PG_CONFIG, max: 4 });
  const held = await pool.connect();
  store = postgresPermitStore({ client: fromPg(pool), schema: target, listener: fromPgListener(held) });
  close = async () => {
    held.release();
    await pool.end();
  };
} else if (kind === 'postgres') {
  const sql = postgres({ ...PG_CONFIG, max: 4, onnotice: () => {} });
  store = postgresPermitStore({ client: fromPostgres(sql), schema: target, listener: fromPostgresListener(sql) });
  close = () => sql.end();
} else {
  const database = new Database(target);
  store = sqlitePermitStore({ database });
  close = async () => {
    database.close();
  };
}
// The machine's time, µs-precise, the same in every process: when a grant was seen and a release sent.
const wallMs = () => performance.timeOrigin + performance.now();

serveWaitOrders<PermitWaitReply>(
  () => store,
  async (m, permit) => {
    const grantedMs = wallMs();
    await holdFor(m.holdMs);
    const releasedMs = wallMs();
    await permit.release();
    return { label: m.label, cost: m.cost, fence: permit.fence, grantedMs, releasedMs };
  },
  close,
);
