import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FloodgateError, fixedWindow, gcra, type Policy, slidingLog } from '../../src/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/model/compile.js';
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { stateKeys } from '../../src/stores/sql/common.js';
import type { Store, StoreRequest } from '../../src/stores/store.js';
import { toStoreError } from '../../src/stores/store-errors.js';
import { SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * The PostgreSQL port checks what it is sent and what it answers: a variant its kind does not declare (a
 * forged flag) raises in SQL instead of running another variant's code, on every path; and the client's
 * model checks every verdict the server gives on the state it read, so a row the port could not have
 * written (a forged row) that makes the two disagree is a protocol error, not a wrong decision.
 */
const available = await requirePostgres();
const schema = uniqueSchema('guards');
const NOW_US = SCENARIO_START_MS * 1000;

async function rejection(store: Store, promise: Promise<unknown>): Promise<FloodgateError> {
  try {
    await promise;
  } catch (error) {
    return toStoreError(store.name, error);
  }
  throw new Error('expected the call to fail');
}

function request(prefix: string, policy: CompiledPolicy, nowUs: number | undefined = NOW_US): StoreRequest {
  return { prefix, key: 'k', policies: [policy], cost: 1, commit: true, nowUs, maxDelayUs: 0 };
}

describe.skipIf(!available)('postgres port guards', () => {
  let connection: Connection;
  const stores: PostgresStore[] = [];
  beforeAll(async () => {
    connection = connect('pg', 2);
    for (const fastPath of [true, false]) {
      const store = postgresStore({ client: connection.client, schema, table: 'guards', fastPath });
      await store.migrate();
      stores.push(store);
    }
  });
  afterAll(async () => {
    for (const store of stores) await store.close();
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  const rows = async () => Number((await connection.sql(`SELECT count(*) AS n FROM "${schema}".guards`))[0]?.n);

  const forged: [string, Policy, 'a' | 'b' | 'c', number][] = [
    ['a meter in an undeclared mode', gcra({ limit: 2, periodMs: 1000 }), 'c', 2],
    ['a fixed window counting denials a third way', fixedWindow({ limit: 2, windowMs: 1000 }), 'b', 2],
    ['a fixed window with an undeclared alignment', fixedWindow({ limit: 2, windowMs: 1000 }), 'c', 0.5],
    ['a sliding log with an undeclared flag', slidingLog({ limit: 2, windowMs: 1000 }), 'c', -1],
  ];
  for (const [what, policy, param, value] of forged) {
    it(`raises on ${what} (${param} = ${value}) on every path and writes nothing`, async () => {
      const compiled = { ...compilePolicy(policy), [param]: value } as CompiledPolicy;
      for (const store of stores) {
        for (const nowUs of [NOW_US, undefined]) {
          const error = await rejection(store, store.decide(request(uniquePrefix('forged'), compiled, nowUs)));
          expect(error.code).toBe('ERR_STORE_REJECTED');
          expect(error.message).toContain(`has no variant ${param} = `);
        }
      }
      expect(await rows()).toBe(0);
    });
  }

  const forgedRows: [string, Policy, string][] = [
    // The meter statement reads the TAT as a bigint (0.4 µs down to NOW_US): the SQL denies, the model admits.
    ['the meter statement, a fractional TAT', gcra({ limit: 1, periodMs: 1000, name: 'g' }), `{0,${NOW_US + 0.4}}`],
    // The decide function reads s[2] as NULL and admits; the model reads a state without its TAT and denies.
    ['a meter state without its TAT', gcra({ limit: 1, periodMs: 1000, name: 'g' }), '{0}'],
  ];
  for (const [what, policy, state] of forgedRows) {
    it(`a verdict the model does not reach on the state read is ERR_STORE_PROTOCOL (${what})`, async () => {
      const compiled = compilePolicy(policy);
      let failures = 0;
      for (const store of stores) {
        const prefix = uniquePrefix('forged-row');
        const [row] = stateKeys(prefix, 'k', [compiled]);
        await connection.sql(`INSERT INTO "${schema}".guards (key, state, expires_at) VALUES ($1, $2, 9e15)`, [
          row,
          state,
        ]);
        try {
          await store.decide(request(prefix, compiled));
        } catch (error) {
          expect(toStoreError(store.name, error)).toMatchObject({ code: 'ERR_STORE_PROTOCOL' });
          failures++;
        }
        await connection.sql(`DELETE FROM "${schema}".guards WHERE key = $1`, [row]);
      }
      // The meter statement's fractional TAT is the statement's own reading; every path refuses the others.
      expect(failures).toBe(what.startsWith('the meter statement') ? 1 : 2);
    });
  }

  it('an honest row decides without complaint on every path (the check costs nothing it should not)', async () => {
    const compiled = compilePolicy(gcra({ limit: 2, periodMs: 1000, name: 'g' }));
    for (const store of stores) {
      const prefix = uniquePrefix('honest');
      const decisions = [];
      for (let i = 0; i < 3; i++) decisions.push((await store.decide(request(prefix, compiled))).allowed);
      expect(decisions).toEqual([true, true, false]);
    }
  });
});
