import { describe, it } from 'vitest';
import { memoryStore } from '../../src/index.js';
import { modelStore, runConformanceSuite, runFastPathSuite, runPlainDataSuite } from '../../src/testing/index.js';

describe('memory store', () => {
  runConformanceSuite({ describe, it }, { store: () => memoryStore(), randomRuns: 40, randomOperations: 600 });
  runPlainDataSuite({ describe, it }, { store: () => memoryStore() });
});

describe('memory store: every path decides as the model', () => {
  runFastPathSuite(
    { describe, it },
    {
      variants: [
        // Calls without options under one plain meter: the meter fast path (`SyncStore.fastPath`).
        { name: 'meter fast path', store: () => memoryStore(), calls: ['bare'] },
        { name: 'general path', store: () => memoryStore(), calls: ['options'] },
      ],
    },
  );
});

describe('memory store with a tiny cap (eviction must not change a decision while keys fit)', () => {
  runConformanceSuite({ describe, it }, { store: () => memoryStore({ maxKeys: 16 }), randomRuns: 20, seed: 1000 });
});

describe('reference model store', () => {
  runConformanceSuite({ describe, it }, { store: () => modelStore(), randomRuns: 2 });
  runPlainDataSuite({ describe, it }, { store: () => modelStore() });
});
