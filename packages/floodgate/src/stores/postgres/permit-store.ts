import { createHash } from 'node:crypto';
import { FloodgateError, invalid } from '../../errors.js';
import type { AcquireReply } from '../../permits/model.js';
import type * as Port from '../../permits/store.js';
import { checkPermitCall } from '../../permits/store-args.js';
import { channelWatch } from '../kit/channel-watch.js';
import { integerReply } from '../kit/integer-reply.js';
import { checkOptionsObject, hasMethods } from '../kit/options.js';
import { validateIdentifier } from '../sql/common.js';
import type { PostgresListener } from './listener.js';
import {
  PERMIT_SQL_VERSION,
  type PermitFunction,
  type PermitSqlNames,
  permitChannel,
  permitMigrationStatement,
  permitSqlNames,
  permitStatement,
} from './permits-sql.js';
import type { PostgresClient } from './postgres-client.js';
import { RESERVED_INFIX } from './sql.js';

/** Options of {@link postgresPermitStore}. */
export interface PostgresPermitStoreOptions {
  /** The driver, through an adapter: `fromPg(pool)` or `fromPostgres(sql)`. The store never closes it. */
  client: PostgresClient;
  /** Schema of the tables and functions, created by `migrate()` when missing. @default 'public' */
  schema?: string;
  /**
   * Table of the leases: `[a-z_][a-z0-9_]*`, at most 40 characters, not containing `__fg_`; the fences
   * live beside it in `<table>__fg_keys`, the waiters in `<table>__fg_queue`. Not the table of a rate
   * store. @default 'floodgate_permits'
   */
  table?: string;
  /**
   * A connection that LISTENs (`fromPgListener(await pool.connect())` or `fromPostgresListener(sql)`):
   * a waiting `acquire` then hears the NOTIFY of the release that lets it in at once. Without it,
   * waiters only poll (`pollMs` of `createPermits`). The store listens on a key's channel while this
   * process has waiters on it.
   */
  listener?: PostgresListener;
}

/** The PostgreSQL permit store. */
export interface PostgresPermitStore extends Port.NetworkPermitStore {
  readonly name: 'postgres';
  readonly schema: string;
  readonly table: string;
  /** The version of the PL/pgSQL functions (`v` and 8 hex digits of a digest of their code). */
  readonly version: string;
  /**
   * Creates the schema, the tables, their index and this version's functions when missing. Idempotent
   * and safe to run from several processes at once; run it at startup or in your migrations.
   */
  migrate(): Promise<void>;
}

/**
 * Concurrency permits in PostgreSQL: each operation is one call of a PL/pgSQL function that `migrate()`
 * installs, one transaction that locks the key's row, sweeps its expired leases and waiters and decides
 * from what is left. Waiters (`permits.acquire`) queue in a table, first come, first served across
 * every process; with a `listener`, the operations that let waiters in wake them by NOTIFY. Leases expire on the server's `clock_timestamp()` unless the permits have a `clock`
 * option, so app servers with skewed clocks agree. Committed leases and fences survive a crash of the
 * server.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { concurrency, createPermits } from 'floodgate';
 * import { fromPg, postgresPermitStore } from 'floodgate/postgres';
 *
 * const store = postgresPermitStore({ client: fromPg(new pg.Pool({ connectionString: process.env.DATABASE_URL })) });
 * await store.migrate();
 * const permits = createPermits({ store, policy: concurrency({ limit: 20, leaseMs: 30_000 }) });
 * ```
 */
