import { FloodgateError } from '../errors.js';
import { compilePolicy } from '../model/compile.js';
import { definePolicy, type Policy } from '../model/policy.js';

/**
 * The policies of a call with an override: each override policy replaces the base policy of the same
 * name; one whose name is derived (given no name) replaces the one base policy of the same state layout
 * (GCRA, the continuous token bucket and the leaky bucket share one), taking its name, so the state
 * stored under that name carries over; any other is added. Base policies not replaced still apply.
 * A replacement of another state layout under the same name is refused (`ERR_INVALID_POLICY`): it
 * would read the other's state.
 */
export function mergePolicies(base: readonly Policy[], override: readonly Policy[]): Policy[] {
  const out = [...base];
  const replaced = new Set<number>();
  for (const p of override) {
    const kind = compilePolicy(p).kind;
    let at = base.findIndex((b) => b.name === p.name);
    if (at === -1 && p.name === definePolicy({ ...p, name: undefined }).name) {
      const same = base.flatMap((b, i) => (compilePolicy(b).kind === kind && !replaced.has(i) ? [i] : []));
      if (same.length === 1) at = same[0] as number;
    }
    if (at === -1) {
      out.push(p);
      continue;
    }
    const target = base[at] as Policy;
    if (compilePolicy(target).kind !== kind) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `override policy ${JSON.stringify(p.name)} keeps its state like a ${target.algorithm} policy would not: give it another name`,
        { option: 'policies' },
      );
    }
    replaced.add(at);
    out[at] = p.name === target.name ? p : definePolicy({ ...p, name: target.name });
  }
  return out;
}
