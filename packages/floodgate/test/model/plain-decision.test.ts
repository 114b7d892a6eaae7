import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  type Decision,
  gcra,
  leakyBucket,
  memoryStore,
  type Policy,
  slidingLog,
} from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { admittedDecision, deniedDecision, toDecision, toPolicyDecision } from '../../src/model/decision.js';
import type { Evaluation } from '../../src/model/types.js';
import { manualClock } from '../../src/testing/index.js';

/**
 * A decision under one policy is plain data, field for field and in the same order as the decision built
 * here the way decisions of several policies are built; the fast paths' builders (`admittedDecision`,
 * `deniedDecision`) build the same.
 */

/** The plain decision of one policy's evaluation, as `toDecision` builds it for several policies. */
function plainDecision(policy: Policy, e: Evaluation, allowed: boolean): Decision {
  const part = toPolicyDecision(compilePolicy(policy), e);
  const decision: Decision = {
    allowed,
    limit: part.limit,
    remaining: part.remaining,
    retryAfterMs: part.retryAfterMs,
    resetAfterMs: part.resetAfterMs,
    policy: part.policy,
    policies: [part],
  };
  if (part.delayMs !== undefined) decision.delayMs = part.delayMs;
  if (part.reason !== undefined) decision.reason = part.reason;
  return decision;
}

function evaluation(overrides: Partial<Evaluation>): Evaluation {
  return {
    allowed: true,
    remaining: 3,
    retryAfterUs: 0,
    resetAfterUs: 1_500,
    delayUs: 0,
    reason: 'ok',
    next: undefined,
    ...overrides,
  } as Evaluation;
}

const CASES: [string, Partial<Evaluation>][] = [
  ['admitted', {}],
  ['denied by the limit', { allowed: false, remaining: 0, retryAfterUs: 250_001, reason: 'limit' }],
  ['denied for ever', { allowed: false, remaining: 0, retryAfterUs: Infinity, reason: 'exceeds-capacity' }],
  ['blocked', { allowed: false, remaining: 0, retryAfterUs: 90_000, reason: 'blocked' }],
  ['admitted with a delay', { delayUs: 4_000_001 }],
];

describe('a one-policy decision', () => {
  const policy = gcra({ limit: 5, periodMs: 1000 });
  for (const [name, overrides] of CASES) {
    it(`${name}: is plain data, the decision of several policies' form`, () => {
      const e = evaluation(overrides);
      const got = toDecision([compilePolicy(policy)], [e], e.allowed);
      const want = plainDecision(policy, e, e.allowed);
      strictEqual(Object.getPrototypeOf(got), Object.prototype);
      deepStrictEqual(got, want);
      strictEqual(JSON.stringify(got), JSON.stringify(want));
      deepStrictEqual({ ...got }, want);
      deepStrictEqual(structuredClone(got), want);
      expect(Object.keys({ ...got })).toContain('policies');
    });
  }

  it("the fast paths' builders build what toDecision builds", () => {
    const c = compilePolicy(policy);
    const admitted = evaluation({ remaining: 2, resetAfterUs: 7_000 });
    const built = admittedDecision(c.name, c.limit, 2, 7);
    deepStrictEqual(built, toDecision([c], [admitted], true));
    strictEqual(JSON.stringify(built), JSON.stringify(toDecision([c], [admitted], true)));
    const denied = evaluation({
      allowed: false,
      remaining: 0,
      retryAfterUs: 250_001,
      resetAfterUs: 900_000,
      reason: 'limit',
    });
    const refused = deniedDecision(c.name, c.limit, 0, 251, 900);
    deepStrictEqual(refused, toDecision([c], [denied], false));
    strictEqual(JSON.stringify(refused), JSON.stringify(toDecision([c], [denied], false)));
  });

  it('is what limitSync and limit return, with the same policies and fields on both paths', async () => {
    const clock = manualClock({ startMs: 1_700_000_000_000 });
    for (const p of [
      gcra({ limit: 2, periodMs: 1000 }),
      leakyBucket({ capacity: 2, leakPerSecond: 1 }),
      slidingLog({ limit: 2, windowMs: 1000 }),
    ]) {
      const fast = createLimiter({ store: memoryStore(), policies: [p], clock });
      const general = createLimiter({ store: memoryStore(), policies: [p], clock });
      for (let i = 0; i < 4; i++) {
        const a = fast.limitSync('k');
        const b = await general.limit('k');
        strictEqual(JSON.stringify(a), JSON.stringify(b));
        deepStrictEqual(a, b);
        deepStrictEqual({ ...a }, b);
        expect(a.policies[0]?.remaining).toBe(a.remaining);
        clock.advance(300);
      }
    }
  });
});
