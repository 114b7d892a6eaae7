import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ALGORITHMS } from '../../src/model/index.js';

// Adding an algorithm names its guide too: docs/algorithms.md describes each one by its factory.
const guide = readFileSync(new URL('../../../../docs/algorithms.md', import.meta.url), 'utf8');

describe('docs/algorithms.md', () => {
  for (const descriptor of Object.values(ALGORITHMS)) {
    it(`describes ${descriptor.factory}()`, () => {
      expect(guide).toContain(`\`${descriptor.factory}`);
    });
  }
});
