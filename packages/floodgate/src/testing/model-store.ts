import { FloodgateError } from '../errors.js';
import { encodeKey, storageKey } from '../keys.js';
import type { CompiledPolicy } from '../model/compile.js';
import { decide } from '../model/decide.js';
import { cancelReservation } from '../model/reservation.js';
import { emptyEvaluation, type State } from '../model/types.js';
import { type LateCall, lateStep } from '../stores/kit/calls.js';
import type { CancelRequest, RefundRequest, SettleRequest, Store, StoreRequest, StoreResult } from '../stores/store.js';

/**
 * The reference store: the model and a plain Map, nothing else (no bounds, no expiry). Every real store
 * must give the same decisions as this one; the randomized comparison checks it.
 */
export function modelStore(): Store & { readonly states: ReadonlyMap<string, State> } {
  const states = new Map<string, State>();
  // A refund or a settle: each policy's state as the model's step leaves it.
  const late = (call: LateCall): Promise<void> => {
    const { request } = call;
    const nowUs = request.nowUs;
    if (nowUs === undefined) {
      return Promise.reject(new FloodgateError('ERR_INVALID_OPTION', 'the model store needs the caller’s clock'));
    }
    const step = lateStep(call);
    const key = encodeKey(request.key);
    for (const c of request.policies) {
      const id = storageKey(request.prefix, key, `${c.name}:${c.kind}`);
      const next = step(c, states.get(id), nowUs);
      if (next !== undefined) states.set(id, next);
    }
    return Promise.resolve();
  };
  return {
    name: 'model',
    hasOwnClock: false,
    states,
    decide(request: StoreRequest): Promise<StoreResult> {
      if (request.nowUs === undefined) {
        return Promise.reject(new FloodgateError('ERR_INVALID_OPTION', 'the model store needs the caller’s clock'));
      }
      const key = encodeKey(request.key);
      const ids = request.policies.map((c) => storageKey(request.prefix, key, `${c.name}:${c.kind}`));
      const current = ids.map((id) => states.get(id));
      const evaluations = request.policies.map(() => emptyEvaluation());
      const allowed = decide(request.policies, current, request.nowUs, request.cost, request, evaluations);
      if (request.commit) {
        evaluations.forEach((e, i) => {
          if (e.next !== undefined) states.set(ids[i] as string, [...e.next]);
        });
      }
      return Promise.resolve({ allowed, evaluations });
    },
    cancel(request: CancelRequest): Promise<boolean> {
      if (request.nowUs === undefined) {
        return Promise.reject(new FloodgateError('ERR_INVALID_OPTION', 'the model store needs the caller’s clock'));
      }
      const key = encodeKey(request.key);
      const ids = request.policies.map((c) => storageKey(request.prefix, key, `${c.name}:${c.kind}`));
      const outs = request.policies.map(() => emptyEvaluation());
      const all = cancelReservation(
        request.policies,
        ids.map((id) => states.get(id)),
        request.nowUs,
        request.reservation,
        outs,
      );
      outs.forEach((out, i) => {
        if (out.next !== undefined) states.set(ids[i] as string, [...out.next]);
      });
      return Promise.resolve(all);
    },
    refund(request: RefundRequest): Promise<void> {
      return late({ op: 'refund', request });
    },
    settle(request: SettleRequest): Promise<void> {
      return late({ op: 'settle', request });
    },
    reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
      const encoded = encodeKey(key);
      for (const c of policies) states.delete(storageKey(prefix, encoded, `${c.name}:${c.kind}`));
      return Promise.resolve();
    },
  };
}
