import type { AlgorithmDescriptor, PolicyBase, PolicyBaseOptions } from './algorithm.js';
import { count, nameRate, oneOf, positive, trimNumber } from './fields.js';
import { checkMeter, compileMeter } from './meter.js';

/** Drip-free leaky bucket: a level that leaks `leakPerSecond`; `queue` mode shapes calls with `delayMs`. */
export interface LeakyBucketPolicy extends PolicyBase {
  readonly algorithm: 'leaky-bucket';
  readonly capacity: number;
  readonly leakPerSecond: number;
  readonly mode: 'meter' | 'queue';
}

/** Options of {@link leakyBucket}. */
export interface LeakyBucketOptions extends PolicyBaseOptions {
  capacity: number;
  leakPerSecond: number;
  /** @default 'meter' */
  mode?: 'meter' | 'queue';
}

/** The level of a drip-free leaky bucket, divided by the leak rate, is the time owed: the meter again. */
export const LEAKY_BUCKET: AlgorithmDescriptor<LeakyBucketPolicy> = {
  algorithm: 'leaky-bucket',
  factory: 'leakyBucket',
  fields: { capacity: count(), leakPerSecond: positive(), mode: oneOf('meter', 'queue') },
  check: (p, path) => checkMeter(path, 1e6 / p.leakPerSecond, p.capacity, `1 s / ${path}.leakPerSecond`),
  derivedName: (p) =>
    `leaky-bucket-${trimNumber(p.capacity)}-leak-${nameRate(p.leakPerSecond, p.capacity)}${p.mode === 'queue' ? '-queue' : ''}`,
  compile: (p) => compileMeter(1e6 / p.leakPerSecond, p.capacity, p.mode === 'queue'),
  quota: (p) => ({
    burst: p.capacity,
    ratePerMs: p.leakPerSecond / 1000,
    windowMs: (p.capacity * 1000) / p.leakPerSecond,
  }),
  gauge: (p) => ({
    label: p.mode === 'queue' ? 'bucket level (work queued ahead)' : 'bucket level',
    axis: 'level',
    ceilingLabel: 'capacity',
    scale: 'used',
  }),
};
