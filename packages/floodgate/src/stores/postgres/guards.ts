import type { KindDescriptor } from '../../model/descriptor.js';

/**
 * The guard of a kind's variants, generated from its descriptor's `flags`: a statement that RAISEs when one
 * of `a`, `b`, `c` (SQL expressions) holds a value the kind does not declare, so a policy compiled by a
 * newer model (or forged) never runs another variant's code. `''` for a kind without flags. NaN is none of
 * the values and raises too.
 */
export function flagGuard(
  k: KindDescriptor,
  params: { readonly a: string; readonly b: string; readonly c: string },
  pad: string,
): string {
  const checks = (['a', 'b', 'c'] as const).flatMap((p) => {
    const values = k.flags[p];
    if (values === undefined) return [];
    const expr = params[p];
    return [
      `${pad}IF ${expr} NOT IN (${values.join(', ')}) THEN
${pad}  RAISE EXCEPTION 'floodgate: policy kind ${k.id} (${k.name}) has no variant ${p} = %', ${expr};
${pad}END IF;`,
    ];
  });
  return checks.join('\n');
}

/** True when the compiled numbers are a variant their kind declares (the client's side of the same guard). */
export function declaresVariant(k: KindDescriptor, c: { readonly a: number; readonly b: number; readonly c: number }) {
  return (['a', 'b', 'c'] as const).every((p) => {
    const values = k.flags[p];
    return values === undefined || values.includes(c[p]);
  });
}
