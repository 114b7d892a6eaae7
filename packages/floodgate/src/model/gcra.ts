import type { AlgorithmDescriptor, PolicyBase, PolicyBaseOptions } from './algorithm.js';
import { count, duration, nameDuration, toUs, trimNumber } from './fields.js';
import { checkMeter, compileMeter } from './meter.js';

/** Generic cell rate algorithm: `limit` per `periodMs`, up to `burst` at once; one timestamp per key. */
export interface GcraPolicy extends PolicyBase {
  readonly algorithm: 'gcra';
  readonly limit: number;
  readonly periodMs: number;
  readonly burst: number;
}

/** Options of {@link gcra}. */
export interface GcraOptions extends PolicyBaseOptions {
  limit: number;
  periodMs: number;
  /** @default limit */
  burst?: number;
}

/** GCRA runs on the meter: the emission interval T = periodMs / limit, the tolerance τ = burst · T. */
export const GCRA: AlgorithmDescriptor<GcraPolicy> = {
  algorithm: 'gcra',
  factory: 'gcra',
  fields: { limit: count(), periodMs: duration(), burst: count({ fallback: 'limit' }) },
  check: (p, path) => checkMeter(path, (p.periodMs * 1000) / p.limit, p.burst, `${path}.periodMs / ${path}.limit`),
  derivedName: (p) =>
    `gcra-${trimNumber(p.limit)}-per-${nameDuration(p.periodMs)}${p.burst === p.limit ? '' : `-burst-${trimNumber(p.burst)}`}`,
  // Emission interval T: one unit of cost every T µs; up to `burst` units may be owed at once.
  compile: (p) => compileMeter(toUs(p.periodMs) / p.limit, p.burst, false),
  quota: (p) => ({ burst: p.burst, ratePerMs: p.limit / p.periodMs, windowMs: (p.burst * p.periodMs) / p.limit }),
  gauge: () => ({
    label: 'how far the theoretical arrival time (TAT) is ahead of now, ms',
    axis: 'TAT − now (ms)',
    ceilingLabel: 'τ = burst × T',
    scale: 'owed-ms',
  }),
};
