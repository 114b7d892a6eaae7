import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FloodgateError, fixedWindow, gcra, type Policy, slidingLog } from '../../src/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/model/compile.js';
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import type { Store, StoreRequest } from '../../src/stores/store.js';
import { toStoreError } from '../../src/stores/store-errors.js';
import { SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * The PostgreSQL port checks what it is sent: a variant its kind does not declare (a forged flag) raises
 * in SQL instead of running another variant's code, on every path.
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
});
