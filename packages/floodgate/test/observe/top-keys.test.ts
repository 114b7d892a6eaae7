import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TopKeys } from '../../src/observe/top-keys.js';

/** Exact weights per key of a list of (key, weight). */
function exact(events: readonly (readonly [string, number])[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const [key, weight] of events) counts.set(key, (counts.get(key) ?? 0) + weight);
  return counts;
}

const skewedKey = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('hot-a', 'hot-b', 'hot-c') },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 30 }).map((i) => `warm-${i}`) },
  { weight: 5, arbitrary: fc.integer({ min: 0, max: 100_000 }).map((i) => `cold-${i}`) },
);

describe('TopKeys', () => {
  it('counts exactly while it has room', () => {
    const top = new TopKeys({ capacity: 10, intervalMs: 1000 });
    for (let i = 0; i < 5; i++) top.record('a', 0);
    top.record('b', 0, 2.5);
    top.record('c', 0);
    const report = top.top(10, 500);
    expect(report.keys).toEqual([
      { key: 'a', count: 5, error: 0 },
      { key: 'b', count: 2.5, error: 0 },
      { key: 'c', count: 1, error: 0 },
    ]);
    expect(report.total).toBe(8.5);
    expect(report.error).toBe(0);
    expect(top.top(1, 500).keys.map((k) => k.key)).toEqual(['a']);
  });

  it('bounds every count within the stated error, and lists every key heavier than it (one interval)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.tuple(skewedKey, fc.constantFrom(1, 1, 1, 2, 0.5)), { maxLength: 2000 }),
        (capacity, events) => {
          const top = new TopKeys({ capacity, intervalMs: 1_000_000 });
          for (const [key, weight] of events) top.record(key, 0, weight);
          const truth = exact(events);
          const report = top.top(capacity * 2, 0);
          const total = events.reduce((sum, [, w]) => sum + w, 0);
          expect(report.total).toBeCloseTo(total, 9);
          expect(report.error).toBeLessThanOrEqual(total / capacity + 1e-9);
          expect(report.keys.length).toBeLessThanOrEqual(capacity);
          for (const entry of report.keys) {
            const real = truth.get(entry.key) ?? 0;
            expect(real).toBeLessThanOrEqual(entry.count + 1e-9);
            expect(real).toBeGreaterThanOrEqual(entry.count - entry.error - 1e-9);
            expect(entry.error).toBeLessThanOrEqual(report.error + 1e-9);
          }
          const listed = new Set(report.keys.map((k) => k.key));
          for (const [key, weight] of truth) if (weight > report.error + 1e-9) expect(listed.has(key)).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('covers the current and the previous interval, and forgets older ones', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.array(fc.tuple(skewedKey, fc.integer({ min: 0, max: 2999 })), { maxLength: 1500 }),
        (capacity, raw) => {
          // Times in increasing order over three intervals of 1000 ms.
          const events = [...raw].sort((x, y) => x[1] - y[1]);
          const top = new TopKeys({ capacity, intervalMs: 1000 });
          for (const [key, at] of events) top.record(key, at);
          const now = 2999;
          const report = top.top(capacity * 4, now);
          // The span is the last two intervals of the clock the structure saw first.
          const start =
            (events[0]?.[1] ?? now) + Math.max(0, Math.floor((now - (events[0]?.[1] ?? now)) / 1000) - 1) * 1000;
          const inSpan = events.filter(([, at]) => at >= start).map(([key]) => [key, 1] as const);
          const truth = exact(inSpan);
          // No event of the span lies before its start (an interval with no event may be skipped).
          expect(report.sinceMs).toBeGreaterThanOrEqual(start);
          expect(inSpan.length).toBe(events.filter(([, at]) => at >= report.sinceMs).length);
          expect(report.total).toBe(inSpan.length);
          expect(report.error).toBeLessThanOrEqual((2 * inSpan.length) / capacity);
          for (const entry of report.keys) {
            const real = truth.get(entry.key) ?? 0;
            expect(real).toBeLessThanOrEqual(entry.count);
            expect(real).toBeGreaterThanOrEqual(entry.count - entry.error);
          }
          const listed = new Set(report.keys.map((k) => k.key));
          for (const [key, weight] of truth) if (weight > report.error) expect(listed.has(key)).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('stays within its capacity under a flood of distinct keys and still finds the heavy one', () => {
    const top = new TopKeys({ capacity: 100, intervalMs: 60_000 });
    for (let i = 0; i < 200_000; i++) {
      top.record(`flood-${i}`, 1);
      if (i % 50 === 0) top.record('attacker', 1);
    }
    const report = top.top(5, 2);
    expect(report.keys[0]?.key).toBe('attacker');
    expect(report.keys[0]?.count ?? 0).toBeGreaterThanOrEqual(4000);
    expect(report.error).toBeLessThanOrEqual(report.total / 100);
  });

  it('refuses invalid options with a typed error naming them, and ignores weights that are not positive', () => {
    expect(() => new TopKeys({ capacity: 0 })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'capacity' }),
    );
    expect(() => new TopKeys({ intervalMs: Number.NaN })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'intervalMs' }),
    );
    const top = new TopKeys({ capacity: 2 });
    top.record('a', 0, 0);
    top.record('a', 0, -1);
    top.record('a', 0, Number.NaN);
    expect(top.top(5, 0)).toMatchObject({ keys: [], total: 0 });
  });
});
