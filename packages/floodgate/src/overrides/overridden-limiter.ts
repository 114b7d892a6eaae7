import { FloodgateError, invalid } from '../errors.js';
import type { CallOptions, KeyOptions, Limiter } from '../limiter/limiter.js';
import { normalizePolicies } from '../limiter/validation.js';
import { compilePolicy } from '../model/compile.js';
import type { Decision } from '../model/decision.js';
import { definePolicy, type Policy } from '../model/policy.js';
import type { OverrideLookup, Overrides } from './overrides.js';
import type { StoredOverride } from './record.js';

/** The tenant and plan of a call, whose overrides apply when its key has none. */
export interface OverrideTargets {
  /** The call's tenant: its override applies when the key has none. */
  tenant?: string;
  /** The call's plan: its override applies when neither the key nor the tenant has one. */
  plan?: string;
}

/** Options of the calls of an {@link OverriddenLimiter}: the limiter's, plus the call's tenant and plan. */
export type OverriddenCallOptions = CallOptions & OverrideTargets;

/** Options of {@link withOverrides}. */
export interface WithOverridesOptions {
  /**
   * What a call does when the overrides cannot be read (the store is down): `'base'` decides it under
   * the base policies (the limiter's, or the call's), `'throw'` rejects. @default 'base'
   */
  failure?: 'base' | 'throw';
  /** Hears of each failed read, whatever `failure` says (for logs). */
  onError?: (error: FloodgateError) => void;
}

/**
 * Applies stored overrides to a limiter: each call's effective policies are resolved first (the key's
 * override, else its tenant's, else its plan's, else none), then the limiter decides as usual. The
 * limiter itself is unchanged; state stays keyed by the base policies' names (see {@link mergePolicies}),
 * so a changed limit keeps what was consumed.
 *
 * @example
 * ```ts
 * const limited = withOverrides(limiter, overrides);
 * const decision = await limited.limit(userId, { tenant: orgId, plan: 'free' });
 * ```
 */
export function withOverrides(
  limiter: Limiter,
  overrides: Overrides,
  options: WithOverridesOptions = {},
): OverriddenLimiter {
  return new OverriddenLimiter(limiter, overrides, options);
}

export class OverriddenLimiter {
  private readonly failure: 'base' | 'throw';
  private readonly onError: ((error: FloodgateError) => void) | undefined;
  /** Merged policies per override record and base list: stable arrays, so the limiter's compiled-policy memo hits. */
  private readonly merged = new WeakMap<StoredOverride, WeakMap<readonly Policy[], readonly Policy[]>>();

  constructor(
    readonly limiter: Limiter,
    readonly overrides: Overrides,
    options: WithOverridesOptions,
  ) {
    if (options.failure !== undefined && options.failure !== 'base' && options.failure !== 'throw') {
      throw invalid('ERR_INVALID_OPTION', 'failure', options.failure, "'base' or 'throw'");
    }
    this.failure = options.failure ?? 'base';
    this.onError = options.onError;
  }

  /** Decides a call under its effective policies, consuming its cost when admitted. */
  async limit(key: string, options?: OverriddenCallOptions): Promise<Decision> {
    return this.limiter.limit(key, await this.resolve(key, options));
  }

  /** Decides a call as `limit` would, changing nothing. */
  async check(key: string, options?: OverriddenCallOptions): Promise<Decision> {
    return this.limiter.check(key, await this.resolve(key, options));
  }

  /** Reports the key's state under its effective policies. */
  async status(key: string, options?: KeyOptions & OverrideTargets): Promise<Decision> {
    return this.limiter.status(key, await this.resolve(key, options));
  }

  /** Forgets the key's state under its effective policies (the base policies' state, when they share names). */
  async reset(key: string, options?: KeyOptions & OverrideTargets): Promise<void> {
    const resolved = await this.resolve(key, options);
    await this.limiter.reset(key, resolved);
  }

  /** The policies a call would be decided under: the base ones merged with the override that applies. */
  async policiesFor(
    key: string,
    targets: OverrideTargets & { policies?: Policy | readonly Policy[] } = {},
  ): Promise<readonly Policy[]> {
    const base =
      targets.policies === undefined ? this.limiter.policies : normalizePolicies(targets.policies, 'policies');
    const override = await this.find({ key, tenant: targets.tenant, plan: targets.plan });
    return override === undefined ? base : this.mergedFor(override, base);
  }

  private async resolve<O extends { policies?: Policy | readonly Policy[] }>(
    key: string,
    options: (O & OverrideTargets) | undefined,
  ): Promise<O> {
    if (options === undefined) {
      const override = await this.find({ key });
      return (override === undefined
        ? {}
        : { policies: this.mergedFor(override, this.limiter.policies) }) as unknown as O;
    }
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'options', options, 'an options object');
    }
    const { tenant, plan, ...rest } = options;
    const override = await this.find({ key, tenant, plan });
    if (override === undefined) return rest as unknown as O;
    const base = rest.policies === undefined ? this.limiter.policies : normalizePolicies(rest.policies, 'policies');
    return { ...rest, policies: this.mergedFor(override, base) } as unknown as O;
  }

  private async find(call: OverrideLookup): Promise<StoredOverride | undefined> {
    try {
      return await this.overrides.lookup(call);
    } catch (error) {
      if (!(error instanceof FloodgateError) || error.code.startsWith('ERR_INVALID')) throw error;
      this.onError?.(error);
      if (this.failure === 'throw') throw error;
      return undefined;
    }
  }

  private mergedFor(override: StoredOverride, base: readonly Policy[]): readonly Policy[] {
    let byBase = this.merged.get(override);
    if (byBase === undefined) {
      byBase = new WeakMap();
      this.merged.set(override, byBase);
    }
    let merged = byBase.get(base);
    if (merged === undefined) {
      merged = Object.freeze(mergePolicies(base, override.policies));
      byBase.set(base, merged);
    }
    return merged;
  }
}

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
