import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow } from '../../src/index.js';
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * A row expires when the state written is untouched again, never earlier: a denied call that writes a state
 * (a counted call, a penalty box) reports its own resetAfter, which can be earlier than the state's (a
 * `countDenied` fixed window whose cost exceeds its limit reports the window's end while the key's penalty
 * box lasts longer). An early expiry lets pruning delete a live row, and the key starts afresh.
 */
const available = await requirePostgres();
const schema = uniqueSchema('expiry');

describe.skipIf(!available)('postgres row expiry', () => {
  let connection: Connection;
  let store: PostgresStore;
  beforeAll(async () => {
    connection = connect('pg', 2);
    store = postgresStore({ client: connection.client, schema, table: 'expiry' });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  it('a denied call that writes a state expires the row at the state’s own reset (the penalty box’s end)', async () => {
    const prefix = uniquePrefix('early');
    // Behind the server: rows are pruned on this clock (the earlier of the two).
    const clock = manualClock({ startMs: Date.now() - 86_400_000 });
    const policy = fixedWindow({
      limit: 5,
      windowMs: 60_000,
      countDenied: true,
      align: 'first-request',
      blockMs: 600_000,
    });
    const limiter = createLimiter({ store, prefix, clock, policies: [policy] });
    for (let i = 0; i < 5; i++) expect((await limiter.limit('victim')).allowed).toBe(true);
    expect((await limiter.limit('victim')).reason).toBe('limit'); // the penalty box: 10 minutes
    const impossible = await limiter.limit('victim', { cost: 7 }); // counted, and reports the window's end
    expect(impossible.reason).toBe('exceeds-capacity');

    const rows = await connection.sql(
      `SELECT state, expires_at FROM "${schema}".expiry WHERE key LIKE $1 AND key LIKE '%victim%'`,
      [`${prefix}%`],
    );
    expect(rows).toHaveLength(1);
    const row = rows[0] as Record<string, unknown>;
    const state = (row.state as number[]).map(Number);
    const blockedUntil = state[0] as number;
    expect(blockedUntil).toBeGreaterThan(clock.nowMs() * 1000 + 500_000_000);
    expect(Number(row.expires_at)).toBeGreaterThanOrEqual(blockedUntil);

    // Three minutes on: past the window and the grace, within the box. New keys prune; the box holds.
    clock.advance(180_000);
    for (let i = 0; i < 20; i++) await limiter.limit(`new-${i}`);
    const after = await limiter.limit('victim');
    expect([after.allowed, after.reason]).toEqual([false, 'blocked']);
  });
});
