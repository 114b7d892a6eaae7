import { deepStrictEqual } from 'node:assert/strict';
import { createLimiter } from '../limiter/limiter.js';
import { compilePolicy } from '../model/compile.js';
import { fixedWindow, gcra, type Policy, slidingLog, slidingWindow, tokenBucket } from '../model/policy.js';
import type { Store } from '../stores/store.js';
import { manualClock } from './manual-clock.js';

/** One step of a refund table: at `at` ms, take a lease, or give back units of an earlier one, then check. */
export interface RefundStep {
  at: number;
  /** A lease: a committed call of this cost (it must be admitted). */
  lease?: number;
  /** A plain call of this cost by someone else (it must be admitted). */
  call?: number;
  /** Gives back `unused` units of the lease taken at step `of` (1-based). */
  refund?: { of: number; unused: number };
  /** What `status` says after the step. */
  expect: { remaining: number; resetAfterMs?: number };
}

/** A refund table: explicit times, written from the semantics of `refundPolicy` (model/refund.ts). */
export interface RefundTable {
  name: string;
  policies: Policy[];
  steps: RefundStep[];
}

const START_MS = Date.UTC(2030, 0, 1);

export const refundTables: readonly RefundTable[] = [
  {
    // T = 100 ms. Giving back 4 of a 6-unit lease leaves what a 2-unit call would have.
    name: 'GCRA: unused units come back while the lease lies ahead',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4, resetAfterMs: 600 } },
      { at: 100, refund: { of: 1, unused: 4 }, expect: { remaining: 9, resetAfterMs: 100 } },
    ],
  },
  {
    // The lease's TAT segment ends at 600; at 500 only 100 ms of it lies ahead, so only that comes off:
    // the 300 ms another caller took at 300 stay, and the key is never freer than had the lease been 2.
    name: 'GCRA: only the part of the lease still ahead of now comes back',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 300, call: 3, expect: { remaining: 4, resetAfterMs: 600 } },
      { at: 500, refund: { of: 1, unused: 4 }, expect: { remaining: 7, resetAfterMs: 300 } },
    ],
  },
  {
    name: 'GCRA: nothing comes back once the lease has drained',
    policies: [gcra({ limit: 10, periodMs: 1000 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 650, call: 1, expect: { remaining: 9, resetAfterMs: 100 } },
      { at: 700, refund: { of: 1, unused: 6 }, expect: { remaining: 9, resetAfterMs: 50 } },
    ],
  },
  {
    name: 'token bucket, interval: units come back until the next refill',
    policies: [tokenBucket({ capacity: 10, refillAmount: 5, refillIntervalMs: 1000, refill: 'interval' })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 500, refund: { of: 1, unused: 4 }, expect: { remaining: 8, resetAfterMs: 500 } },
      { at: 600, lease: 6, expect: { remaining: 2 } },
      // The refill at 1000 gave back 5 of the 8 used: the lease of 6 can no longer be told apart.
      { at: 1100, refund: { of: 3, unused: 6 }, expect: { remaining: 7 } },
    ],
  },
  {
    name: 'fixed window, clock-aligned: units come back within the lease’s window only',
    policies: [fixedWindow({ limit: 10, windowMs: 1000 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 500, refund: { of: 1, unused: 4 }, expect: { remaining: 8, resetAfterMs: 500 } },
      { at: 900, lease: 5, expect: { remaining: 3 } },
      { at: 1100, call: 2, expect: { remaining: 8 } },
      { at: 1200, refund: { of: 3, unused: 5 }, expect: { remaining: 8 } },
    ],
  },
  {
    name: 'fixed window, first request: units come back within the live window that holds the lease',
    policies: [fixedWindow({ limit: 10, windowMs: 1000, align: 'first-request' })],
    steps: [
      { at: 250, lease: 6, expect: { remaining: 4, resetAfterMs: 1000 } },
      { at: 1200, refund: { of: 1, unused: 5 }, expect: { remaining: 9, resetAfterMs: 50 } },
      { at: 1250, lease: 4, expect: { remaining: 6, resetAfterMs: 1000 } },
      { at: 1300, refund: { of: 1, unused: 1 }, expect: { remaining: 6 } },
    ],
  },
  {
    // At 1500 the lease's window is the previous one, weighted by half: 2 left of 6 count as 1.
    name: 'sliding window: units come back from the current or the previous window',
    policies: [slidingWindow({ limit: 10, windowMs: 1000 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 400, refund: { of: 1, unused: 2 }, expect: { remaining: 6 } },
      { at: 1500, refund: { of: 1, unused: 2 }, expect: { remaining: 9 } },
      { at: 2100, refund: { of: 1, unused: 2 }, expect: { remaining: 10 } },
    ],
  },
  {
    // Buckets of 100 ms over a second: the lease's bucket loses the units until it leaves the window.
    name: 'bucketed window: the lease’s bucket loses the units while it is in the window',
    policies: [slidingWindow({ limit: 10, windowMs: 1000, precisionMs: 100 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 50, call: 2, expect: { remaining: 2 } },
      { at: 150, refund: { of: 1, unused: 2 }, expect: { remaining: 4, resetAfterMs: 850 } },
      { at: 250, refund: { of: 1, unused: 4 }, expect: { remaining: 8, resetAfterMs: 750 } },
      { at: 1000, lease: 5, expect: { remaining: 5 } },
      { at: 1100, refund: { of: 1, unused: 2 }, expect: { remaining: 5 } },
      { at: 1200, refund: { of: 5, unused: 5 }, expect: { remaining: 10, resetAfterMs: 0 } },
    ],
  },
  {
    name: 'sliding log: the lease’s event loses the units, and goes when none are left',
    policies: [slidingLog({ limit: 10, windowMs: 1000 })],
    steps: [
      { at: 0, lease: 6, expect: { remaining: 4 } },
      { at: 100, call: 2, expect: { remaining: 2 } },
      { at: 200, refund: { of: 1, unused: 2 }, expect: { remaining: 4, resetAfterMs: 900 } },
      { at: 300, refund: { of: 1, unused: 4 }, expect: { remaining: 8, resetAfterMs: 800 } },
    ],
  },
  {
    name: 'two policies: each gives back what it can',
    policies: [
      gcra({ limit: 10, periodMs: 1000, name: 'rate' }),
      fixedWindow({ limit: 20, windowMs: 1000, name: 'cap' }),
    ],
    steps: [
      { at: 0, lease: 8, expect: { remaining: 2 } },
      { at: 200, refund: { of: 1, unused: 8 }, expect: { remaining: 10 } },
    ],
  },
];

/** Runs one refund table against a store (one that implements the optional `refund`) and asserts every step. */
export async function runRefundTable(store: Store, table: RefundTable, prefix: string): Promise<void> {
  const refund = store.refund;
  if (refund === undefined) throw new Error(`the ${store.name} store has no refund(): it cannot lease`);
  const clock = manualClock({ startMs: START_MS });
  const limiter = createLimiter({ store, policies: table.policies, clock, prefix });
  const compiled = table.policies.map(compilePolicy);
  const leases: { atUs: number; cost: number }[] = [];
  let index = 0;
  for (const step of table.steps) {
    index++;
    const where = `${table.name}, step ${index} (at ${step.at} ms)`;
    clock.advanceUs(START_MS * 1000 + step.at * 1000 - clock.nowUs());
    if (step.lease !== undefined || step.call !== undefined) {
      const cost = (step.lease ?? step.call) as number;
      const decision = await limiter.limit('k', { cost });
      deepStrictEqual(decision.allowed, true, `${where}: the call must be admitted`);
    }
    leases.push({ atUs: clock.nowUs(), cost: step.lease ?? 0 });
    if (step.refund !== undefined) {
      const lease = leases[step.refund.of - 1];
      if (lease === undefined || lease.cost === 0) throw new Error(`${where}: step ${step.refund.of} took no lease`);
      await refund.call(store, {
        prefix,
        key: 'k',
        policies: compiled,
        leased: lease.cost,
        leasedAtUs: lease.atUs,
        unused: step.refund.unused,
        nowUs: clock.nowUs(),
      });
    }
    const status = await limiter.status('k');
    const got: Record<string, number> = { remaining: status.remaining };
    if (step.expect.resetAfterMs !== undefined) got.resetAfterMs = status.resetAfterMs;
    deepStrictEqual(got, step.expect, `${where}: got ${JSON.stringify(status)}`);
  }
}
