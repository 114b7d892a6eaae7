import { describe, it } from 'vitest';
import { memoryStore } from '../../src/index.js';
import { modelStore, runConformanceSuite } from '../../src/testing/index.js';

describe('memory store', () => {
  runConformanceSuite({ describe, it }, { store: () => memoryStore(), randomRuns: 40, randomOperations: 600 });
});

describe('memory store with a tiny cap (eviction must not change a decision while keys fit)', () => {
  runConformanceSuite({ describe, it }, { store: () => memoryStore({ maxKeys: 16 }), randomRuns: 20, seed: 1000 });
});

describe('reference model store', () => {
  runConformanceSuite({ describe, it }, { store: () => modelStore(), randomRuns: 2 });
});
