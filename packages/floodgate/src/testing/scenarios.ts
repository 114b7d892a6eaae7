import type { Decision } from '../model/decision.js';
import type { Algorithm, Policy } from '../model/policy.js';
import { combinedTables } from './tables/combined.js';
import { fixedWindowTables } from './tables/fixed-window.js';
import { gcraTables } from './tables/gcra.js';
import { leakyBucketTables } from './tables/leaky-bucket.js';
import { slidingLogTables } from './tables/sliding-log.js';
import { slidingWindowTables } from './tables/sliding-window.js';
import { tokenBucketTables } from './tables/token-bucket.js';

/** What a step expects of the decision; fields left out are not checked. */
export type Expectation = Partial<
  Pick<Decision, 'allowed' | 'remaining' | 'retryAfterMs' | 'resetAfterMs' | 'reason'>
> & {
  /** `null` expects no `delayMs` at all. */
  delayMs?: number | null;
  /** Name of the binding policy. */
  policy?: string;
  /** `cancel` steps: whether the whole cost came back under every policy. */
  cancelled?: boolean;
};

/** One call at an explicit time (ms after the scenario's start, which is aligned to the hour). */
export interface Step {
  at: number;
  op?: 'limit' | 'check' | 'status' | 'reset' | 'cancel';
  /** `cancel` steps: the (1-based) step whose reservation to cancel. */
  cancels?: number;
  key?: string;
  cost?: number;
  maxDelayMs?: number;
  /** Runs the same call this many times (every one must meet `expect`, unless `expectEach` is given). */
  repeat?: number;
  expect?: Expectation;
  /** One expectation per repetition. */
  expectEach?: Expectation[];
}

/** A table of calls with explicit times, written from the semantics in DESIGN.md. */
export interface Scenario {
  name: string;
  policies: Policy[];
  steps: Step[];
}

/**
 * The tables of each algorithm, one file per algorithm in `tables/` (typed by algorithm: a new one is not
 * forgotten), then the tables that hold across algorithms.
 */
const TABLES: Record<Algorithm, readonly Scenario[]> = {
  gcra: gcraTables,
  'token-bucket': tokenBucketTables,
  'leaky-bucket': leakyBucketTables,
  'fixed-window': fixedWindowTables,
  'sliding-window': slidingWindowTables,
  'sliding-log': slidingLogTables,
};

/** The algorithm tables every store must reproduce exactly. */
export const scenarios: Scenario[] = [...Object.values(TABLES).flat(), ...combinedTables];
