import { describe, expect, it } from 'vitest';
import { deniedProblem } from '../../src/http/headers.js';
import { createLimiter, fixedWindow } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

describe('the detail of a denial', () => {
  const policy = fixedWindow({ limit: 1000, windowMs: 60_000, name: 'tokens' });

  it('says the cost exceeds what remains when some remains', async () => {
    const limiter = createLimiter({ policies: policy, clock: manualClock({ startMs: 0 }) });
    await limiter.limit('k', { cost: 599 });
    const decision = await limiter.limit('k', { cost: 600 });
    expect([decision.allowed, decision.remaining]).toEqual([false, 401]);
    expect(deniedProblem(decision, 429, 600, [policy]).detail).toBe(
      'This request costs 600, more than the 401 that remain of policy "tokens" (1000 per 60 s); retry in 60 s.',
    );
  });

  it('says the policy is used up when nothing remains', async () => {
    const limiter = createLimiter({ policies: policy, clock: manualClock({ startMs: 0 }) });
    await limiter.limit('k', { cost: 1000 });
    const decision = await limiter.limit('k');
    expect(deniedProblem(decision, 429, 1, [policy]).detail).toBe(
      'Policy "tokens" (1000 per 60 s) is used up; retry in 60 s.',
    );
  });
});
