import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  type Decision,
  definePolicy,
  fixedWindow,
  gcra,
  isFloodgateError,
  leakyBucket,
  memoryStore,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../src/index.js';
import { manualClock } from '../src/testing/index.js';

/** Junk: every JS value shape, hostile numbers and strings, and objects posing as options. */
const junk = fc.oneof(
  fc.anything({
    withBigInt: true,
    withDate: true,
    withMap: true,
    withSet: true,
    withTypedArray: true,
    withNullPrototype: true,
  }),
  fc.constantFrom(
    Number.NaN,
    Number.POSITIVE_INFINITY,
    -0,
    -1,
    2 ** 53,
    1e308,
    5e-324,
    '',
    '{}',
    '__proto__',
    'constructor',
  ),
  fc.record({
    limit: fc.oneof(fc.double(), fc.integer(), fc.string()),
    periodMs: fc.oneof(fc.double(), fc.integer()),
    windowMs: fc.oneof(fc.double(), fc.integer()),
    capacity: fc.oneof(fc.double(), fc.integer()),
    refillAmount: fc.double(),
    refillIntervalMs: fc.double(),
    leakPerSecond: fc.double(),
    burst: fc.double(),
    blockMs: fc.double(),
    algorithm: fc.constantFrom(
      'gcra',
      'token-bucket',
      'leaky-bucket',
      'fixed-window',
      'sliding-window',
      'sliding-log',
      'x',
    ),
  }),
  fc.record({ cost: fc.oneof(fc.double(), fc.anything()), maxDelayMs: fc.oneof(fc.double(), fc.anything()) }),
);

/** Runs fn: it may return or throw a FloodgateError, nothing else; decisions carry no NaN. */
function onlyTypedErrors(fn: () => unknown): void {
  let result: unknown;
  try {
    result = fn();
  } catch (error) {
    if (!isFloodgateError(error)) throw error;
    return;
  }
  if (result !== null && typeof result === 'object' && 'allowed' in result) assertClean(result as Decision);
}

async function onlyTypedRejections(fn: () => Promise<unknown>): Promise<void> {
  let result: unknown;
  try {
    result = await fn();
  } catch (error) {
    if (!isFloodgateError(error)) throw error;
    return;
  }
  if (result !== null && typeof result === 'object' && 'allowed' in result) assertClean(result as Decision);
}

function assertClean(decision: Decision): void {
  const text = JSON.stringify(decision, (_key, value: unknown) =>
    typeof value === 'number' && Number.isNaN(value) ? 'NaN!' : value,
  );
  expect(text).not.toContain('NaN!');
}

const factories = [gcra, tokenBucket, leakyBucket, fixedWindow, slidingWindow, slidingLog, definePolicy] as ((
  o: unknown,
) => unknown)[];

describe('fuzzing every public entry point', () => {
  it('policy factories and stores: typed errors only', () => {
    fc.assert(
      fc.property(junk, (value) => {
        for (const factory of factories) onlyTypedErrors(() => factory(value));
        onlyTypedErrors(() => memoryStore(value as never));
        onlyTypedErrors(() => manualClock(value as never));
        onlyTypedErrors(() => createLimiter(value as never));
        onlyTypedErrors(() => createLimiter({ policies: value as never }));
        onlyTypedErrors(() => createLimiter({ policies: [gcra({ limit: 1, periodMs: 1 })], prefix: value as never }));
      }),
      { numRuns: 2000 },
    );
  });

  it('limiter methods: typed errors only, decisions without NaN', async () => {
    const clock = manualClock();
    const limiter = createLimiter({
      clock,
      policies: [gcra({ limit: 3, periodMs: 100 }), slidingLog({ limit: 5, windowMs: 100, countDenied: true })],
    });
    await fc.assert(
      fc.asyncProperty(junk, junk, fc.oneof(fc.string({ unit: 'binary' }), junk), async (options, other, key) => {
        clock.advanceUs(7);
        for (const method of ['limitSync', 'checkSync', 'statusSync', 'resetSync'] as const) {
          onlyTypedErrors(() => limiter[method](key as string, options as never));
        }
        for (const method of ['limit', 'check', 'status', 'reset'] as const) {
          await onlyTypedRejections(() => limiter[method](key as string, options as never));
          await onlyTypedRejections(() => limiter[method](key as string, { policies: other } as never));
        }
      }),
      { numRuns: 1500 },
    );
  });
});
