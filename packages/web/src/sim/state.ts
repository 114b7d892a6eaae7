import {
  algorithmOf,
  type CompiledPolicy,
  kindOf,
  readState as readModelState,
  type State,
  type StateField,
} from 'floodgate/model';

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

/**
 * The scale of a policy's state chart: its algorithm's gauge (the words, and which way the level reads),
 * with the ceiling in the level's unit.
 */
export function levelScale(c: CompiledPolicy): LevelScale {
  const { label, axis, ceilingLabel, scale } = algorithmOf(c.policy).gauge(c.policy);
  return {
    label,
    axis,
    ceiling: scale === 'owed-ms' ? c.b / 1000 : c.limit,
    ceilingLabel,
    countsDown: scale === 'left',
  };
}

/** The plotted level, from what the kind reads as used (see `Gauge`). */
function level(c: CompiledPolicy, used: number): number {
  const scale = algorithmOf(c.policy).gauge(c.policy).scale;
  switch (scale) {
    case 'used':
      return used;
    case 'left':
      return c.limit - used;
    case 'owed-ms':
      // `used` is the time owed in units of cost: T µs each.
      return (used * c.a) / 1000;
    default: {
      const unknown: never = scale;
      throw new Error(`unknown gauge scale ${String(unknown)}`);
    }
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
  const algorithm = algorithmOf(c.policy);
  const gauge = algorithm.gauge(c.policy);
  const plotted = level(c, reading.used);
  if (kindOf(c).name === 'meter' && gauge.scale !== 'owed-ms') {
    // A bucket that runs on the meter (GCRA's state machine, a TAT): its state in the bucket's own terms
    // (level or tokens, capacity, rate, when it is back to untouched), not in GCRA's.
    const quota = algorithm.quota(c.policy);
    fields.push(
      [gauge.label, fmt(plotted)],
      [gauge.ceilingLabel, fmt(c.limit)],
      [gauge.scale === 'left' ? 'refills' : 'leaks', `${fmt(quota.ratePerMs * 1000)} per second`],
      [
        gauge.scale === 'left' ? 'full again in' : 'empty in',
        show({ label: '', value: reading.used * c.a, unit: 'duration' }),
      ],
    );
  } else {
    for (const field of reading.fields) fields.push([field.label, show(field)]);
    // The meter's own fields already say its TAT ahead of now, which is what GCRA's chart plots: once.
    if (gauge.scale !== 'owed-ms') fields.push([gauge.label, fmt(plotted)]);
  }
  return { level: plotted, blockedMs, fields };
}

/** A number for people: at most 3 decimals, no trailing zeros. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  return String(Math.round(n * 1000) / 1000);
}
