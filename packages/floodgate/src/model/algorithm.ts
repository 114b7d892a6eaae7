import type { CompiledNumbers } from './descriptor.js';
import type { FieldReader } from './fields.js';

/**
 * What every policy has besides its algorithm's own fields. Policies are plain, serializable data:
 * config files, Lua and SQL read the same fields. Durations are in milliseconds at the surface and
 * compiled to integer microseconds.
 */
export interface PolicyBase {
  /** Name used in storage keys, headers and metrics. Lower case `[a-z][a-z0-9_.-]*`; derived when omitted. */
  readonly name: string;
  /** Once this policy denies, the key stays denied for this long (penalty box). `0` turns it off. @default 0 */
  readonly blockMs: number;
}

/** The options every policy factory takes besides its algorithm's own (see {@link PolicyBase}). */
export interface PolicyBaseOptions {
  /** Name used in storage keys, headers and metrics; derived from the options when omitted. */
  name?: string;
  /** Once this policy denies, the key stays denied for this long, ms (penalty box). @default 0 */
  blockMs?: number;
}

/**
 * One algorithm, written once: its options and their checks, its derived name and the numbers it
 * compiles to. `definePolicy`, `compilePolicy`, config files and the web page's forms all follow from it.
 * `P` is the algorithm's policy type; `fields` must read every one of its own options, in the order they
 * are validated.
 */
export interface AlgorithmDescriptor<P extends PolicyBase & { readonly algorithm: string }> {
  readonly algorithm: P['algorithm'];
  /** The factory's name, which is the path errors name for its options: `gcra`, `tokenBucket`. */
  readonly factory: string;
  readonly fields: { readonly [F in Exclude<keyof P, keyof PolicyBase | 'algorithm'>]-?: FieldReader<P[F]> };
  /** Checks across options, once each option is valid. Throws `ERR_INVALID_POLICY`. */
  check?(policy: P, path: string): void;
  /** The stable name of a policy given none (without the `-block-…` suffix, which is common to all). */
  derivedName(policy: P): string;
  /** The numeric form stores run; `kind` is the id of a {@link KindDescriptor}. */
  compile(policy: P): CompiledNumbers;
  /** What the policy admits, in the terms reports use (see {@link Quota}). */
  quota(policy: P): Quota;
  /** How people read a key's state under the policy (the web page's state chart; see {@link Gauge}). */
  gauge(policy: P): Gauge;
}

/**
 * How a key's state reads for people: in words, and which way the level is plotted from what the kind
 * reads as used (`StateReading.used`): `'used'` against the limit, `'left'` (tokens in a bucket, counting
 * down from the limit), or `'owed-ms'` (a meter's TAT ahead of now, in ms, against its tolerance τ).
 */
export interface Gauge {
  /** What the level is, in words. */
  readonly label: string;
  /** The same, short enough for an axis. */
  readonly axis: string;
  /** The ceiling's name: a call is refused when it would push the level past it. */
  readonly ceilingLabel: string;
  readonly scale: 'used' | 'left' | 'owed-ms';
}

/**
 * What a policy admits, in the terms reports use: the IETF `RateLimit-Policy` (`q` per `w`), Envoy's
 * `current_limit` (the sustained rate), the synced limiter's local budget. Every report reads these three
 * numbers from the algorithm's descriptor, so a new algorithm states them once.
 */
export interface Quota {
  /** Largest cost admitted at once (`q`): GCRA's burst, a bucket's capacity, a window's limit. */
  readonly burst: number;
  /** Cost admitted per ms over a long time, whatever the burst. */
  readonly ratePerMs: number;
  /** ms a fully spent key takes to be untouched again (`w`): `burst / ratePerMs` for a bucket, else its window. */
  readonly windowMs: number;
}

/** The quota of a policy that admits `limit` per `windowMs`. */
export function windowQuota(p: { readonly limit: number; readonly windowMs: number }): Quota {
  return { burst: p.limit, ratePerMs: p.limit / p.windowMs, windowMs: p.windowMs };
}
