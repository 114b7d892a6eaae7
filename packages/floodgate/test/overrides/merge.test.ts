import { describe, expect, it } from 'vitest';
import { fixedWindow, gcra, isFloodgateError, leakyBucket, tokenBucket } from '../../src/index.js';
import { mergePolicies } from '../../src/overrides/index.js';

describe('mergePolicies', () => {
  const perMinute = gcra({ limit: 100, periodMs: 60_000, name: 'api' });
  const daily = fixedWindow({ limit: 10_000, windowMs: 86_400_000, name: 'daily' });

  it('replaces the base policy of the same name, keeping the others', () => {
    const pro = gcra({ limit: 1000, periodMs: 60_000, name: 'api' });
    expect(mergePolicies([perMinute, daily], [pro])).toEqual([pro, daily]);
  });

  it('gives an unnamed policy the name of the one base policy of its state layout, so state carries over', () => {
    const merged = mergePolicies(
      [perMinute, daily],
      [tokenBucket({ capacity: 50, refillAmount: 50, refillIntervalMs: 1000 })],
    );
    expect(merged.map((p) => [p.name, p.algorithm])).toEqual([
      ['api', 'token-bucket'],
      ['daily', 'fixed-window'],
    ]);
  });

  it('adds a policy with a name of its own, and one whose layout matches two base policies', () => {
    const burst = leakyBucket({ capacity: 5, leakPerSecond: 1, name: 'burst' });
    expect(mergePolicies([perMinute, daily], [burst])).toEqual([perMinute, daily, burst]);
    const second = gcra({ limit: 1, periodMs: 1000, name: 'second' });
    const unnamed = gcra({ limit: 7, periodMs: 1000 });
    expect(mergePolicies([perMinute, second], [unnamed])).toEqual([perMinute, second, unnamed]);
  });

  it('refuses a replacement that would read another layout under the same name', () => {
    try {
      mergePolicies([perMinute], [fixedWindow({ limit: 1, windowMs: 1000, name: 'api' })]);
    } catch (error) {
      expect(isFloodgateError(error) && [error.code, error.option]).toEqual(['ERR_INVALID_POLICY', 'policies']);
      return;
    }
    throw new Error('expected ERR_INVALID_POLICY');
  });
});
