import type { Simulation } from './simulate.js';

/** Admitted and denied requests per time bin. */
export interface BinnedCounts {
  /** Width of a bin, seconds. */
  readonly binS: number;
  /** Start of each bin, seconds after the start of the run. */
  readonly startS: number[];
  readonly admitted: number[];
  readonly denied: number[];
}

/** Bins of about 1/60 of the run, rounded to 1, 2 or 5 × 10ⁿ ms so the axis reads well. */
export function binWidthUs(durationUs: number): number {
  const target = durationUs / 60 / 1000;
  const magnitude = 10 ** Math.floor(Math.log10(Math.max(target, 1)));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((w) => w >= target) ?? 10 * magnitude;
  return Math.max(1, step) * 1000;
}

/** Counts admitted and denied calls per bin. */
export function binCalls(sim: Pick<Simulation, 'durationUs' | 'calls'>): BinnedCounts {
  const binUs = binWidthUs(sim.durationUs);
  const bins = Math.max(1, Math.ceil(sim.durationUs / binUs));
  const admitted = new Array<number>(bins).fill(0);
  const denied = new Array<number>(bins).fill(0);
  for (const call of sim.calls) {
    const i = Math.min(bins - 1, Math.floor(call.atUs / binUs));
    if (call.allowed) admitted[i] = (admitted[i] as number) + 1;
    else denied[i] = (denied[i] as number) + 1;
  }
  const startS = admitted.map((_, i) => (i * binUs) / 1e6);
  return { binS: binUs / 1e6, startS, admitted, denied };
}
