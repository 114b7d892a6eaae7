import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, isFloodgateError, slidingWindow } from '../../src/index.js';
import { compilePolicy, definePolicy, KINDS, type State } from '../../src/model/index.js';
import { manualClock, modelStore } from '../../src/testing/index.js';

const START_MS = Date.UTC(2030, 0, 1);

function refusal(fn: () => unknown): { option: string | undefined; message: string } {
  try {
    fn();
  } catch (error) {
    if (isFloodgateError(error) && error.code === 'ERR_INVALID_POLICY')
      return { option: error.option, message: error.message };
    throw error;
  }
  throw new Error('expected ERR_INVALID_POLICY');
}

const calls = fc.array(
  fc.record({
    gapUs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5 }), fc.integer({ min: 0, max: 700_000 })),
    cost: fc.constantFrom(0, 0.1, 0.5, 1, 1, 1, 2, 3, 7),
    op: fc.constantFrom('limit', 'limit', 'limit', 'check', 'status'),
  }),
  { minLength: 1, maxLength: 100 },
);

describe('slidingWindow({ precisionMs }): the bucketed window', () => {
  it('refuses a precision that does not divide the window, and more than 1000 buckets, naming precisionMs', () => {
    expect(refusal(() => slidingWindow({ limit: 10, windowMs: 1000, precisionMs: 300 }))).toEqual({
      option: 'slidingWindow.precisionMs',
      message: 'slidingWindow.precisionMs must divide slidingWindow.windowMs 1000 into whole buckets, got 300',
    });
    expect(refusal(() => slidingWindow({ limit: 10, windowMs: 1000, precisionMs: 2000 })).option).toBe(
      'slidingWindow.precisionMs',
    );
    expect(refusal(() => slidingWindow({ limit: 10, windowMs: 60_000, precisionMs: 50 })).message).toBe(
      'slidingWindow.precisionMs 50 makes 1200 buckets of slidingWindow.windowMs 60000; at most 1000 are allowed (a key keeps a count per bucket)',
    );
    expect(
      refusal(() => definePolicy({ algorithm: 'sliding-window', limit: 1, windowMs: 1, precisionMs: 0 })).option,
    ).toBe('policy.precisionMs');
    expect(slidingWindow({ limit: 10, windowMs: 60_000, precisionMs: 60 }).precisionMs).toBe(60);
  });

  it('derives its own name and compiles to the bucketed kind; without precisionMs it stays the counter', () => {
    const bucketed = slidingWindow({ limit: 100, windowMs: 60_000, precisionMs: 1000 });
    expect(bucketed).toEqual({
      algorithm: 'sliding-window',
      name: 'sliding-window-100-per-1m-precision-1s',
      blockMs: 0,
      limit: 100,
      windowMs: 60_000,
      precisionMs: 1000,
    });
    expect(compilePolicy(bucketed)).toMatchObject({ kind: KINDS['bucketed-window'].id, a: 60_000_000, b: 1_000_000 });
    const counter = slidingWindow({ limit: 100, windowMs: 60_000 });
    expect('precisionMs' in counter).toBe(false);
    expect(compilePolicy(counter).kind).toBe(KINDS['sliding-window'].id);
  });

  it('with one bucket per window, decides every call exactly like fixedWindow({ align: clock })', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2000 }),
        fc.oneof(fc.integer({ min: 1, max: 6 }), fc.double({ min: 1, max: 6, noNaN: true })),
        fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 900 })),
        calls,
        (windowMs, limit, blockMs, list) => {
          const clock = manualClock({ startMs: START_MS });
          const common = { limit, windowMs, blockMs, name: 'w' };
          const bucketed = createLimiter({ clock, policies: [slidingWindow({ ...common, precisionMs: windowMs })] });
          const fixed = createLimiter({ clock, policies: [fixedWindow(common)] });
          for (const call of list) {
            clock.advanceUs(call.gapUs);
            const options = { cost: call.cost };
            if (call.op === 'status') expect(bucketed.statusSync('k')).toEqual(fixed.statusSync('k'));
            else if (call.op === 'check')
              expect(bucketed.checkSync('k', options)).toEqual(fixed.checkSync('k', options));
            else expect(bucketed.limitSync('k', options)).toEqual(fixed.limitSync('k', options));
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('keeps at most windowMs / precisionMs buckets per key, whatever the traffic', async () => {
    for (const [windowMs, precisionMs] of [
      [1000, 10],
      [1000, 1],
      [60, 60],
    ] as const) {
      const store = modelStore();
      const clock = manualClock({ startMs: START_MS });
      const limiter = createLimiter({ store, clock, policies: [slidingWindow({ limit: 1e6, windowMs, precisionMs })] });
      const buckets = windowMs / precisionMs;
      let longest = 0;
      const held = () => {
        for (const s of store.states.values()) longest = Math.max(longest, ((s as State).length - 1) / 2);
      };
      // Tiny costs at every µs of some buckets, gaps of every length, and a call in every bucket in a row.
      for (let i = 0; i < 3000; i++) {
        clock.advanceUs(i % 3 === 0 ? 1 : (i * 7919) % (3 * precisionMs * 1000));
        await limiter.limit('k', { cost: 1e-3 });
        held();
      }
      expect(longest).toBeLessThanOrEqual(buckets);
      for (let i = 0; i < 3 * buckets; i++) {
        clock.advanceUs(precisionMs * 1000);
        await limiter.limit('k', { cost: 1e-3 });
        held();
      }
      expect(longest).toBe(buckets);
    }
  });
});
