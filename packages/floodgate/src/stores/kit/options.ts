import { invalid } from '../../errors.js';

/**
 * The checks a store's constructor (and any other constructor of the library) runs on its options, each
 * refusing a bad value with `ERR_INVALID_OPTION` naming the option and the value: one definition of each
 * check, so every store words and codes its refusals alike.
 */

/** Refuses `options` that are not an object, naming them as `where` (`'redisStore options'`). */
export function checkOptionsObject(options: unknown, where: string, expected = 'an object'): asserts options is object {
  if (typeof options !== 'object' || options === null) throw invalid('ERR_INVALID_OPTION', where, options, expected);
}

/** Whether `value` is an object with a function under each of `methods`: how a constructor recognises a client. */
export function hasMethods(value: unknown, ...methods: readonly string[]): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const object = value as Record<string, unknown>;
  return methods.every((method) => typeof object[method] === 'function');
}

/** A whole-number option from `min` to `max` (the caller applies its default first). */
export function wholeOption(
  option: string,
  value: unknown,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
  expected = `an integer from ${min} to ${max}`,
): number {
  if (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max) {
    throw invalid('ERR_INVALID_OPTION', option, value, expected);
  }
  return value as number;
}

/** A boolean option (the caller applies its default first). */
export function booleanOption(option: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw invalid('ERR_INVALID_OPTION', option, value, 'a boolean');
  return value;
}

/** A store's `name`, as it appears in logs, metrics and errors: 1 to 64 characters. */
export function checkName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || name.length > 64) {
    throw invalid('ERR_INVALID_OPTION', 'name', name, 'a string of 1 to 64 characters');
  }
  return name;
}

/** `expiryGrainUs`: the grain expiries are rounded up to, a whole number of µs ≥ 1. */
export function checkGrain(grainUs: unknown): number {
  return wholeOption('expiryGrainUs', grainUs, 1, undefined, 'a whole number of µs ≥ 1');
}
