import { type Clock, systemClock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { validateKey } from '../keys.js';
import { type CompiledPolicy, compilePolicy } from '../model/compile.js';
import { checkResolution, type Resolved, validateCost } from '../model/cost.js';
import { leaseRefusal } from '../model/refund.js';
import { checkOptionsObject, wholeOption } from '../stores/kit/options.js';
import { Limiter } from './limiter.js';
import { validateCallOptions } from './validation.js';

/**
 * The checks `leasedLimiter` and `syncedLimiter` share: a floodgate limiter with policies of its own, each
 * one a lease can hold (what a lease cannot hold, local decisions cannot either: each needs every call at
 * the store), and an options object. Returns the limiter's policies, compiled.
 */
export function localPolicies(limiter: Limiter, options: unknown, kind: 'leased' | 'synced'): CompiledPolicy[] {
  if (!(limiter instanceof Limiter)) throw invalid('ERR_INVALID_OPTION', 'limiter', limiter, 'a floodgate limiter');
  checkOptionsObject(options, `${kind}Limiter options`);
  if (limiter.policies.length === 0) {
    throw new FloodgateError('ERR_INVALID_POLICY', `a ${kind} limiter needs a limiter with policies of its own`, {
      option: 'policies',
    });
  }
  const compiled = limiter.policies.map(compilePolicy);
  compiled.forEach((c, i) => {
    const refusal = leaseRefusal(c);
    if (refusal !== undefined) {
      throw new FloodgateError('ERR_INVALID_POLICY', `policies[${i}] (${c.name}) cannot be ${kind}: ${refusal}`, {
        option: `policies[${i}]`,
      });
    }
  });
  return compiled;
}

/** The `maxKeys` (default 10000) and `clock` (default the system's) options both local limiters take, checked. */
export function localBounds(options: { maxKeys?: number; clock?: Clock }): { maxKeys: number; clock: Clock } {
  const maxKeys = wholeOption('maxKeys', options.maxKeys ?? 10_000, 1, undefined, 'a positive integer');
  const clock = options.clock ?? systemClock;
  if (typeof clock !== 'object' || clock === null || typeof clock.nowUs !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'clock', clock, 'a clock with nowUs()');
  }
  return { maxKeys, clock };
}

/**
 * The checks a call to a local limiter starts with, in this order: the key, the options object, the cost
 * and its resolution under the policies, and that the limiter is open. Returns the cost (1 by default).
 */
export function localCallCost(
  kind: 'leased' | 'synced',
  key: string,
  options: { cost?: number } | undefined,
  resolved: readonly Resolved[],
  closed: boolean,
): number {
  validateKey(key);
  validateCallOptions(options);
  const cost = options?.cost === undefined ? 1 : validateCost(options.cost);
  checkResolution(resolved, cost);
  if (closed) throw new FloodgateError('ERR_CLOSED', `the ${kind} limiter is closed`);
  return cost;
}
