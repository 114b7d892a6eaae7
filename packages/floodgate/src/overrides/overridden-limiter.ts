import { FloodgateError, invalid } from '../errors.js';
import type { CallOptions, KeyOptions, Limiter } from '../limiter/limiter.js';
import { normalizePolicies } from '../limiter/validation.js';
import type { Decision } from '../model/decision.js';
import type { Policy } from '../model/policy.js';
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
    return override === undefined ? base : this.overrides.policiesOf(override, base);
  }

  private async resolve<O extends { policies?: Policy | readonly Policy[] }>(
    key: string,
    options: (O & OverrideTargets) | undefined,
  ): Promise<O> {
    if (options === undefined) {
      const override = await this.find({ key });
      return (override === undefined
        ? {}
        : { policies: this.overrides.policiesOf(override, this.limiter.policies) }) as unknown as O;
    }
    if (typeof options !== 'object' || options === null) {
      throw invalid('ERR_INVALID_OPTION', 'options', options, 'an options object');
    }
    const { tenant, plan, ...rest } = options;
    const override = await this.find({ key, tenant, plan });
    if (override === undefined) return rest as unknown as O;
    const base = rest.policies === undefined ? this.limiter.policies : normalizePolicies(rest.policies, 'policies');
    return { ...rest, policies: this.overrides.policiesOf(override, base) } as unknown as O;
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
}
