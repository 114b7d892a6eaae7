import { FloodgateError, invalid } from '../errors.js';
import { type CompiledPolicy, compilePolicy } from '../model/compile.js';
import { leaseRefusal } from '../model/refund.js';
import { Limiter } from './limiter.js';

/**
 * The checks `leasedLimiter` and `syncedLimiter` share: a floodgate limiter with policies of its own, each
 * one a lease can hold (what a lease cannot hold, local decisions cannot either: each needs every call at
 * the store), and an options object. Returns the limiter's policies, compiled.
 */
export function localPolicies(limiter: Limiter, options: unknown, kind: 'leased' | 'synced'): CompiledPolicy[] {
  if (!(limiter instanceof Limiter)) throw invalid('ERR_INVALID_OPTION', 'limiter', limiter, 'a floodgate limiter');
  if (typeof options !== 'object' || options === null) {
    throw invalid('ERR_INVALID_OPTION', `${kind}Limiter options`, options, 'an object');
  }
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
