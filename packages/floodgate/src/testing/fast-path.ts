import { gcra, type Policy } from '../model/policy.js';
import { isSyncStore, type Store } from '../stores/store.js';
import { type CallStyle, styleName } from './calls.js';
import {
  compareWithModel,
  onStore,
  randomPolicySets,
  runScenario,
  type SuiteApi,
  type TestContext,
} from './conformance.js';
import { type Scenario, scenarios } from './scenarios.js';

/**
 * One path of a store to hold to the model: a store (or a configuration of one) and the calls that reach
 * that path. A store test names one variant per path it has, e.g. the memory store's `meter fast path`
 * (calls without options) and `general path` (calls with options), or a network store's batch script or
 * meter statement with the options that select it.
 */
export interface FastPathVariant {
  /** The path's name, in the test names: `meter fast path`, `batch script`, `meter statement`… */
  name: string;
  /** Returns the store under test, configured for this path; called once per test (it may return a shared one). */
  store: () => Store | Promise<Store>;
  /** Runs after each test with the store it got. */
  release?: (store: Store) => Promise<void> | void;
  /**
   * How calls are made: `bare` calls (no options object where none is needed, the way to a fast path),
   * calls with an options object, or both. @default ['bare', 'options']
   */
  calls?: readonly ('bare' | 'options')[];
  /**
   * Through the promise methods, the sync methods (a store that decides synchronously), or both.
   * @default both when the store decides synchronously, else ['promise']
   */
  methods?: readonly ('promise' | 'sync')[];
}

/** Options of {@link runFastPathSuite}. */
export interface FastPathOptions {
  variants: readonly FastPathVariant[];
  /** Operations per randomized run (one run per policy set of `randomPolicySets`). @default 200 */
  randomOperations?: number;
  /** Seed of the first policy set's run; set `i` uses seed + i. A failure names its seed. @default 20_000 */
  seed?: number;
  /** Leave out the randomized comparison (the tables only): for slow stores. @default false */
  tablesOnly?: boolean;
}

/**
 * A policy that never binds beside any table's: so generous that it always has the most left and never
 * denies. Beside it, a one-policy table is decided under two policies with the same decision, so a store's
 * code for several policies runs the table too.
 */
const ROOMY: Policy = gcra({ limit: 1e6, periodMs: 1e9, name: 'roomy' });

const cancels = (scenario: Scenario) => scenario.steps.some((step) => step.op === 'cancel');

function withRoomy(scenario: Scenario): Scenario {
  return { ...scenario, policies: [...scenario.policies, ROOMY] };
}

/**
 * The proof that every path of a store is the same decision: for each variant, every call style (with and
 * without an options object, promise and sync methods) runs the shared algorithm tables (as written, and
 * beside a policy that never binds, so under several policies) and the randomized comparison with the
 * reference model over every policy set. Calls a fast path leaves to the general path still pass; the
 * suite proves the two agree, whichever decides.
 *
 * @example
 * ```ts
 * import { describe, it } from 'vitest';
 * runFastPathSuite({ describe, it }, {
 *   variants: [
 *     { name: 'meter fast path', store: () => memoryStore(), calls: ['bare'] },
 *     { name: 'general path', store: () => memoryStore(), calls: ['options'] },
 *   ],
 * });
 * ```
 */
export function runFastPathSuite(api: SuiteApi, options: FastPathOptions): void {
  for (const variant of options.variants) {
    api.describe(variant.name, () => {
      for (const bare of (variant.calls ?? ['bare', 'options']).map((c) => c === 'bare')) {
        for (const method of variant.methods ?? ['promise', 'sync']) {
          const style: CallStyle = { bare, sync: method === 'sync' };
          api.describe(styleName(style), () => {
            defineStyle(api, options, variant, style, variant.methods === undefined);
          });
        }
      }
    });
  }
}

function defineStyle(
  api: SuiteApi,
  options: FastPathOptions,
  variant: FastPathVariant,
  style: CallStyle,
  skipWhenAsync: boolean,
): void {
  /** Why a test cannot run on this store, or undefined. */
  const skipped = (store: Store, cancels: boolean): string | undefined => {
    if (style.sync && !isSyncStore(store)) {
      if (!skipWhenAsync) throw new Error(`${variant.name}: the ${store.name} store has no sync methods`);
      return `the ${store.name} store decides asynchronously: no sync methods`;
    }
    // The conformance suite checks the limiter's refusal of a store without cancel().
    if (cancels && store.cancel === undefined) return `the ${store.name} store has no cancel(), an optional operation`;
    return undefined;
  };
  const withStore =
    (fn: (store: Store) => Promise<void>, cancels = false) =>
    (context?: TestContext) =>
      onStore(variant, fn, (store) => skipped(store, cancels), context);
  api.describe('algorithm tables', () => {
    for (const scenario of scenarios) {
      api.it(
        scenario.name,
        withStore((store) => runScenario(store, scenario, style), cancels(scenario)),
      );
    }
  });
  api.describe('algorithm tables beside a policy that never binds', () => {
    for (const scenario of scenarios) {
      api.it(
        scenario.name,
        withStore((store) => runScenario(store, withRoomy(scenario), style), cancels(scenario)),
      );
    }
  });
  if (options.tablesOnly === true) return;
  api.describe('randomized comparison with the reference model', () => {
    const first = options.seed ?? 20_000;
    for (const [i, policies] of randomPolicySets().entries()) {
      const seed = first + i;
      api.it(
        `seed ${seed}: ${policies.map((p) => p.name).join(' + ')}`,
        withStore((store) =>
          compareWithModel(store, { seed, policies, operations: options.randomOperations ?? 200, style }),
        ),
        120_000,
      );
    }
  });
}
