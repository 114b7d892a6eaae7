export { type CallStyle, GENERAL_CALLS } from './calls.js';
export {
  type ConformanceOptions,
  compareWithModel,
  randomPolicySets,
  runConformanceSuite,
  runScenario,
  SCENARIO_START_MS,
  type SuiteApi,
  seededRandom,
  type TestContext,
  uniquePrefix,
} from './conformance.js';
export {
  countingStore,
  EXTREME_COSTS,
  type ExtremeCostTable,
  extremeCostTables,
  REFUSED_COSTS,
  runExtremeCostTable,
  runRefusedCosts,
} from './cost-domain.js';
export { type FastPathOptions, type FastPathVariant, runFastPathSuite } from './fast-path.js';
export { type ManualClock, manualClock } from './manual-clock.js';
export { modelStore } from './model-store.js';
export { assertPlainDecision, type PlainDataOptions, runPlainDataSuite } from './plain-data.js';
export { type RefundStep, type RefundTable, refundTables, runRefundTable } from './refunds.js';
export { type Expectation, type Scenario, type Step, scenarios } from './scenarios.js';
export { runSettleRefusals, runSettleTable, type SettleStep, type SettleTable, settleTables } from './settles.js';
export { runWaitScenario, type WaitScenario, type WaitStep, waitScenarios } from './waiting.js';
