import {
  type CompiledPolicy,
  KIND_FIXED_WINDOW,
  KIND_METER,
  KIND_SLIDING_LOG,
  KIND_SLIDING_WINDOW,
  KIND_TOKEN_INTERVAL,
  type Policy,
  type State,
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
 * Reads a policy's state at `nowUs`. `s` is the state the store holds (undefined when untouched); the
 * arithmetic is the model's own reading of each layout (window roll-over, refills, TAT ahead of now).
 */
export function readState(c: CompiledPolicy, s: State | undefined, nowUs: number, startUs: number): Readout {
  const blockedUntil = s === undefined ? 0 : (s[0] as number);
  const blockedMs = blockedUntil > nowUs ? (blockedUntil - nowUs) / 1000 : 0;
  const at = (us: number) => `${fmt((us - startUs) / 1000)} ms`;
  const fields: [string, string][] = [];
  if (blockedMs > 0) fields.push(['penalty box ends', at(blockedUntil)]);
  let level = 0;
  switch (c.kind) {
    case KIND_METER: {
      const tat = s === undefined ? nowUs : (s[1] as number);
      const owedUs = Math.max(0, tat - nowUs);
      const units = owedUs / c.a;
      const policy = c.policy as Policy;
      if (policy.algorithm === 'gcra') level = owedUs / 1000;
      else if (policy.algorithm === 'token-bucket') level = c.limit - units;
      else level = units;
      fields.push(
        ['TAT (theoretical arrival time)', s === undefined ? 'untouched' : at(tat)],
        ['TAT − now', `${fmt(owedUs / 1000)} ms`],
        ['emission interval T', `${fmt(c.a / 1000)} ms`],
        ['tolerance τ', `${fmt(c.b / 1000)} ms`],
      );
      if (policy.algorithm === 'token-bucket') fields.push(['tokens in the bucket', fmt(c.limit - units)]);
      else fields.push(['level', fmt(units)]);
      break;
    }
    case KIND_TOKEN_INTERVAL: {
      let used = 0;
      let anchor = nowUs;
      if (s !== undefined && (s[1] as number) > 0) {
        used = s[1] as number;
        anchor = s[2] as number;
        const intervals = Math.floor((nowUs - anchor) / c.b);
        if (intervals > 0) {
          used = Math.max(0, used - intervals * c.a);
          anchor += intervals * c.b;
        }
      }
      level = c.limit - used;
      fields.push(['tokens in the bucket', fmt(level)], ['tokens used', fmt(used)]);
      if (used > 0) fields.push(['next refill', at(anchor + c.b)]);
      break;
    }
    case KIND_FIXED_WINDOW: {
      let start: number;
      let count = 0;
      if (c.c === 0) {
        start = nowUs - (nowUs % c.a);
        if (s !== undefined && s[1] === start) count = s[2] as number;
      } else if (s !== undefined && (s[2] as number) > 0 && nowUs < (s[1] as number) + c.a) {
        start = s[1] as number;
        count = s[2] as number;
      } else {
        start = nowUs;
      }
      level = count;
      fields.push(['window', count > 0 || c.c === 0 ? `${at(start)} → ${at(start + c.a)}` : 'none open']);
      fields.push(['count', fmt(count)]);
      break;
    }
    case KIND_SLIDING_WINDOW: {
      const start = nowUs - (nowUs % c.a);
      let count = 0;
      let previous = 0;
      if (s !== undefined) {
        if (s[1] === start) {
          count = s[2] as number;
          previous = s[3] as number;
        } else if (s[1] === start - c.a) {
          previous = s[2] as number;
        }
      }
      const weight = (c.a - (nowUs - start)) / c.a;
      level = previous * weight + count;
      fields.push(
        ['current window', `${at(start)} → ${at(start + c.a)}`],
        ['current count', fmt(count)],
        ['previous count', fmt(previous)],
        ['previous weight', fmt(weight)],
        ['weighted count', fmt(level)],
      );
      break;
    }
    case KIND_SLIDING_LOG: {
      const cutoff = nowUs - c.a;
      let entries = 0;
      if (s !== undefined) {
        for (let i = 1; i + 1 < s.length; i += 2) {
          if ((s[i] as number) > cutoff) {
            level += s[i + 1] as number;
            entries++;
          }
        }
      }
      const last = s !== undefined && s.length > 1 ? (s[s.length - 2] as number) : undefined;
      fields.push(['events in the window', String(entries)], ['cost logged', fmt(level)]);
      if (last !== undefined) fields.push(['newest event', at(last)]);
      break;
    }
  }
  return { level, blockedMs, fields };
}

/** A number for people: at most 3 decimals, no trailing zeros. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  return String(Math.round(n * 1000) / 1000);
}
