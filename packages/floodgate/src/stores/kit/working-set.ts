import { FloodgateError } from '../../errors.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { type Evaluation, emptyEvaluation, type State } from '../../model/types.js';
import type { CancelRequest, RefundRequest, SettleRequest, Store, StoreRequest, StoreResult } from '../store.js';
import { runCall, type StoreCall } from './calls.js';
import { callerNowUs } from './time.js';

/** One policy's state of a user key, as a builder holds it while it runs calls on it. */
export interface Slot {
  /** The state; undefined once a reset deleted it. */
  state: State | undefined;
  /** When the state is untouched again, µs: from then on it decides exactly like no state. */
  untilUs: number;
  /** When it was written, µs on the writer's clock. */
  atUs: number;
  /** Changed since it was read: to be written (or deleted). */
  dirty: boolean;
}

/** The states of one or more user keys, by id (`policyId` in a record, `stateKey` in rows). */
export type WorkingSet = Map<string, Slot>;

/** What a call resolves to: a decision's result, a cancel's verdict, nothing for a refund or a reset. */
export type CallOutcome = StoreResult | boolean | undefined;

/**
 * Runs one call on a working set: reads its states (by `ids`, in policy order), runs it at the latest of
 * the caller's time and the times those states were written (time never goes back on a key, so a window
 * that rolled over for one process stays rolled over for a process whose clock lags), and puts each new
 * state back, copied, with when it is untouched again. Several calls on one key run one after another on
 * the same set, each seeing what the one before left. The caller checked the call's `nowUs`.
 */
export function applyCall(call: StoreCall, ids: readonly string[], slots: WorkingSet): CallOutcome {
  if (call.op === 'reset') {
    for (const id of ids) {
      const slot = slots.get(id);
      if (slot?.state !== undefined) {
        slot.state = undefined;
        slot.dirty = true;
      }
    }
    return undefined;
  }
  const requested = call.request.nowUs as number;
  let nowUs = requested;
  const states: (State | undefined)[] = [];
  for (const id of ids) {
    const slot = slots.get(id);
    states.push(slot?.state);
    if (slot?.state !== undefined && slot.atUs > nowUs) nowUs = slot.atUs;
  }
  const outs: Evaluation[] = ids.map(() => emptyEvaluation());
  const untouchedAfterUs: number[] = [];
  const verdict = runCall(call, states, nowUs, outs, untouchedAfterUs);
  for (let i = 0; i < ids.length; i++) {
    const out = outs[i] as Evaluation;
    if (out.next === undefined) continue;
    slots.set(ids[i] as string, {
      state: out.next.slice(),
      untilUs: nowUs + (untouchedAfterUs[i] as number),
      atUs: nowUs,
      dirty: true,
    });
    // The result carries no state: the model's next states live in buffers it reuses.
    out.next = undefined;
  }
  if (call.op !== 'decide') return verdict;
  const allowed = verdict as boolean;
  return nowUs === requested ? { allowed, evaluations: outs } : { allowed, evaluations: outs, nowUs };
}

/** A record as it is stored: the time it was last written and each policy's `[untilUs, ...state]`. */
interface StoredRecord {
  at: number;
  s: Record<string, number[]>;
}

/**
 * The text of one user key's record: every state still in use at the time of its latest write (a state
 * past its `untilUs` decides like none, so it is dropped), and that time, as JSON (numbers as JavaScript
 * prints them, which parse back to the same doubles). `expiresAtUs` is when the last of its states is
 * untouched again; `empty` when no state is left (delete the record, or let it expire: it expires then).
 */
export function encodeRecord(slots: WorkingSet): { text: string; expiresAtUs: number; empty: boolean } {
  let at = 0;
  for (const slot of slots.values()) if (slot.atUs > at) at = slot.atUs;
  const record: StoredRecord = { at, s: {} };
  let expiresAtUs = at;
  let empty = true;
  for (const [id, slot] of slots) {
    if (slot.state === undefined || slot.untilUs <= at) continue;
    record.s[id] = [slot.untilUs, ...slot.state];
    if (slot.untilUs > expiresAtUs) expiresAtUs = slot.untilUs;
    empty = false;
  }
  return { text: JSON.stringify(record), expiresAtUs, empty };
}

/**
 * The working set of a stored record. A value that is not a record of this layout (another program's
 * value under the key) refuses the calls on that key alone with `ERR_STORE_REJECTED`, as a Redis key of
 * another type does: it is no fault of the store, and must never trip the breaker for other keys.
 */
export function decodeRecord(text: string, storeName: string): WorkingSet {
  const slots: WorkingSet = new Map();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw foreign(storeName);
  }
  const record = parsed as Partial<StoredRecord> | null;
  if (typeof record !== 'object' || record === null || !Number.isFinite(record.at)) throw foreign(storeName);
  const entries = record.s;
  if (typeof entries !== 'object' || entries === null || Array.isArray(entries)) throw foreign(storeName);
  for (const [id, value] of Object.entries(entries)) {
    if (!Array.isArray(value) || value.length < 2 || !value.every(Number.isFinite)) throw foreign(storeName);
    const [untilUs, ...state] = value as number[];
    slots.set(id, { state, untilUs: untilUs as number, atUs: record.at as number, dirty: false });
  }
  return slots;
}

function foreign(storeName: string): FloodgateError {
  return new FloodgateError(
    'ERR_STORE_REJECTED',
    `the ${storeName} store found a value under this key that is not one of its records`,
  );
}

/**
 * The `Store` of a builder that queues calls: each operation becomes a {@link StoreCall}, checked for the
 * caller's clock (a builder's store has none of its own) before `enqueue` sees it.
 */
export function storeOfCalls(
  name: string,
  enqueue: (call: StoreCall) => Promise<CallOutcome>,
  close: () => Promise<void>,
): Store & { close(): Promise<void> } {
  const submit = (call: StoreCall): Promise<CallOutcome> => {
    try {
      if (call.op !== 'reset') callerNowUs(name, call.request.nowUs);
      return enqueue(call);
    } catch (error) {
      return Promise.reject(error);
    }
  };
  return {
    name,
    hasOwnClock: false,
    decide: (request: StoreRequest) => submit({ op: 'decide', request }) as Promise<StoreResult>,
    cancel: (request: CancelRequest) => submit({ op: 'cancel', request }) as Promise<boolean>,
    refund: (request: RefundRequest) => submit({ op: 'refund', request }).then(() => undefined),
    settle: (request: SettleRequest) => submit({ op: 'settle', request }).then(() => undefined),
    reset: (prefix: string, key: string, policies: readonly CompiledPolicy[]) =>
      policies.length === 0
        ? Promise.resolve()
        : submit({ op: 'reset', request: { prefix, key, policies } }).then(() => undefined),
    close,
  };
}
