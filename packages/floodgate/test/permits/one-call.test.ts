import { describe } from 'vitest';
import { memoryPermitStore, memoryStore, type Store } from '../../src/index.js';
import { runOneCallSuite } from './one-call-kit.js';

/** The memory store, its calls counted: every method of the store and of its permit store. */
function countedMemory() {
  let calls = 0;
  const count = <T>(value: T): T => {
    calls++;
    return value;
  };
  const inner = memoryStore();
  const permits = inner.permits;
  const countedPermits = {
    name: permits.name,
    acquire: (key: string, args: Parameters<typeof permits.acquire>[1]) => count(permits.acquire(key, args)),
    refresh: (key: string, args: Parameters<typeof permits.refresh>[1]) => count(permits.refresh(key, args)),
    release: (key: string, args: Parameters<typeof permits.release>[1]) => count(permits.release(key, args)),
  };
  const store: Store = {
    name: 'memory',
    hasOwnClock: false,
    permits: countedPermits,
    decide: (request) => count(inner.decide(request)),
    reset: (prefix, key, policies) => count(inner.reset(prefix, key, policies)),
    decideWithPermit: (request, claim) => count(inner.decideWithPermit(request, claim)),
  };
  return { store, calls: () => calls };
}

describe('the one-call path on the memory store', () => {
  const counted = countedMemory();
  runOneCallSuite({
    name: 'memory',
    own: () => counted.store,
    separate: () => ({ store: memoryStore(), permits: memoryPermitStore() }),
    calls: counted.calls,
  });
});
