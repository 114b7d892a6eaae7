import { FloodgateError } from '../errors.js';
import { encodeKey, storageKey } from '../keys.js';
import type { CompiledPolicy } from '../model/compile.js';
import { decide } from '../model/decide.js';
import { refundPolicy } from '../model/refund.js';
import { cancelReservation } from '../model/reservation.js';
import { settlePolicy } from '../model/settle.js';
import { emptyEvaluation, type State } from '../model/types.js';
import type { CancelRequest, RefundRequest, SettleRequest, Store, StoreRequest, StoreResult } from '../stores/store.js';

/**
 * The reference store: the model and a plain Map, nothing else (no bounds, no expiry). Every real store
 * must give the same decisions as this one; the randomized comparison checks it.
 */
export function modelStore(): Store & { readonly states: ReadonlyMap<string, State> } {
  const states = new Map<string, State>();
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
      const nowUs = request.nowUs;
      if (nowUs === undefined) {
        return Promise.reject(new FloodgateError('ERR_INVALID_OPTION', 'the model store needs the caller’s clock'));
      }
      const key = encodeKey(request.key);
      for (const c of request.policies) {
        const id = storageKey(request.prefix, key, `${c.name}:${c.kind}`);
        const next = refundPolicy(c, states.get(id), nowUs, request.leasedAtUs, request.leased, request.unused);
        if (next !== undefined) states.set(id, next);
      }
      return Promise.resolve();
    },
    settle(request: SettleRequest): Promise<void> {
      const nowUs = request.nowUs;
      if (nowUs === undefined) {
        return Promise.reject(new FloodgateError('ERR_INVALID_OPTION', 'the model store needs the caller’s clock'));
      }
      const key = encodeKey(request.key);
      for (const c of request.policies) {
        const id = storageKey(request.prefix, key, `${c.name}:${c.kind}`);
        const next = settlePolicy(c, states.get(id), nowUs, request.atUs, request.estimate, request.actual);
        if (next !== undefined) states.set(id, next);
      }
      return Promise.resolve();
    },
    reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
      const encoded = encodeKey(key);
      for (const c of policies) states.delete(storageKey(prefix, encoded, `${c.name}:${c.kind}`));
      return Promise.resolve();
    },
  };
}
