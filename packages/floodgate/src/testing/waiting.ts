import { deepStrictEqual } from 'node:assert/strict';
import { isFloodgateError } from '../errors.js';
import { createLimiter, type Limiter } from '../limiter/limiter.js';
import {
  fixedWindow,
  gcra,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../model/policy.js';
import type { Store } from '../stores/store.js';
import { type ManualClock, manualClock } from './manual-clock.js';

/** One step of a waiting table, at an explicit time (ms after the start). */
export interface WaitStep {
  at: number;
  /** `acquire` waits (the default); `limit` and `reset` happen at once, unexpected. */
  op?: 'acquire' | 'limit' | 'reset';
  key?: string;
  cost?: number;
  timeoutMs?: number;
  /** Aborts this acquire at that time (ms after the start). */
  abortAt?: number;
  /** `acquire` books its slot ahead (`reserve: true`). */
  reserve?: boolean;
  /** `acquire`: when it resolves (admitted) or rejects (with the code), ms after the start. */
  expect?: { admittedAt: number } | { error: string; at: number };
}

/** A table of waiting calls, run on a manual clock against a store. */
export interface WaitScenario {
  name: string;
  policies: Policy[];
  steps: WaitStep[];
  /** The table gives a booking back (an abort, a queue delay past the deadline): it needs the store's `cancel`. */
  cancels?: boolean;
}

/** Start of every waiting table: midnight UTC, 1 January 2030, aligned to every window used. */
const START_MS = Date.UTC(2030, 0, 1);

/** The acquire tables every store must reproduce: admission times follow each algorithm's schedule. */
export const waitScenarios: WaitScenario[] = [
  {
    name: 'acquire on GCRA waits exactly one emission interval per call',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, expect: { admittedAt: 100 } },
      { at: 0, expect: { admittedAt: 200 } },
      { at: 250, expect: { admittedAt: 300 } },
      { at: 1000, expect: { admittedAt: 1000 } },
    ],
  },
  {
    name: 'acquire is first come, first served: a later small call never overtakes an earlier big one',
    policies: [tokenBucket({ capacity: 5, refillAmount: 1, refillIntervalMs: 1000 })],
    steps: [
      { at: 0, op: 'limit', cost: 5 },
      { at: 0, cost: 3, expect: { admittedAt: 3000 } },
      { at: 10, cost: 1, expect: { admittedAt: 4000 } },
      { at: 20, cost: 1, expect: { admittedAt: 5000 } },
      { at: 20, key: 'other', cost: 5, expect: { admittedAt: 20 } },
    ],
  },
  {
    name: 'acquire: a timeout that cannot be met fails at once and consumes nothing',
    policies: [gcra({ limit: 1, periodMs: 1000 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, timeoutMs: 999, expect: { error: 'ERR_TIMEOUT', at: 0 } },
      { at: 0, timeoutMs: 1000, expect: { admittedAt: 1000 } },
      { at: 1500, timeoutMs: 0, expect: { error: 'ERR_TIMEOUT', at: 1500 } },
      { at: 2000, timeoutMs: 0, expect: { admittedAt: 2000 } },
    ],
  },
  {
    name: 'acquire: a waiter behind others times out on its own deadline, and hands its turn on',
    policies: [gcra({ limit: 1, periodMs: 1000 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, expect: { admittedAt: 1000 } },
      { at: 0, timeoutMs: 500, expect: { error: 'ERR_TIMEOUT', at: 500 } },
      { at: 0, expect: { admittedAt: 2000 } },
    ],
  },
  {
    name: 'acquire: an abort rejects, consumes nothing, and lets the next waiter in',
    policies: [gcra({ limit: 2, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, abortAt: 300, expect: { error: 'ERR_ABORTED', at: 300 } },
      { at: 0, expect: { admittedAt: 500 } },
      { at: 100, abortAt: 200, expect: { error: 'ERR_ABORTED', at: 200 } },
      { at: 600, expect: { admittedAt: 1000 } },
    ],
  },
  {
    name: 'acquire: a cost that can never fit is refused at once',
    policies: [gcra({ limit: 5, periodMs: 1000 })],
    steps: [
      { at: 0, cost: 6, expect: { error: 'ERR_INVALID_COST', at: 0 } },
      { at: 0, cost: 5, expect: { admittedAt: 0 } },
      { at: 0, cost: 5, expect: { admittedAt: 1000 } },
    ],
  },
  {
    name: 'acquire waits out a penalty box',
    policies: [fixedWindow({ limit: 1, windowMs: 1000, blockMs: 5000 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, op: 'limit' },
      { at: 0, expect: { admittedAt: 5000 } },
    ],
  },
  {
    name: 'acquire on an interval token bucket waits for the refill boundary',
    policies: [tokenBucket({ capacity: 2, refillAmount: 2, refillIntervalMs: 1000, refill: 'interval' })],
    steps: [0, 0, 1000, 1000, 2000].map((admittedAt) => ({ at: 0, expect: { admittedAt } })),
  },
  {
    name: 'acquire on a fixed window waits for the next window',
    policies: [fixedWindow({ limit: 2, windowMs: 1000 })],
    steps: [0, 0, 1000, 1000, 2000].map((admittedAt) => ({ at: 0, expect: { admittedAt } })),
  },
  {
    name: 'acquire on a sliding-window counter waits for the previous window to fade',
    policies: [slidingWindow({ limit: 4, windowMs: 1000 })],
    steps: [0, 0, 0, 0, 1250, 1500, 1750, 2000].map((admittedAt) => ({ at: 0, expect: { admittedAt } })),
  },
  {
    name: 'acquire on a bucketed window waits for the oldest bucket to leave the window',
    policies: [slidingWindow({ limit: 2, windowMs: 1000, precisionMs: 250 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, expect: { admittedAt: 0 } },
      ...[1000, 1000, 2000].map((admittedAt) => ({ at: 300, expect: { admittedAt } })),
    ],
  },
  {
    name: 'acquire on a sliding log waits for the oldest event to leave the window',
    policies: [slidingLog({ limit: 2, windowMs: 1000, minGapMs: 100 })],
    steps: [
      { at: 0, expect: { admittedAt: 0 } },
      { at: 0, expect: { admittedAt: 100 } },
      { at: 0, expect: { admittedAt: 1000 } },
      { at: 0, expect: { admittedAt: 1100 } },
    ],
  },
  {
    name: 'acquire on a leaky bucket meter: fractional costs',
    policies: [leakyBucket({ capacity: 2, leakPerSecond: 4 })],
    steps: [
      { at: 0, cost: 2, expect: { admittedAt: 0 } },
      { at: 0, cost: 0.5, expect: { admittedAt: 125 } },
      { at: 0, cost: 1.5, expect: { admittedAt: 500 } },
    ],
  },
  {
    name: 'acquire under two policies waits for the tighter one',
    policies: [
      gcra({ limit: 10, periodMs: 1000, name: 'per-second' }),
      fixedWindow({ limit: 3, windowMs: 60_000, name: 'per-minute' }),
    ],
    steps: [0, 0, 0, 60_000].map((admittedAt) => ({ at: 0, expect: { admittedAt } })),
  },
  {
    name: 'acquire with reserve books each slot in one store call and wakes when it comes',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      ...[0, 100, 200].map((admittedAt) => ({ at: 0, reserve: true, expect: { admittedAt } })),
      { at: 250, reserve: true, expect: { admittedAt: 300 } },
    ],
  },
  {
    name: 'acquire with reserve: a slot beyond the timeout fails at once and books nothing',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, reserve: true, expect: { admittedAt: 0 } },
      { at: 0, reserve: true, expect: { admittedAt: 100 } },
      { at: 0, reserve: true, timeoutMs: 150, expect: { error: 'ERR_TIMEOUT', at: 0 } },
      { at: 0, reserve: true, timeoutMs: 200, expect: { admittedAt: 200 } },
    ],
  },
  {
    name: 'acquire with reserve: an abort cancels the booking, and its slot goes to the next caller',
    cancels: true,
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, reserve: true, expect: { admittedAt: 0 } },
      { at: 0, reserve: true, abortAt: 50, expect: { error: 'ERR_ABORTED', at: 50 } },
      { at: 60, reserve: true, expect: { admittedAt: 100 } },
    ],
  },
  {
    name: 'acquire with reserve: an abort with a later booking behind it cannot give its slot back',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, reserve: true, expect: { admittedAt: 0 } },
      { at: 0, reserve: true, abortAt: 50, expect: { error: 'ERR_ABORTED', at: 50 } },
      { at: 0, reserve: true, expect: { admittedAt: 200 } },
      { at: 60, reserve: true, expect: { admittedAt: 300 } },
    ],
  },
  {
    name: 'acquire on a leaky bucket in queue mode waits out its place in the queue, or gives it back',
    cancels: true,
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 10, mode: 'queue' })],
    steps: [
      ...[0, 100, 200].map((admittedAt) => ({ at: 0, expect: { admittedAt } })),
      // Admitted at 100 with 200 ms to wait, past its deadline at 250: cancelled, and the place is free.
      { at: 0, timeoutMs: 250, expect: { error: 'ERR_TIMEOUT', at: 100 } },
      { at: 101, expect: { admittedAt: 300 } },
    ],
  },
];

