import { describe, it } from 'vitest';
import type { Store } from '../../src/index.js';
import { memoryStore } from '../../src/stores/memory/memory-store.js';
import { runConformanceSuite } from '../../src/testing/index.js';

/**
 * `cancel` and `refund` are optional parts of the store contract: a store without them passes the
 * conformance suite, whose tables that need them are skipped with the reason once the limiter's typed
 * refusal is checked.
 */
function withoutOptionalOperations(): Store {
  const inner = memoryStore();
  return {
    name: 'decide-and-reset-only',
    hasOwnClock: false,
    decide: (request) => inner.decide(request),
    reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
  };
}

describe('a store with only decide and reset', () => {
  runConformanceSuite({ describe, it }, { store: withoutOptionalOperations, randomRuns: 4 });
});
