import type { CompiledPolicy } from '../../model/compile.js';
import { decide, inspect } from '../../model/decide.js';
import { refundPolicy } from '../../model/refund.js';
import { cancelReservation } from '../../model/reservation.js';
import { settlePolicy } from '../../model/settle.js';
import type { Evaluation, State } from '../../model/types.js';
import type { CancelRequest, RefundRequest, SettleRequest, StoreRequest } from '../store.js';

/** What `reset` asks of a store, as a request like the others. */
export interface ResetRequest {
  readonly prefix: string;
  readonly key: string;
  readonly policies: readonly CompiledPolicy[];
}

/**
 * One operation of the store contract on one user key, as data: what the builders queue, batch and run.
 * Every request names the prefix, the user key and the policies, in the order the states are read.
 */
export type StoreCall =
  | { readonly op: 'decide'; readonly request: StoreRequest }
  | { readonly op: 'cancel'; readonly request: CancelRequest }
  | { readonly op: 'refund'; readonly request: RefundRequest }
  | { readonly op: 'settle'; readonly request: SettleRequest }
  | { readonly op: 'reset'; readonly request: ResetRequest };

/** A call made after the decision: a refund or a settle. */
export type LateCall = Extract<StoreCall, { readonly op: 'refund' | 'settle' }>;

/**
 * What a refund or a settle does to one policy's state, as the model says: `refundPolicy` or
 * `settlePolicy` with the call's own figures. Undefined: the state stays as it is.
 */
export function lateStep(
  call: LateCall,
): (c: CompiledPolicy, state: State | undefined, nowUs: number) => State | undefined {
  if (call.op === 'refund') {
    const { leasedAtUs, leased, unused } = call.request;
    return (c, state, nowUs) => refundPolicy(c, state, nowUs, leasedAtUs, leased, unused);
  }
  const { atUs, estimate, actual } = call.request;
  return (c, state, nowUs) => settlePolicy(c, state, nowUs, atUs, estimate, actual);
}

/**
 * Runs one call on the states of its policies (in policy order, `undefined` for a key that holds none),
 * as the model says, at `nowUs`. The one place where a store's decide, cancel, refund and settle meet the
 * model: afterwards, for every policy `i`, `outs[i].next` is the state to store (undefined: leave it as
 * it is), and then `untouchedAfterUs[i]` how long after `nowUs` that state is untouched again (its
 * expiry, see `expiryOf`). A reset sets no `next`: the caller deletes the states. Pure, like the model;
 * `outs` holds one evaluation per policy, and a `next` may live in its buffers (copy it to keep it).
 *
 * Returns the verdict of a decision, whether a cancel gave everything back, and `undefined` for a refund,
 * a settle or a reset.
 */
export function runCall(
  call: StoreCall,
  states: readonly (State | undefined)[],
  nowUs: number,
  outs: Evaluation[],
  untouchedAfterUs: number[],
): boolean | undefined {
  const { policies } = call.request;
  switch (call.op) {
    case 'decide': {
      const allowed = decide(policies, states, nowUs, call.request.cost, call.request, outs);
      for (let i = 0; i < policies.length; i++) {
        const out = outs[i] as Evaluation;
        if (out.next === undefined) continue;
        // An admitted call reports the state it leaves. A denied one that still writes (a penalty, a
        // counted attempt) may report the key as it stood (a cost no policy can take, counted by a
        // fixed window that counts every call, reports the window before the count): read what it leaves.
        untouchedAfterUs[i] = allowed
          ? out.resetAfterUs
          : Math.max(out.resetAfterUs, inspect(policies[i] as CompiledPolicy, out.next, nowUs).resetAfterUs);
      }
      return allowed;
    }
    case 'cancel': {
      const all = cancelReservation(policies, states, nowUs, call.request.reservation, outs);
      for (let i = 0; i < policies.length; i++) untouchedAfterUs[i] = (outs[i] as Evaluation).resetAfterUs;
      return all;
    }
    case 'refund':
    case 'settle': {
      const step = lateStep(call);
      for (let i = 0; i < policies.length; i++) {
        const c = policies[i] as CompiledPolicy;
        const out = outs[i] as Evaluation;
        const next = step(c, states[i], nowUs);
        out.next = next;
        if (next !== undefined) untouchedAfterUs[i] = inspect(c, next, nowUs).resetAfterUs;
      }
      return undefined;
    }
    case 'reset':
      for (const out of outs) out.next = undefined;
      return undefined;
  }
}
