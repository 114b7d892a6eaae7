import { FloodgateError } from '../errors.js';
import { countResolution } from './cost.js';
import type { CompiledNumbers } from './descriptor.js';
import { toUs } from './fields.js';
import { type Kind, kindOf } from './kinds.js';
import { algorithmOf, type Policy } from './policy.js';

/**
 * The numeric form every store runs. `kind` picks the state machine (a {@link KindDescriptor} in
 * kinds.ts); `a`, `b`, `c` are its parameters, already in integer microseconds (or µs per unit of cost),
 * so Lua and SQL receive exactly the doubles the TypeScript model uses and never divide on their own.
 * Each kind's descriptor says what its `a`, `b` and `c` are (`KINDS.meter.params`).
 */
export interface CompiledPolicy extends CompiledNumbers {
  readonly policy: Policy;
  readonly name: string;
  readonly kind: Kind;
  /** Penalty once denied, µs; 0 when off. */
  readonly blockUs: number;
  /**
   * The smallest positive cost the policy represents (`countResolution` of its limit for a kind that
   * counts, 0 for a meter): a smaller cost is refused before any store is called (`checkResolution`).
   */
  readonly resolution: number;
}

const cache = new WeakMap<Policy, CompiledPolicy>();

/** Compiles a policy into its numeric form (memoized per policy object). */
export function compilePolicy(policy: Policy): CompiledPolicy {
  let compiled = cache.get(policy);
  if (compiled === undefined) {
    const { kind, limit, a, b, c } = algorithmOf(policy).compile(policy);
    // `kindOf` refuses a number no kind has.
    const k = kindOf({ kind, name: policy.name });
    compiled = {
      policy,
      name: policy.name,
      kind: kind as Kind,
      limit,
      blockUs: toUs(policy.blockMs),
      a,
      b,
      c,
      resolution: k.capacity === 'count' ? countResolution(limit) : 0,
    };
    checkFlags(compiled);
    cache.set(policy, compiled);
  }
  return compiled;
}

/**
 * A compiled variant must be one its kind declares (`flags` of its descriptor): an algorithm that compiled
 * to an undeclared value would run another variant's code in a port that tests only the declared ones.
 */
function checkFlags(c: CompiledPolicy): void {
  const flags = kindOf(c).flags;
  for (const param of ['a', 'b', 'c'] as const) {
    const values = flags[param];
    if (values !== undefined && !values.includes(c[param])) {
      throw new FloodgateError(
        'ERR_INVALID_POLICY',
        `policy ${JSON.stringify(c.name)} compiles to ${param} = ${String(c[param])}, a variant its kind (${kindOf(c).name}) does not implement`,
        { option: 'policies' },
      );
    }
  }
}

export { toUs, wholeUsUp } from './fields.js';
