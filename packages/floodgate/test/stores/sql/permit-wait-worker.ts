// A separate process waiting for concurrency permits on PostgreSQL or SQLite: started by
// sql-permit-wait.test.ts with `<pg|postgres|sqlite> <schema|file>`. PostgreSQL waiters are woken by
// LISTEN/NOTIFY (pg: a client held from the pool; postgres.js: sql.listen); SQLite ones poll.
import Database from 'better-sqlite3';
import pg from 'pg';
import postgres from 'postgres';
import { concurrency, createPermits, type Permits } from '../../../src/index.js';
import type { PermitStore } from '../../../src/permits/store.js';
import {
  fromPg,
  fromPgListener,
  fromPostgres,
  fromPostgresListener,
  postgresPermitStore,
} from '../../../src/stores/postgres/index.js';
import { sqlitePermitStore } from '../../../src/stores/sqlite/index.js';
import { PG_CONFIG } from './postgres-env.js';

export interface PermitWaitMessage {
  prefix: string;
  key: string;
  label: string;
  limit: number;
  cost: number;
  /** ms to hold the permit once granted. */
  holdMs: number;
  pollMs: number;
}

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
const sets = new Map<string, Permits>();
// The machine's time, µs-precise, the same in every process: when a grant was seen and a release sent.
const wallMs = () => performance.timeOrigin + performance.now();

async function run(m: PermitWaitMessage): Promise<PermitWaitReply> {
  const id = `${m.prefix} ${m.limit} ${m.pollMs}`;
  let permits = sets.get(id);
  if (permits === undefined) {
    permits = createPermits({
      store,
      policy: concurrency({ limit: m.limit, leaseMs: 30_000 }),
      prefix: m.prefix,
      pollMs: m.pollMs,
    });
    sets.set(id, permits);
  }
  const { permit } = await permits.acquire(m.key, { cost: m.cost });
  const grantedMs = wallMs();
  await new Promise((resolve) => setTimeout(resolve, m.holdMs));
  const releasedMs = wallMs();
  await permit.release();
  return { label: m.label, cost: m.cost, fence: permit.fence, grantedMs, releasedMs };
}

process.on('message', (message: PermitWaitMessage | 'exit') => {
  if (message === 'exit') {
    void close().then(() => process.exit(0));
    return;
  }
  void run(message).then(
    (reply) => process.send?.(reply),
    (error: unknown) => process.send?.({ label: message.label, error: String(error) } satisfies PermitWaitReply),
  );
});

process.send?.('ready');