export function postgresPermitStore(options: PostgresPermitStoreOptions): PostgresPermitStore {
  checkOptionsObject(options, 'postgresPermitStore options');
  const client = options.client;
  if (!hasMethods(client, 'query')) {
    throw invalid('ERR_INVALID_OPTION', 'client', client, 'a client from fromPg(pool) or fromPostgres(sql)');
  }
  const schema = validateIdentifier('schema', options.schema ?? 'public');
  const table = validateIdentifier('table', options.table ?? 'floodgate_permits');
  if (table.includes(RESERVED_INFIX)) {
    throw invalid('ERR_INVALID_OPTION', 'table', table, `an identifier without "${RESERVED_INFIX}"`);
  }
  const listener = options.listener;
  if (listener !== undefined && !hasMethods(listener, 'subscribe', 'unsubscribe')) {
    throw invalid(
      'ERR_INVALID_OPTION',
      'listener',
      listener,
      'a listener from fromPgListener(client) or fromPostgresListener(sql)',
    );
  }
  const n = permitSqlNames(schema, table);
  const statement = (op: PermitFunction) => ({ text: permitStatement(n, op), name: statementName(n, op) });
  const statements = {
    acquire: statement('acquire'),
    refresh: statement('refresh'),
    release: statement('release'),
    wait: statement('wait'),
    leave: statement('leave'),
  };
  const run = async (op: PermitFunction, params: string[], fields: number): Promise<number[]> => {
    let rows: readonly Record<string, unknown>[];
    try {
      rows = await client.query(statements[op].text, params, statements[op].name);
    } catch (error) {
      throw explain(n, error);
    }
    return integerReply(rows[0]?.r, 'a permit function', fields);
  };
  const now = (nowUs: number | undefined) => (nowUs === undefined ? '' : String(nowUs));
  // The arguments `acquire` and `wait` start with: a claim of `cost` under `limit` for a lease.
  const claim = (key: string, a: Port.PermitAcquireArgs) => [
    key,
    now(a.nowUs),
    String(a.limit),
    String(a.leaseUs),
    String(a.cost),
    a.leaseId,
  ];

  return {
    name: 'postgres',
    schema,
    table,
    version: PERMIT_SQL_VERSION,
    async migrate() {
      await client.query(permitMigrationStatement(n), []);
    },
    async acquire(key, a) {
      checkPermitCall(key, a, 'acquire');
      return acquireReply(await run('acquire', claim(key, a), 8));
    },
    async refresh(key, a) {
      checkPermitCall(key, a, 'refresh');
      const r = await run('refresh', [key, now(a.nowUs), String(a.leaseUs), a.leaseId, String(a.limit ?? 0)], 4);
      return { refreshed: r[0] === 1, expiresAtUs: r[1] as number, nowUs: r[2] as number, wake: r[3] as number };
    },
    async release(key, a) {
      checkPermitCall(key, a, 'release');
      const r = await run('release', [key, now(a.nowUs), a.leaseId, String(a.limit ?? 0)], 3);
      return { released: r[0] === 1, nowUs: r[1] as number, wake: r[2] as number };
    },
    async wait(key, a) {
      checkPermitCall(key, a, 'wait');
      const r = await run('wait', [...claim(key, a), String(a.maxQueue), String(a.waiterUs)], 12);
      return {
        ...acquireReply(r),
        queued: r[8] === 1,
        full: r[9] === 1,
        ticket: r[10] as number,
        ahead: r[11] as number,
      };
    },
    async leave(key, a) {
      checkPermitCall(key, a, 'leave');
      const r = await run('leave', [key, now(a.nowUs), String(a.limit), a.leaseId], 3);
      return { left: r[0] === 1, nowUs: r[1] as number, wake: r[2] as number };
    },
    ...(listener === undefined ? {} : channelWatch(listener, (key) => permitChannel(schema, table, key))),
  };
}

function acquireReply(r: readonly number[]): AcquireReply {
  return {
    granted: r[0] === 1,
    inFlight: r[1] as number,
    fence: r[2] as number,
    expiresAtUs: r[3] as number,
    nowUs: r[4] as number,
    retryAfterUs: r[5] as number,
    resetAfterUs: r[6] as number,
    wake: r[7] as number,
  };
}

/** A missing table or function: the advice to migrate, as the rate store gives it. */
function explain(n: PermitSqlNames, error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== '42883' && code !== '42P01' && code !== '3F000') return error;
  return new FloodgateError(
    'ERR_STORE_UNAVAILABLE',
    `the postgres permit store's tables ${n.leases} and ${n.keys} or its functions of version ${n.version} are missing: call store.migrate() first`,
    { cause: error },
  );
}

/** The name a driver prepares a statement under: unique per schema, table and version, within 63 bytes. */
function statementName(n: PermitSqlNames, op: PermitFunction): string {
  const hash = createHash('sha256').update(`${n.schema}.${n.table}.${n.version}`).digest('hex').slice(0, 24);
  return `floodgate_${hash}_permit_${op}`;
}
