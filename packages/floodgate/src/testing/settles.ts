import { deepStrictEqual, strictEqual } from 'node:assert/strict';
import { isFloodgateError } from '../errors.js';
import { createLimiter } from '../limiter/limiter.js';
import type { Decision } from '../model/decision.js';
import { gcra, type Policy, tokenBucket } from '../model/policy.js';
import { MAX_DEBT_US } from '../model/settle.js';
import type { Store } from '../stores/store.js';
import { manualClock } from './manual-clock.js';

/** One step of a settle table: at `at` ms, a call admitted with an estimate, or a settle of one, then `status`. */
export interface SettleStep {
  at: number;
  /** A call of this estimated cost, with `settle: true` (it must be admitted). */
  call?: number;
  /** Settles the call of step `of` (1-based) at its actual `cost`. */
  settle?: { of: number; cost: number };
  /** What `status` says after the step. */
  expect: { remaining: number; resetAfterMs?: number };
}

/** A settle table: explicit times, written from the semantics of `settlePolicy` (model/settle.ts). */
export interface SettleTable {
  name: string;
  policies: Policy[];
  steps: SettleStep[];
}

const START_MS = Date.UTC(2030, 0, 1);

export const settleTables: readonly SettleTable[] = [
  {
    // T = 100 ms, τ = 1 s. The call estimated 2 cost 25: 23 units more (2.3 s) are owed, past the burst
    // of 10, and nothing passes until the key owes less than a second again.
    name: 'GCRA: a cost above the estimate is charged past the limit, a debt paid by waiting',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, call: 2, expect: { remaining: 8, resetAfterMs: 200 } },
      { at: 100, settle: { of: 1, cost: 25 }, expect: { remaining: 0, resetAfterMs: 2400 } },
      { at: 1500, expect: { remaining: 0, resetAfterMs: 1000 } },
      { at: 1600, expect: { remaining: 1, resetAfterMs: 900 } },
      { at: 1600, call: 1, expect: { remaining: 0, resetAfterMs: 1000 } },
    ],
  },
  {
    // Estimated 6, cost 2: the 4 units come back as far as they still lie ahead (all of them at 100).
    name: 'GCRA: a cost below the estimate gives the difference back',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, call: 6, expect: { remaining: 4, resetAfterMs: 600 } },
      { at: 100, settle: { of: 1, cost: 2 }, expect: { remaining: 9, resetAfterMs: 100 } },
    ],
  },
  {
    // By 800 both estimates have drained: the first call's refund gives nothing (others could use those
    // units already), the second one's debt counts from now, not from its drained TAT.
    name: 'GCRA: after the estimate drained, nothing comes back, and a debt counts from now',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, call: 3, expect: { remaining: 7, resetAfterMs: 300 } },
      { at: 0, call: 2, expect: { remaining: 5, resetAfterMs: 500 } },
      { at: 800, settle: { of: 1, cost: 0 }, expect: { remaining: 10, resetAfterMs: 0 } },
      { at: 800, settle: { of: 2, cost: 5 }, expect: { remaining: 7, resetAfterMs: 300 } },
    ],
  },
  {
    // The bucket: T = 250 ms, capacity 4; GCRA: T = 100 ms. The debt of 3 units lands on both.
    name: 'continuous token bucket beside GCRA: each policy owes the debt',
    policies: [
      tokenBucket({ capacity: 4, refillAmount: 1, refillIntervalMs: 250, name: 'bucket' }),
      gcra({ limit: 10, periodMs: 1000, name: 'rate' }),
    ],
    steps: [
      { at: 0, call: 2, expect: { remaining: 2, resetAfterMs: 500 } },
      { at: 0, settle: { of: 1, cost: 5 }, expect: { remaining: 0, resetAfterMs: 1250 } },
      { at: 500, expect: { remaining: 1, resetAfterMs: 750 } },
    ],
  },
  {
    // A debt of 2^53 − 1 units is kept at MAX_DEBT_US owed: every number stays exact on every store.
    name: 'GCRA: the largest debt a key may owe is MAX_DEBT_US',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, call: 1, expect: { remaining: 9, resetAfterMs: 100 } },
      {
        at: 0,
        settle: { of: 1, cost: Number.MAX_SAFE_INTEGER },
        expect: { remaining: 0, resetAfterMs: Math.ceil(MAX_DEBT_US / 1000) },
      },
    ],
  },
];

