import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FloodgateError, fixedWindow, isFloodgateError } from '../../src/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/model/compile.js';
import { decide, evaluatePolicy, inspect } from '../../src/model/decide.js';
import type { KindDescriptor } from '../../src/model/descriptor.js';
import { KIND_LIST, KINDS, type KindName, kindConstant } from '../../src/model/kinds.js';
import { refundPolicy } from '../../src/model/refund.js';
import { emptyEvaluation } from '../../src/model/types.js';
import { encodeKey, storageKey } from '../../src/stores/index.js';
import { memoryStore } from '../../src/stores/memory/memory-store.js';
import { SQL_PORTS, type SqlPort } from '../../src/stores/postgres/kind-ports.js';
import { PORT_VERSION, portFunctions } from '../../src/stores/postgres/port.js';
import { type PostgresStore, postgresStore } from '../../src/stores/postgres/postgres-store.js';
import { sqlNames } from '../../src/stores/postgres/sql.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import type { LuaPort } from '../../src/stores/redis/lua/port.js';
import { DECIDE_SCRIPT, LUA_PORTS } from '../../src/stores/redis/script.js';
import { sqliteStore } from '../../src/stores/sqlite/sqlite-store.js';
import type { Store, StoreRequest } from '../../src/stores/store.js';
import { toStoreError } from '../../src/stores/store-errors.js';
import { SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from './redis/servers.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * What an algorithm is, is written once (model/kinds.ts and each kind's descriptor); each store has a
 * port per kind, in a table the compiler checks. These tests show the two ways a kind can lack a port:
 * at build time (a table without it does not compile), and at run time (a store that receives a kind
 * number it has no port for, say from a process running a newer model against an older script, raises
 * instead of running another kind's code).
 */

const NOW_US = SCENARIO_START_MS * 1000;
const known = compilePolicy(fixedWindow({ limit: 3, windowMs: 1000, name: 'orphan' }));
/** A policy of a kind this model has no port for. */
const orphan = { ...known, kind: 99 } as unknown as CompiledPolicy;

function request(prefix: string, commit = true): StoreRequest {
  return { prefix, key: 'k', policies: [orphan], cost: 1, commit, nowUs: NOW_US, maxDelayUs: 0 };
}

/** The error a store call rejected with, as the limiter passes it on (`toStoreError`). */
async function rejection(store: Store, promise: Promise<unknown>): Promise<FloodgateError> {
  try {
    await promise;
  } catch (error) {
    return toStoreError(store.name, error);
  }
  throw new Error('expected the call to fail');
}

describe('every kind has a port in every store, or the build fails', () => {
  it('the kinds are numbered 1…n with one-character tags, the meter alone untagged', () => {
    expect(KIND_LIST.map((k) => k.id)).toEqual(KIND_LIST.map((_, i) => i + 1));
    expect(KIND_LIST.filter((k) => k.tag === '').map((k) => k.name)).toEqual(['meter']);
    const tags = KIND_LIST.map((k) => k.tag).filter((t) => t !== '');
    expect(tags.every((t) => t.length === 1 && t !== '-' && t !== '!')).toBe(true);
    expect(new Set(tags).size).toBe(tags.length);
  });

  it('a table of Lua or PL/pgSQL ports that leaves out a kind does not compile', () => {
    const { 'sliding-log': _lua, ...luaWithout } = LUA_PORTS;
    const { 'sliding-log': _sql, ...sqlWithout } = SQL_PORTS;
    // @ts-expect-error the Lua ports lack the sliding log's
    const lua: { readonly [N in KindName]: LuaPort } = luaWithout;
    // @ts-expect-error the PL/pgSQL ports lack the sliding log's
    const sql: { readonly [N in KindName]: SqlPort } = sqlWithout;
    // @ts-expect-error a kind's descriptor needs its own evaluation
    const descriptor: KindDescriptor = { ...KINDS.meter, evaluate: undefined };
    expect([Object.keys(lua).length, Object.keys(sql).length, descriptor.id]).toEqual([
      KIND_LIST.length - 1,
      KIND_LIST.length - 1,
      1,
    ]);
  });

  it('the generated script and functions name every kind by its number, and raise for any other', () => {
    for (const k of KIND_LIST) expect(DECIDE_SCRIPT).toContain(`kind == ${kindConstant(k)}`);
    expect(DECIDE_SCRIPT).toContain(
      `local ${KIND_LIST.map(kindConstant).join(', ')} = ${KIND_LIST.map((k) => k.id).join(', ')}`,
    );
    expect(DECIDE_SCRIPT).toContain("error('floodgate: no Lua port of policy kind '");
    const sql = portFunctions(sqlNames('s', 't', PORT_VERSION)).join('\n');
    for (const k of KIND_LIST) expect(sql).toContain(`kind = ${k.id} THEN -- ${k.name}`);
    expect(sql).toContain("RAISE EXCEPTION 'floodgate: no PL/pgSQL port of policy kind %'");
  });
});

describe('a kind number without a port fails loudly', () => {
  it('TypeScript: the model refuses it with ERR_INVALID_POLICY and writes nothing', () => {
    const out = emptyEvaluation();
    const expectRefused = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        expect(isFloodgateError(error) && [error.code, error.message]).toEqual([
          'ERR_INVALID_POLICY',
          'policy "orphan" has kind 99, which no algorithm of this model implements',
        ]);
        return;
      }
      throw new Error('expected ERR_INVALID_POLICY');
    };
    expectRefused(() => evaluatePolicy(orphan, undefined, NOW_US, 1, 0, out));
    expectRefused(() => decide([known, orphan], [], NOW_US, 1, { commit: true }));
    expectRefused(() => inspect(orphan, [0, NOW_US, 1], NOW_US));
    expectRefused(() => refundPolicy(orphan, [0, NOW_US, 1], NOW_US, NOW_US, 1, 1));
    expect(out.next).toBeUndefined();
    const memory = memoryStore();
    expectRefused(() => memory.decideSync(request('memory')));
    expect(memory.size).toBe(0);
    const sqlite = sqliteStore({ database: new Database(':memory:') });
    sqlite.migrate();
    expectRefused(() => sqlite.decideSync(request('sqlite')));
  });
});

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
describe.skipIf(!redisUp)('a kind number without a port fails loudly: Lua', () => {
  let raw: Redis;
  beforeAll(() => {
    raw = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
  });
  afterAll(() => raw?.disconnect());

  it('the script raises (ERR_STORE_REJECTED, naming the kind) and writes nothing', async () => {
    // Not the single-meter script: the full one, which decides every kind.
    const store: Store = redisStore({ client: fromIoredis(raw) });
    const prefix = uniquePrefix('orphan');
    const error = await rejection(store, store.decide(request(prefix)));
    expect(error.code).toBe('ERR_STORE_REJECTED');
    expect(error.message).toContain('floodgate: no Lua port of policy kind 99');
    expect(await raw.exists(storageKey(prefix, encodeKey('k'), 'orphan'))).toBe(0);
  });
});

const pgUp = await requirePostgres();
describe.skipIf(!pgUp)('a kind number without a port fails loudly: PL/pgSQL', () => {
  const schema = uniqueSchema('orphan');
  let connection: Connection;
  let store: PostgresStore;
  beforeAll(async () => {
    connection = connect('pg', 2);
    store = postgresStore({ client: connection.client, schema });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  it('the functions raise (ERR_STORE_REJECTED, naming the kind) and write nothing', async () => {
    const prefix = uniquePrefix('orphan');
    const error = await rejection(store, store.decide(request(prefix)));
    expect(error.code).toBe('ERR_STORE_REJECTED');
    expect(error.message).toContain('floodgate: no PL/pgSQL port of policy kind 99');
    expect(await connection.sql(`SELECT count(*)::int AS n FROM "${schema}".floodgate_state`)).toEqual([{ n: 0 }]);
  });
});
