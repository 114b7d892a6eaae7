import type { Clock } from '../clock.js';
import { FloodgateError, invalid } from '../errors.js';
import { validateKey } from '../keys.js';
import type { CompiledPolicy } from '../model/compile.js';
import { type Decision, toDecision } from '../model/decision.js';
import { isReservable, type Reservation } from '../model/reservation.js';
import type { Store, StoreRequest, StoreResult, SyncStore } from '../stores/store.js';
import { requireSamePolicies } from './validation.js';

/** Refuses `maxDelayMs` on a call with a policy that cannot book ahead (see `isReservable`). */
export function requireReservable(policies: readonly CompiledPolicy[]): void {
  for (const c of policies) {
    if (!isReservable(c)) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `maxDelayMs (reservations) needs meter policies (gcra, continuous tokenBucket, leakyBucket); policy ${JSON.stringify(c.name)} is a ${c.policy.algorithm}${c.policy.algorithm === 'token-bucket' ? ' with interval refill' : ''}, which counts calls where they are admitted, not where they run`,
        { option: 'maxDelayMs' },
      );
    }
  }
}

/** The public decision of a store result; a committed call admitted with a delay carries its reservation. */
export function decisionOf(request: StoreRequest, result: StoreResult): Decision {
  const decision = toDecision(request.policies, result.evaluations, result.allowed);
  if (decision.delayMs === undefined || !request.commit) return decision;
  const nowUs = result.nowUs ?? request.nowUs;
  // A store on its own clock that does not say when it decided cannot have its reservations cancelled.
  if (nowUs === undefined) return decision;
  decision.reservation = {
    cost: request.cost,
    policies: request.policies.map((c) => c.name),
    // An admitted meter call leaves TAT = now + resetAfter (what the key owes once it is booked).
    tatUs: result.evaluations.map((e) => nowUs + e.resetAfterUs),
  };
  return decision;
}

/**
 * Cancels a reservation on a store: what comes back is what the model's `cancelReservation` gives back.
 * Resolves to true when every policy gave the whole cost back.
 */
export async function cancelOnStore(
  store: Store,
  prefix: string,
  clock: Clock | undefined,
  key: string,
  booked: Decision | Reservation,
  policies: readonly CompiledPolicy[],
): Promise<boolean> {
  validateKey(key);
  const reservation = reservationFrom(booked);
  if (reservation === undefined) return false; // admitted at once (or denied): nothing was booked ahead
  requireSamePolicies('the reservation', reservation.policies, policies);
  const cancel = store.cancel;
  if (cancel === undefined) {
    throw new FloodgateError('ERR_INVALID_OPTION', `the ${store.name} store cannot cancel reservations`, {
      option: 'store',
    });
  }
  const request = { prefix, key, policies, reservation, nowUs: clock?.nowUs() };
  const sync = (store as Partial<SyncStore>).cancelSync;
  return sync === undefined ? cancel.call(store, request) : sync.call(store, request);
}

function reservationFrom(booked: Decision | Reservation): Reservation | undefined {
  if (typeof booked !== 'object' || booked === null) {
    throw invalid('ERR_INVALID_OPTION', 'reservation', booked, 'a decision or its reservation');
  }
  const candidate = 'allowed' in booked ? booked.reservation : booked;
  if (candidate === undefined) return undefined;
  const { cost, policies, tatUs } = candidate as Partial<Reservation>;
  if (
    typeof cost !== 'number' ||
    !Number.isFinite(cost) ||
    !Array.isArray(policies) ||
    !Array.isArray(tatUs) ||
    policies.length !== tatUs.length ||
    !tatUs.every((t) => typeof t === 'number' && Number.isFinite(t))
  ) {
    throw invalid('ERR_INVALID_OPTION', 'reservation', booked, 'a decision or its reservation, unchanged');
  }
  return candidate;
}
