import { describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, memoryStore, trackDenied } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

/** A seeded generator (mulberry32), so the load is the same on every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** Draws ranks 1..n with probability ∝ 1 / rank^s (Zipf), by inverting the cumulative weights. */
function zipf(n: number, s: number, next: () => number): () => number {
  const cumulative = new Float64Array(n);
  let sum = 0;
  for (let i = 0; i < n; i++) {
    sum += 1 / (i + 1) ** s;
    cumulative[i] = sum;
  }
  return () => {
    const x = next() * sum;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((cumulative[mid] as number) < x) lo = mid + 1;
      else hi = mid;
    }
    return lo + 1;
  };
}

describe('trackDenied', () => {
  it('under a skewed (Zipf 1.1) load of 50 000 keys, stays within its stated error with 200 counters', async () => {
    const clock = manualClock({ startMs: 1_700_000_000_000 });
    // Every call is denied: a limit of 1 per hour, one call admitted per key first.
    const limiter = createLimiter({
      store: memoryStore(),
      clock,
      policies: fixedWindow({ limit: 1, windowMs: 3_600_000 }),
    });
    const denied = trackDenied(limiter, {
      capacity: 200,
      intervalMs: 60_000,
      clock,
      tenantOf: (key) => key.split('/')[0],
    });
    const draw = zipf(50_000, 1.1, random(7));
    const truth = new Map<string, number>();
    for (let i = 0; i < 60_000; i++) {
      const rank = draw();
      const key = `t${rank % 20}/k${rank}`;
      const decision = limiter.limitSync(key);
      if (!decision.allowed) truth.set(key, (truth.get(key) ?? 0) + 1);
      if (i % 1000 === 0) clock.advance(500);
    }
    // The promise path counts alike.
    expect((await limiter.limit('t1/k1')).allowed).toBe(false);
    truth.set('t1/k1', (truth.get('t1/k1') ?? 0) + 1);
    const { keys, tenants } = denied.report(20);
    const total = [...truth.values()].reduce((a, b) => a + b, 0);
    expect(keys.total).toBe(total);
    // The stated bound: each of the two intervals' summaries over-estimates by at most its denials / capacity.
    expect(keys.error).toBeLessThanOrEqual(total / 200);
    let worst = 0;
    for (const k of keys.keys) {
      const exact = truth.get(k.key) ?? 0;
      expect(exact).toBeLessThanOrEqual(k.count);
      expect(exact).toBeGreaterThanOrEqual(k.count - k.error);
      worst = Math.max(worst, k.count - exact);
    }
    // Every key denied more than the stated error is listed, and the top ten are the true top ten.
    const trueTop = [...truth.entries()].sort((a, b) => b[1] - a[1]);
    for (const [key, count] of trueTop.slice(0, 10)) {
      if (count > keys.error) expect(keys.keys.map((k) => k.key)).toContain(key);
    }
    expect(
      keys.keys
        .slice(0, 10)
        .map((k) => k.key)
        .sort(),
    ).toEqual(
      trueTop
        .slice(0, 10)
        .map(([k]) => k)
        .sort(),
    );
    expect(tenants?.keys.length).toBe(20);
    console.log(
      `Zipf 1.1, 50 000 keys, ${total} denials, 200 counters: stated error bound ${keys.error}, worst over-estimate in the top 20 ${worst}`,
    );
    denied.stop();
  });
});
