import { invalid } from '../errors.js';

/**
 * Reads one option from the input object: validates it, applies its default, and returns the value to
 * keep (`undefined` leaves the option out of the policy). `read` holds the options validated before it.
 * Throws `ERR_INVALID_POLICY` naming `${path}.${field}` and the value.
 */
export type FieldReader<T> = (
  input: Readonly<Record<string, unknown>>,
  field: string,
  path: string,
  read: Readonly<Record<string, unknown>>,
) => T;

/** Longest duration a policy may describe (2^47 µs, about 4.4 years): keeps every sum below 2^53. */
export const MAX_DURATION_US = 2 ** 47;
/** Largest count a policy may allow; keeps µs arithmetic exact. */
export const MAX_LIMIT = 1e12;

export function fail(path: string, value: unknown, expected: string): never {
  throw invalid('ERR_INVALID_POLICY', path, value, expected);
}

/**
 * A count from 1 to {@link MAX_LIMIT} (fractions allowed). `fallback` names an option read before this
 * one whose value is the default (`burst` defaults to `limit`); `max` lowers the ceiling, with the reason.
 */
export function count(options: { fallback?: string; max?: { value: number; why: string } } = {}): FieldReader<number> {
  return (o, field, path, read) => {
    const value = o[field] === undefined && options.fallback !== undefined ? read[options.fallback] : o[field];
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 1 || value > MAX_LIMIT) {
      fail(`${path}.${field}`, o[field], `a finite number from 1 to ${MAX_LIMIT}`);
    }
    if (options.max !== undefined && value > options.max.value) {
      fail(`${path}.${field}`, value, `at most ${options.max.value} ${options.max.why}`);
    }
    return value;
  };
}

/** A finite number above 0 and at most {@link MAX_LIMIT}. */
export function positive(): FieldReader<number> {
  return (o, field, path) => {
    const value = o[field];
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_LIMIT) {
      fail(`${path}.${field}`, value, `a finite number above 0 and at most ${MAX_LIMIT}`);
    }
    return value;
  };
}

/** A duration in ms, at least 1 µs and at most {@link MAX_DURATION_US}; with `optional`, 0 (off) is allowed and the default. */
export function duration(options: { optional?: boolean } = {}): FieldReader<number> {
  const optional = options.optional === true;
  return (o, field, path) => {
    const value = o[field] === undefined && optional ? 0 : o[field];
    const maxMs = MAX_DURATION_US / 1000;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > maxMs) {
      fail(`${path}.${field}`, o[field], `a finite number of milliseconds from 0.001 to ${maxMs}`);
    }
    if (value === 0 && optional) return 0;
    if (Math.round(value * 1000) < 1) fail(`${path}.${field}`, value, 'at least 0.001 (one microsecond)');
    return value;
  };
}

/** A duration as {@link duration}, left out of the policy when not given. */
export function optionalDuration(): FieldReader<number | undefined> {
  const read = duration();
  return (o, field, path, before) => (o[field] === undefined ? undefined : read(o, field, path, before));
}

/** One of a few strings; the first is the default. */
export function oneOf<T extends string>(...allowed: readonly [T, ...T[]]): FieldReader<T> {
  return (o, field, path) => {
    const value = o[field] === undefined ? allowed[0] : o[field];
    if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
      fail(`${path}.${field}`, o[field], `one of ${allowed.map((a) => `'${a}'`).join(', ')}`);
    }
    return value as T;
  };
}

/** A boolean, `false` by default. */
export function flag(): FieldReader<boolean> {
  return (o, field, path) => {
    const value = o[field] ?? false;
    if (typeof value !== 'boolean') fail(`${path}.${field}`, value, 'a boolean');
    return value;
  };
}

/** A number as it appears in a derived name: `1e+21` reads `1e21`. */
export function trimNumber(n: number): string {
  return String(n).replace('e+', 'e');
}

const UNITS: readonly (readonly [string, number])[] = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
];

/**
 * A duration in ms as a policy name writes it: in the largest unit it is a whole number of (`1d`, `1h`,
 * `90s`, `1m`), else in ms (`1500ms`, `0.5ms`).
 */
export function nameDuration(ms: number): string {
  for (const [unit, size] of UNITS) if (ms >= size && ms % size === 0) return `${trimNumber(ms / size)}${unit}`;
  return `${trimNumber(ms)}ms`;
}

/** True when `x` is within a relative 1e-12 of `y`: a rate written back from a count and a duration. */
function close(x: number, y: number): boolean {
  return Math.abs(x - y) <= Math.abs(y) * 1e-12;
}

/**
 * A rate of `perSecond` units a second as a policy name writes it, from the numbers the user most
 * likely wrote: `1000-per-1h` when `count` units take a whole duration (1000 / 3600 a second), else
 * `n-per-1s`, `-1m`, `-1h` or `-1d` for the first unit in which it is a whole number (`5-per-1m`), else
 * the rate a second itself (`0.3-per-1s`).
 */
export function nameRate(perSecond: number, count: number): string {
  const ms = Math.round((count / perSecond) * 1000);
  if (ms > 0 && close((count * 1000) / ms, perSecond)) return `${trimNumber(count)}-per-${nameDuration(ms)}`;
  for (const [unit, size] of [...UNITS].reverse()) {
    const n = (perSecond * size) / 1000;
    const whole = Math.round(n);
    if (whole >= 1 && close(whole, n)) return `${whole}-per-1${unit}`;
  }
  return `${trimNumber(perSecond)}-per-1s`;
}

/** Microseconds in a duration given in milliseconds, rounded to the nearest microsecond. */
export function toUs(ms: number): number {
  return Math.round(ms * 1000);
}

/**
 * The meter's emission interval in whole µs. Time is integer µs everywhere, so a rate whose interval is
 * not a whole number of µs (3 per second: 333 333.3 µs) is rounded *up* (333 334 µs): never more than
 * the policy allows, at most 1 µs per interval less. Results within 1e-9 of a whole number (1e6 / (1000 /
 * 2 592 000)) are taken as that number, so decimal inputs do not lose a µs to binary rounding.
 */
export function wholeUsUp(x: number): number {
  const nearest = Math.round(x);
  return Math.abs(x - nearest) <= 1e-9 * Math.max(1, x) ? nearest : Math.ceil(x);
}
