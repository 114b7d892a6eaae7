import { type CompiledPolicy, readState as readModelState, type State, type StateField } from 'floodgate/model';

/** What the state chart of a policy plots, and against which ceiling. */
export interface LevelScale {
  /** What `level` is for this algorithm, in words. */
  readonly label: string;
  /** The same, short enough for an axis. */
  readonly axis: string;
  /** The ceiling drawn across the chart: a call is refused when it would push `level` past it. */
  readonly ceiling: number;
  /** Label of the ceiling line. */
  readonly ceilingLabel: string;
  /** True when a full bucket is the top (token buckets count tokens left, so calls take `level` down). */
  readonly countsDown: boolean;
}

/** A policy's state at one instant, read from the stored state as the model lays it out (see `State`). */
export interface Readout {
  /** The plotted quantity: TAT ahead of now (GCRA, ms), bucket level, tokens left, window count. */
  readonly level: number;
  /** ms left in the penalty box; 0 when not blocked. */
  readonly blockedMs: number;
  /** The raw fields, named, for the readout table. */
  readonly fields: readonly (readonly [string, string])[];
}

/** The scale of a policy's state chart. */
export function levelScale(c: CompiledPolicy): LevelScale {
  const policy = c.policy;
  switch (policy.algorithm) {
    case 'gcra':
      return {
        label: 'how far the theoretical arrival time (TAT) is ahead of now, ms',
        axis: 'TAT − now (ms)',
        ceiling: c.b / 1000,
        ceilingLabel: 'τ = burst × T',
        countsDown: false,
      };
    case 'token-bucket':
      return {
        label: 'tokens in the bucket',
        axis: 'tokens',
        ceiling: c.limit,
        ceilingLabel: 'capacity',
        countsDown: true,
      };
    case 'leaky-bucket':
      return {
        label: policy.mode === 'queue' ? 'bucket level (work queued ahead)' : 'bucket level',
        axis: 'level',
        ceiling: c.limit,
        ceilingLabel: 'capacity',
        countsDown: false,
      };
    case 'fixed-window':
      return {
        label: 'count in the current window',
        axis: 'count',
        ceiling: c.limit,
        ceilingLabel: 'limit',
        countsDown: false,
      };
    case 'sliding-window':
      if (policy.precisionMs !== undefined) {
        return {
          label: `count in the window's buckets of ${fmt(policy.precisionMs)} ms`,
          axis: 'count',
          ceiling: c.limit,
          ceilingLabel: 'limit',
          countsDown: false,
        };
      }
      return {
        label: 'weighted count: previous window × its overlap + current window',
        axis: 'weighted count',
        ceiling: c.limit,
        ceilingLabel: 'limit',
        countsDown: false,
      };
    case 'sliding-log':
      return {
        label: 'cost logged in the last window',
        axis: 'logged',
        ceiling: c.limit,
        ceilingLabel: 'limit',
        countsDown: false,
      };
  }
}

/**
 * Reads a policy's state at `nowUs` for the page: the model's own reading (`readState` of floodgate/model,
 * which reads each kind's layout exactly as its evaluation does: windows rolling over, refills and their
 * dust, the TAT ahead of now), turned into the plotted level and named, formatted fields. `s` is the
 * state the store holds (undefined when untouched); times are shown relative to `startUs`.
 */
export function readState(c: CompiledPolicy, s: State | undefined, nowUs: number, startUs: number): Readout {
  const reading = readModelState(c, s, nowUs);
  const blockedMs = reading.blockedUntilUs > nowUs ? (reading.blockedUntilUs - nowUs) / 1000 : 0;
  const show = (field: StateField): string =>
    field.unit === 'time'
      ? `${fmt((field.value - startUs) / 1000)} ms`
      : field.unit === 'duration'
        ? `${fmt(field.value / 1000)} ms`
        : fmt(field.value);
  const fields: [string, string][] = [];
  if (blockedMs > 0)
    fields.push(['penalty box ends', show({ label: '', value: reading.blockedUntilUs, unit: 'time' })]);
  for (const field of reading.fields) fields.push([field.label, show(field)]);
  // What the chart plots: GCRA's TAT ahead of now in ms; a token bucket's tokens left; else what is used.
  const algorithm = c.policy.algorithm;
  let level = reading.used;
  if (algorithm === 'gcra') level = (reading.used * c.a) / 1000;
  else if (algorithm === 'token-bucket') level = c.limit - reading.used;
  fields.push([levelScale(c).label, fmt(level)]);
  return { level, blockedMs, fields };
}

/** A number for people: at most 3 decimals, no trailing zeros. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  return String(Math.round(n * 1000) / 1000);
}
