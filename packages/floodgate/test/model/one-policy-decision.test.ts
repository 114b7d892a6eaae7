import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { inspect } from 'node:util';
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
import { changedDecision, OnePolicyDecision, toDecision, toPolicyDecision } from '../../src/model/decision.js';
import type { Evaluation } from '../../src/model/types.js';
import { manualClock } from '../../src/testing/index.js';

/**
 * A decision under one policy builds its `policies` when first read (`OnePolicyDecision`). Read any way
 * but by spread or `structuredClone`, it is the plain decision it stands for, field for field and in
 * the same order: that plain decision is built here the way decisions of several policies are built.
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
    it(`${name}: reads as the plain decision it stands for`, () => {
      const e = evaluation(overrides);
      const got = toDecision([compilePolicy(policy)], [e], e.allowed);
      const want = plainDecision(policy, e, e.allowed);
      expect(got).toBeInstanceOf(OnePolicyDecision);
      deepStrictEqual(got.policies, want.policies);
      deepStrictEqual((got as OnePolicyDecision).toJSON(), want);
      strictEqual(JSON.stringify(got), JSON.stringify(want));
      strictEqual(inspect(got, { depth: 4 }), inspect(want, { depth: 4 }));
      deepStrictEqual({ ...got, policies: got.policies }, { ...want });
      // Spread copies own fields only: the documented way above copies it whole.
      expect(Object.keys({ ...got })).not.toContain('policies');
    });
  }

  it('keeps its policies once built, and takes an assigned one', () => {
    const got = toDecision([compilePolicy(policy)], [evaluation({})], true);
    const first = got.policies;
    strictEqual(got.policies, first);
    first.push({ ...(first[0] as Decision['policies'][number]), policy: 'pushed' });
    strictEqual(got.policies.length, 2);
    got.policies = [];
    deepStrictEqual(got.policies, []);
    deepStrictEqual(JSON.parse(JSON.stringify(got)).policies, []);
  });

  it('changedDecision keeps policies, the order of fields and any field added', () => {
    for (const [, overrides] of CASES) {
      const e = evaluation(overrides);
      const got = toDecision([compilePolicy(policy)], [e], e.allowed) as Decision & { extra?: number };
      got.extra = 7;
      const want = { ...plainDecision(policy, e, e.allowed), extra: 7 };
      const changed = changedDecision(got, { remaining: 0, reason: 'degraded' });
      strictEqual(JSON.stringify(changed), JSON.stringify({ ...want, remaining: 0, reason: 'degraded' }));
      deepStrictEqual(changed.policies, want.policies);
    }
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
        deepStrictEqual(a.policies, b.policies);
        expect(a.policies[0]?.remaining).toBe(a.remaining);
        clock.advance(300);
      }
    }
  });
});