interface Running {
  step: WaitStep;
  index: number;
  settled: boolean;
  outcome?: { admittedAt: number } | { error: string; at: number };
  abort?: AbortController;
}

/**
 * Runs one waiting table: starts each call at its time, moves the manual clock from one sleeper to the
 * next (waiting for the store in between), and asserts when each call was admitted or gave up.
 */
export async function runWaitScenario(store: Store, scenario: WaitScenario, prefix: string): Promise<void> {
  const clock = manualClock({ startMs: START_MS });
  const limiter = createLimiter({ store, policies: scenario.policies, clock, prefix });
  const runs: Running[] = [];
  const steps = scenario.steps.map((step, index) => ({ step, index }));
  const aborts: { atUs: number; run: Running }[] = [];
  let cursor = 0;
  for (;;) {
    const now = clock.nowUs();
    // Start everything due now, in table order; an abort due now happens after the starts.
    while (cursor < steps.length && usAt((steps[cursor] as { step: WaitStep }).step.at) <= now) {
      const { step, index } = steps[cursor++] as { step: WaitStep; index: number };
      await start(limiter, clock, step, index, runs, aborts);
    }
    for (const due of aborts.filter((a) => a.atUs <= now)) {
      aborts.splice(aborts.indexOf(due), 1);
      due.run.abort?.abort();
    }
    await quiesce(clock, runs, scenario.name);
    const nextStart = cursor < steps.length ? usAt((steps[cursor] as { step: WaitStep }).step.at) : Infinity;
    const next = Math.min(nextStart, ...aborts.map((a) => a.atUs), clock.nextWakeUs);
    if (next === Number.POSITIVE_INFINITY) break;
    if (next > clock.nowUs()) clock.advanceUs(next - clock.nowUs());
  }
  const unsettled = runs.filter((r) => !r.settled).map((r) => `step ${r.index + 1}`);
  if (unsettled.length > 0) throw new Error(`${scenario.name}: ${unsettled.join(', ')} never settled`);
  for (const run of runs) {
    if (run.step.expect === undefined) continue;
    deepStrictEqual(run.outcome, run.step.expect, `${scenario.name}, step ${run.index + 1} (at ${run.step.at} ms)`);
  }
}

