import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { usToMs } from '../../src/model/index.js';

/** What `usToMs` means: ms rounded up, 0 for nothing left, Infinity kept. */
function reference(us: number): number {
  return us <= 0 ? 0 : Math.ceil(us / 1000);
}

describe('usToMs', () => {
  it('rounds up to whole ms: every whole µs up to 3 s, and around 2^31 where its integer path ends', () => {
    for (let us = -5; us <= 3_000_000; us++) if (usToMs(us) !== reference(us)) expect(usToMs(us)).toBe(reference(us));
    for (let us = 2 ** 31 - 5000; us <= 2 ** 31 + 5000; us++) expect(usToMs(us)).toBe(reference(us));
  });

  it('rounds up any duration, whole or not, up to 2^53 µs, and keeps Infinity', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.integer({ min: -10, max: 2 ** 31 + 10 }),
          fc.maxSafeInteger(),
          fc.double({ min: -1, max: 2 ** 53, noNaN: true }),
          fc.constantFrom(0.5, 999.5, 1000.000001, 2 ** 31 - 0.5, Number.MAX_SAFE_INTEGER, Number.POSITIVE_INFINITY),
        ),
        (us) => usToMs(us) === reference(us),
      ),
      { numRuns: 50_000 },
    );
    expect(Object.is(usToMs(-0), 0)).toBe(true);
  });
});
