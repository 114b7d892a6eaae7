import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe } from 'vitest';
import { memoryPermitStore, memoryStore, type PermitStore, type Store } from '../../src/index.js';
import { sqlitePermitStore, sqliteStore } from '../../src/stores/sqlite/index.js';
import { runOneCallSuite } from './one-call-kit.js';

/**
 * An in-process store, its calls counted: every call of the store and of its permit store (the real
 * ones, each call passed on as it is).
 */
function counted(inner: Store & { permits: PermitStore }) {
  let calls = 0;
  const count = <T>(value: T): T => {
    calls++;
    return value;
  };
  const permits = inner.permits;
  const countedPermits: PermitStore = {
    name: permits.name,
    acquire: (key, args) => count(permits.acquire(key, args)),
    refresh: (key, args) => count(permits.refresh(key, args)),
    release: (key, args) => count(permits.release(key, args)),
  };
  const store: Store = {
    name: inner.name,
    hasOwnClock: inner.hasOwnClock,
    permits: countedPermits,
    decide: (request) => count(inner.decide(request)),
    reset: (prefix, key, policies) => count(inner.reset(prefix, key, policies)),
    decideWithPermit: (request, claim) =>
      count((inner.decideWithPermit as NonNullable<Store['decideWithPermit']>)(request, claim)),
  };
  return { store, calls: () => calls };
}

describe('the one-call path on the memory store', () => {
  const held = counted(memoryStore());
  runOneCallSuite({
    name: 'memory',
    own: () => held.store,
    separate: () => ({ store: memoryStore(), permits: memoryPermitStore() }),
    calls: held.calls,
  });
});

describe('the one-call path on the SQLite store (one transaction)', () => {
  const directory = mkdtempSync(join(tmpdir(), 'floodgate-one-call-'));
  const database = new Database(join(directory, 'one.db'));
  const store = sqliteStore({ database });
  store.migrate();
  store.permits.migrate();
  const other = new Database(join(directory, 'two.db'));
  const separate = sqliteStore({ database: other, table: 'rates' });
  separate.migrate();
  const permits = sqlitePermitStore({ database: other, table: 'leases' });
  permits.migrate();
  afterAll(() => {
    database.close();
    other.close();
    rmSync(directory, { recursive: true, force: true });
  });
  const held = counted(store);
  runOneCallSuite({
    name: 'sqlite',
    own: () => held.store,
    separate: () => ({ store: separate, permits }),
    calls: held.calls,
  });
});
