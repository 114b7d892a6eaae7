import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, isFloodgateError, type PermitStore } from '../../src/index.js';
import { postgresPermitStore } from '../../src/stores/postgres/index.js';
import { sqlitePermitStore } from '../../src/stores/sqlite/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from '../stores/sql/postgres-env.js';

// A permit store may be called directly, with whatever a caller passes: every argument that reaches SQL
// is checked first (a typed error naming it, the database never asked), keys and lease ids are
// parameters, and a key's rows stay within its limit however many calls arrive at once.

const LEASE = 'AAAAAAAAAAAAAAAAAAAAAA';
const GOOD = { limit: 2, leaseUs: 1_000_000, cost: 1, leaseId: LEASE };
/** What a wait takes besides: the queue's bound and how long a place lasts. */
const WAITING = { maxQueue: 4, waiterUs: 3_000_000 };

/** Arguments a hostile caller could pass, and the code and argument each refusal must name. */
const HOSTILE: [string, string, Record<string, unknown>, string, string][] = [
  ['NUL in the key', 'a\0b', {}, 'ERR_INVALID_KEY', 'key'],
  ['an empty key', '', {}, 'ERR_INVALID_KEY', 'key'],
  ['a key of 2,000 characters', 'k'.repeat(2000), {}, 'ERR_INVALID_KEY', 'key'],
  ['limit 0', 'k', { limit: 0 }, 'ERR_INVALID_POLICY', 'limit'],
  ['limit 10,001 (unbounded rows)', 'k', { limit: 10_001 }, 'ERR_INVALID_POLICY', 'limit'],
  ['a fractional limit', 'k', { limit: 1.5 }, 'ERR_INVALID_POLICY', 'limit'],
  ['leaseUs NaN', 'k', { leaseUs: Number.NaN }, 'ERR_INVALID_POLICY', 'leaseUs'],
  ['leaseUs 0', 'k', { leaseUs: 0 }, 'ERR_INVALID_POLICY', 'leaseUs'],
  ['cost 0', 'k', { cost: 0 }, 'ERR_INVALID_COST', 'cost'],
  ['cost -1', 'k', { cost: -1 }, 'ERR_INVALID_COST', 'cost'],
  ['cost as a string', 'k', { cost: '1' }, 'ERR_INVALID_COST', 'cost'],
  ['a lease id carrying SQL', 'k', { leaseId: "x'); DROP TABLE t; --" }, 'ERR_INVALID_OPTION', 'leaseId'],
  ['a lease id too long', 'k', { leaseId: `${LEASE}A` }, 'ERR_INVALID_OPTION', 'leaseId'],
  ['a negative time', 'k', { nowUs: -1 }, 'ERR_INVALID_OPTION', 'clock.nowUs()'],
  ['a fractional time', 'k', { nowUs: 1.5 }, 'ERR_INVALID_OPTION', 'clock.nowUs()'],
  ['maxQueue -1', 'k', { maxQueue: -1 }, 'ERR_INVALID_POLICY', 'maxQueue'],
  ['maxQueue 10,001 (unbounded waiter rows)', 'k', { maxQueue: 10_001 }, 'ERR_INVALID_POLICY', 'maxQueue'],
  ['waiterUs 0', 'k', { waiterUs: 0 }, 'ERR_INVALID_OPTION', 'waiterUs'],
  ['waiterUs as a string', 'k', { waiterUs: '1' }, 'ERR_INVALID_OPTION', 'waiterUs'],
];

/**
 * Every hostile argument, through acquire and wait (and refresh, release and leave where they take it),
 * is refused.
 */
async function refusesAll(store: PermitStore): Promise<void> {
  for (const [what, key, args, code, option] of HOSTILE) {
    const calls: (() => unknown)[] = [() => store.wait?.(key, { ...GOOD, ...WAITING, ...args } as never)];
    if (!('maxQueue' in args) && !('waiterUs' in args)) {
      calls.push(() => store.acquire(key, { ...GOOD, ...args } as never));
      if (!('limit' in args) && !('cost' in args)) {
        calls.push(() => store.refresh(key, { ...GOOD, ...args } as never));
        if (!('leaseUs' in args)) calls.push(() => store.release(key, { ...GOOD, ...args } as never));
      }
      if (!('leaseUs' in args) && !('cost' in args))
        calls.push(() => store.leave?.(key, { ...GOOD, ...args } as never));
    }
    for (const call of calls) {
      let error: unknown;
      try {
        await call();
      } catch (e) {
        error = e;
      }
      expect(isFloodgateError(error), `${what}: ${String(error)}`).toBe(true);
      expect(error, what).toMatchObject({ code, option });
    }
  }
}

describe('hostile arguments reach no database', () => {
  it('postgres: refused before any statement', async () => {
    let statements = 0;
    const store = postgresPermitStore({
      client: {
        query: async () => {
          statements++;
          return [];
        },
      },
    });
    await refusesAll(store);
    expect(statements).toBe(0);
  });

  it('sqlite: refused before any statement', async () => {
    let prepared = 0;
    const store = sqlitePermitStore({
      database: {
        prepare: () => {
          prepared++;
          throw new Error('prepared');
        },
        exec: () => undefined,
      },
    });
    await refusesAll(store);
    expect(prepared).toBe(0);
  });
});

const postgresUp = await requirePostgres();

describe.skipIf(!postgresUp)('postgres: a flood on one key stays within its limit of rows', () => {
  const schema = uniqueSchema('hostile_permits');
  let connection: Connection;
  beforeAll(async () => {
    connection = connect('pg', 8);
    await postgresPermitStore({ client: connection.client, schema }).migrate();
  });
  afterAll(async () => {
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  it('400 acquires at once on 8 connections: exactly the limit granted, as many lease rows', async () => {
    const store = postgresPermitStore({ client: connection.client, schema });
    const permits = createPermits({ store, policy: concurrency({ limit: 50, leaseMs: 60_000 }), prefix: 'flood' });
    const decisions = await Promise.all(Array.from({ length: 400 }, () => permits.limit("k'; --")));
    expect(decisions.filter((d) => d.allowed).length).toBe(50);
    const rows = await connection.sql(`SELECT count(*) AS n FROM "${schema}".floodgate_permits`);
    expect(Number(rows[0]?.n)).toBe(50);
  });
});

describe('sqlite: a flood on one key stays within its limit of rows', () => {
  const directory = mkdtempSync(join(tmpdir(), 'floodgate-hostile-permits-'));
  const database = new Database(join(directory, 'p.db'));
  afterAll(() => {
    database.close();
    rmSync(directory, { recursive: true, force: true });
  });

  it('400 acquires on one key: exactly the limit granted, as many lease rows', () => {
    const store = sqlitePermitStore({ database });
    store.migrate();
    const clock = manualClock();
    const prefix = uniquePrefix('flood');
    let granted = 0;
    for (let i = 0; i < 400; i++) {
      const reply = store.acquire(`${prefix}:{k}:c`, {
        ...GOOD,
        limit: 50,
        leaseId: `${String(i).padStart(22, 'A')}`,
        nowUs: clock.nowUs(),
      });
      if (reply.granted) granted++;
    }
    expect(granted).toBe(50);
    expect((database.prepare('SELECT count(*) AS n FROM floodgate_permits').get() as { n: number }).n).toBe(50);
  });
});