function usAt(ms: number): number {
  return START_MS * 1000 + Math.round(ms * 1000);
}

async function start(
  limiter: Limiter,
  clock: ManualClock,
  step: WaitStep,
  index: number,
  runs: Running[],
  aborts: { atUs: number; run: Running }[],
): Promise<void> {
  const key = step.key ?? 'key';
  const cost = step.cost ?? 1;
  if (step.op === 'limit') {
    await limiter.limit(key, { cost });
    return;
  }
  if (step.op === 'reset') {
    await limiter.reset(key);
    return;
  }
  const run: Running = { step, index, settled: false };
  runs.push(run);
  if (step.abortAt !== undefined) {
    run.abort = new AbortController();
    aborts.push({ atUs: usAt(step.abortAt), run });
  }
  const since = (us: number) => (us - START_MS * 1000) / 1000;
  limiter
    .acquire(key, {
      cost,
      ...(step.timeoutMs === undefined ? {} : { timeoutMs: step.timeoutMs }),
      ...(step.reserve === undefined ? {} : { reserve: step.reserve }),
      ...(run.abort === undefined ? {} : { signal: run.abort.signal }),
    })
    .then(
      (decision) => {
        run.outcome = decision.allowed ? { admittedAt: since(clock.nowUs()) } : { error: 'NOT_ALLOWED', at: 0 };
      },
      (error: unknown) => {
        run.outcome = { error: isFloodgateError(error) ? error.code : String(error), at: since(clock.nowUs()) };
      },
    )
    .finally(() => {
      run.settled = true;
    });
}

/**
 * Waits (in real time, for the store) until every unsettled call is asleep on the manual clock: then
 * nothing more happens until the clock moves.
 */
async function quiesce(clock: ManualClock, runs: Running[], name: string): Promise<void> {
  const startedAt = Date.now();
  let stableRounds = 0;
  for (;;) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    const unsettled = runs.filter((r) => !r.settled).length;
    if (clock.pending === unsettled) {
      // Settled twice in a row: a wake-up that just ran has had its chance to call the store.
      if (++stableRounds >= 2) return;
    } else {
      stableRounds = 0;
    }
    if (Date.now() - startedAt > 20_000) {
      throw new Error(`${name}: calls neither settled nor slept within 20 s (${unsettled} unsettled)`);
    }
  }
}