/** Runs one settle table against a store through `limiter.settle`, and asserts every step. */
export async function runSettleTable(store: Store, table: SettleTable, prefix: string): Promise<void> {
  const clock = manualClock({ startMs: START_MS });
  const limiter = createLimiter({ store, policies: table.policies, clock, prefix });
  const calls: (Decision | undefined)[] = [];
  let index = 0;
  for (const step of table.steps) {
    index++;
    const where = `${table.name}, step ${index} (at ${step.at} ms)`;
    clock.advanceUs(START_MS * 1000 + step.at * 1000 - clock.nowUs());
    let decision: Decision | undefined;
    if (step.call !== undefined) {
      decision = await limiter.limit('k', { cost: step.call, settle: true });
      deepStrictEqual(decision.allowed, true, `${where}: the call must be admitted`);
    }
    calls.push(decision);
    if (step.settle !== undefined) {
      const call = calls[step.settle.of - 1];
      if (call === undefined) throw new Error(`${where}: step ${step.settle.of} made no call`);
      await limiter.settle('k', call, { cost: step.settle.cost });
    }
    const status = await limiter.status('k');
    const got: Record<string, number> = { remaining: status.remaining };
    if (step.expect.resetAfterMs !== undefined) got.resetAfterMs = status.resetAfterMs;
    deepStrictEqual(got, step.expect, `${where}: got ${JSON.stringify(status)}`);
  }
}

/**
 * The settle refusals every store shares, each before the store is asked: a second settle, an altered or
 * foreign settlement, a cost that is not a finite number ≥ 0. The key stays as the one settle left it.
 */
export async function runSettleRefusals(store: Store, prefix: string): Promise<void> {
  const clock = manualClock({ startMs: START_MS });
  const policies = [gcra({ limit: 10, periodMs: 1000 })];
  const limiter = createLimiter({ store, policies, clock, prefix });
  const decision = await limiter.limit('k', { cost: 10, settle: true });
  const settlement = decision.settlement;
  if (settlement === undefined) throw new Error('an admitted call with settle: true carries a settlement');
  const refusals: [string, () => Promise<unknown>, string, string][] = [
    ['NaN', () => limiter.settle('k', decision, { cost: Number.NaN }), 'ERR_INVALID_COST', 'cost'],
    ['a negative cost', () => limiter.settle('k', decision, { cost: -1 }), 'ERR_INVALID_COST', 'cost'],
    ['Infinity', () => limiter.settle('k', decision, { cost: Number.POSITIVE_INFINITY }), 'ERR_INVALID_COST', 'cost'],
    ['2^53', () => limiter.settle('k', decision, { cost: 2 ** 53 }), 'ERR_INVALID_COST', 'cost'],
    [
      'an altered estimate',
      () => limiter.settle('k', { ...decision, settlement: { ...settlement, cost: 1000 } }, { cost: 0 }),
      'ERR_INVALID_OPTION',
      'decision',
    ],
    ['another key', () => limiter.settle('other', decision, { cost: 0 }), 'ERR_INVALID_OPTION', 'decision'],
  ];
  for (const [what, call, code, option] of refusals) {
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    strictEqual(
      isFloodgateError(error) && error.code === code && error.option === option,
      true,
      `${what}: ${String(error)}`,
    );
  }
  strictEqual(await limiter.settle('k', decision, { cost: 4 }), true);
  const twice = await limiter.settle('k', decision, { cost: 0 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  strictEqual(isFloodgateError(twice) && twice.option === 'decision', true, `a second settle: ${String(twice)}`);
  // 6 of 10 came back once, not twice.
  deepStrictEqual((await limiter.status('k')).remaining, 6);
}
