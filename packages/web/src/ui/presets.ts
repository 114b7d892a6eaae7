import type { Algorithm } from 'floodgate';
import type { TrafficKind } from '../sim/traffic.js';
import type { Values } from './fields.js';

/** A ready-made comparison: two policies and the traffic that tells them apart. */
export interface Preset {
  readonly title: string;
  readonly a: { readonly algorithm: Algorithm; readonly values: Values; readonly common?: Values };
  readonly b: { readonly algorithm: Algorithm; readonly values: Values; readonly common?: Values };
  readonly traffic: { readonly kind: TrafficKind; readonly values: Values; readonly common?: Values };
}

export const PRESETS: readonly Preset[] = [
  {
    title: 'Stampede at the top of the window: fixed window vs sliding window',
    a: { algorithm: 'fixed-window', values: { limit: '10', windowMs: '5000' } },
    b: { algorithm: 'sliding-window', values: { limit: '10', windowMs: '5000' } },
    traffic: {
      kind: 'stampede',
      values: { size: '10', windowMs: '5000', spreadMs: '200' },
      common: { durationS: '20' },
    },
  },
  {
    title: 'Bursts: GCRA vs token bucket refilled at intervals',
    a: { algorithm: 'gcra', values: { limit: '10', periodMs: '1000', burst: '5' } },
    b: {
      algorithm: 'token-bucket',
      values: { capacity: '10', refillAmount: '10', refillIntervalMs: '1000', refill: 'interval' },
    },
    traffic: { kind: 'bursts', values: { size: '12', everyMs: '1500' }, common: { durationS: '12' } },
  },
  {
    title: 'On/off attacker: a penalty box vs a plain limit',
    a: {
      algorithm: 'sliding-log',
      values: { limit: '10', windowMs: '1000', countDenied: true },
      common: { blockMs: '5000' },
    },
    b: { algorithm: 'gcra', values: { limit: '10', periodMs: '1000' } },
    traffic: {
      kind: 'on-off',
      values: { ratePerSecond: '40', onMs: '2000', offMs: '4000' },
      common: { durationS: '20' },
    },
  },
  {
    title: 'Random traffic: the exact sliding log vs the sliding-window estimate',
    a: { algorithm: 'sliding-log', values: { limit: '10', windowMs: '1000' } },
    b: { algorithm: 'sliding-window', values: { limit: '10', windowMs: '1000' } },
    traffic: { kind: 'random', values: { ratePerSecond: '14', seed: '7' }, common: { durationS: '15' } },
  },
  {
    // Bursts larger than the bucket: the meter admits a burst's first 10 at once and denies the rest; the
    // queue admits about as many and spreads them out (its delay chart), so what leaves is a steady flow.
    title: 'Shaping: a leaky bucket as a queue (requests wait) vs as a meter',
    a: { algorithm: 'leaky-bucket', values: { capacity: '10', leakPerSecond: '10', mode: 'queue' } },
    b: { algorithm: 'leaky-bucket', values: { capacity: '10', leakPerSecond: '10', mode: 'meter' } },
    traffic: { kind: 'bursts', values: { size: '15', everyMs: '2000' }, common: { durationS: '10' } },
  },
];
