import { FloodgateError } from './errors.js';

/** Edit distance of two short strings (options' names), case-insensitive. */
function distance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let previous = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const row = [i];
    for (let j = 1; j <= y.length; j++) {
      const substitution = (previous[j - 1] as number) + (x[i - 1] === y[j - 1] ? 0 : 1);
      row.push(Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, substitution));
    }
    previous = row;
  }
  return previous[y.length] as number;
}

/**
 * The known option a misspelt one most likely means: one that starts or ends with it (`timeout` for
 * `timeoutMs`), else the closest within a third of its length; undefined when none is close.
 */
export function closestOption(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  if (lower.length >= 3) {
    const affix = known.find((k) => k.toLowerCase().startsWith(lower) || k.toLowerCase().endsWith(lower));
    if (affix !== undefined) return affix;
  }
  let best: string | undefined;
  let bestDistance = Math.max(1, Math.floor(name.length / 3)) + 1;
  for (const k of known) {
    const d = distance(name, k);
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * Refuses an options object's keys that are not in `known` with `ERR_INVALID_OPTION` naming the key
 * (`unknownOption` set), the options it takes, and the closest one (`did you mean timeoutMs?`).
 * `hints` answers some names with advice of their own (another library's habits).
 */
export function refuseUnknownOptions(
  options: object,
  where: string,
  known: readonly string[],
  hints: Readonly<Record<string, string>> = {},
): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    if ((options as Record<string, unknown>)[key] === undefined) continue;
    const hint = Object.hasOwn(hints, key) ? hints[key] : undefined;
    const closest = hint === undefined ? closestOption(key, known) : undefined;
    const advice = hint ?? (closest === undefined ? `options: ${known.join(', ')}` : `did you mean ${closest}?`);
    throw new FloodgateError('ERR_INVALID_OPTION', `${key} is not an option of ${where} (${advice})`, {
      option: key,
      unknownOption: true,
    });
  }
}
