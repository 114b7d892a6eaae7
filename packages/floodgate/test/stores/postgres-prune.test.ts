import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, type Policy } from '../../src/index.js';
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * Pruning never deletes a live row: rows are deleted once expired on the earlier of the deciding call's
 * clock and the server's, so a limiter whose `clock` runs ahead cannot delete rows another limiter (on the
 * server's clock) still counts on, and that key gets no extra admission.
 */
const available = await requirePostgres();
const schema = uniqueSchema('prune');
const HOUR_MS = 3_600_000;

describe.skipIf(!available)('postgres pruning runs on the server clock', () => {
  let connection: Connection;
  let store: PostgresStore;
  beforeAll(async () => {
    connection = connect('pg', 2);
    store = postgresStore({ client: connection.client, schema, table: 'prune_ahead' });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  const rowCount = async (prefix: string) =>
    Number(
      (
        await connection.sql(`SELECT count(*) AS n FROM "${schema}".prune_ahead WHERE key LIKE $1`, [
          `${prefix.replaceAll('_', '\\_')}%`,
        ])
      )[0]?.n,
    );

  for (const [path, policy] of [
    ['the meter statement', gcra({ limit: 5, periodMs: HOUR_MS })],
    ['the decide function', fixedWindow({ limit: 5, windowMs: HOUR_MS })],
  ] as [string, Policy][]) {
    it(`a limiter two hours ahead deletes none of another limiter's live rows (${path})`, async () => {
      const victimPrefix = uniquePrefix('victim');
      const victim = createLimiter({ store, prefix: victimPrefix, policies: [policy] });
      let admitted = 0;
      for (let i = 0; i < 5; i++) if ((await victim.limit('v')).allowed) admitted++;
      expect(admitted).toBe(5);
      expect(await rowCount(victimPrefix)).toBe(1);

      // Two hours ahead: on its clock the victim's row expired an hour ago. Every key it creates prunes.
      const ahead = createLimiter({
        store,
        prefix: uniquePrefix('ahead'),
        clock: manualClock({ startMs: Date.now() + 2 * HOUR_MS }),
        policies: [policy],
      });
      for (let i = 0; i < 40; i++) await ahead.limit(`new-${i}`);

      expect(await rowCount(victimPrefix)).toBe(1);
      let extra = 0;
      for (let i = 0; i < 5; i++) if ((await victim.limit('v')).allowed) extra++;
      expect(extra).toBe(0);
    });
  }

  it('a limiter whose clock lags the server still prunes the rows expired on its own clock', async () => {
    const prefix = uniquePrefix('behind');
    const clock = manualClock({ startMs: Date.now() - 24 * HOUR_MS });
    const limiter = createLimiter({ store, prefix, clock, policies: [gcra({ limit: 5, periodMs: 1000 })] });
    for (let i = 0; i < 20; i++) await limiter.limit(`idle-${i}`);
    expect(await rowCount(prefix)).toBe(20);
    clock.advance(125_000);
    await limiter.limit('new');
    // At least 16 expired rows go for each row created.
    expect(await rowCount(prefix)).toBe(20 - 16 + 1);
  });
});
