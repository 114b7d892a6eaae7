import { type Clock, systemClock, wholeClockUs } from '../../clock.js';
import { isPlainKey, LONG_KEY_MARK } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { admittedDecision, type Decision, deniedDecision, wholeUsToMs } from '../../model/decision.js';
import { clampRemaining } from '../../model/types.js';
import type { FastPath } from '../store.js';
import type { Summary } from './summary.js';
import type { SlabTable } from './tables.js';

/** What the meter fast path needs of the memory store: its bound, and two writes of a meter's state. */
export interface MeterWriter {
  /** Keys held now. */
  readonly size: number;
  readonly maxKeys: number;
  /** The summary of the keys `table` let go, if it let any go: a key it does not hold starts from it. */
  summaryOf(table: SlabTable): Summary | undefined;
  /** Stores a meter's state `[0, tat]` in a held slot of `table`, expiring at `tat`. */
  rewriteMeter(table: SlabTable, slot: number, tat: number): void;
  /** `rewriteMeter` for a new key, when the store has room for it. */
  addMeter(table: SlabTable, key: string, tat: number): void;
}

/**
 * The in-process hot path of one limiter: a cost-1 call with no reservation (`limitSync(key)`,
 * `checkSync(key)`, `allowSync(key)`, which takes the verdict alone: `allows`) under its one policy, a meter
 * that `isPlainMeter`.
 *
 * One compiled function: a clock read, one map lookup with the key as given, the meter's evaluation, the
 * key's new state and the decision, with no `Evaluation` or request in between. It is a port of
 * `evaluatePolicy`, `settleDenied` and `toDecision` for that one call, as the Lua and SQL are ports of the
 * model, and the fast-path suite of `floodgate/testing` holds it to them
 * (`runFastPathSuite`, run by test/stores/memory.test.ts). The calls it does not
 * cover it leaves to them, having changed nothing: a key that is not held as given (a long one, one that
 * starts with the mark, an invalid value), a new key when the store is full or when the policy has let
 * keys go (it starts from their summary), a key in a penalty box, and a committed denial that starts one. New keys take this path too, so that the code compiled for it is the
 * code of held keys, whichever comes first.
 */
export class MeterFastPath implements FastPath {
  /** When `decide` or `allows` leaves a call to the general evaluation: the time it read, µs, if it read the clock. */
  nowUs: number | undefined;
  /** The clock reads whole µs (the system clock does): no need to check each reading. */
  private readonly wholeUs: boolean;

  constructor(
    private readonly store: MeterWriter,
    private readonly table: SlabTable,
    private readonly c: CompiledPolicy,
    private readonly clock: Clock,
  ) {
    this.wholeUs = clock === systemClock;
  }

  /**
   * Decides a call on `key` now; undefined when the general evaluation must decide it, at `nowUs` when
   * the fast path read the clock for the call (`key` is then a valid key), else `nowUs` is undefined.
   */
  decide(key: string, commit: boolean): Decision | undefined {
    return this.run(key, commit, true);
  }

  /** `decide`'s verdict alone, `allowed` of the decision it would return, with no decision made. */
  allows(key: string, commit: boolean): boolean | undefined {
    return this.run(key, commit, false);
  }

  /** `decide` (`report`), or its verdict alone: one evaluation for both. */
  private run(key: string, commit: boolean, report: true): Decision | undefined;
  private run(key: string, commit: boolean, report: false): boolean | undefined;
  private run(key: string, commit: boolean, report: boolean): Decision | boolean | undefined {
    const table = this.table;
    const slot = table.slotOf(key);
    // The map holds every key as `localKey` makes it: a held key that does not start with its mark is a
    // valid key held as it is, and so is a new key that `isPlainKey`. Any other value, the general way.
    if (slot === undefined ? !isPlainKey(key) : key.charCodeAt(0) === LONG_KEY_MARK) return this.leave(undefined);
    let nowUs = this.clock.nowUs();
    if (!this.wholeUs && !Number.isInteger(nowUs)) nowUs = wholeClockUs(nowUs);
    const store = this.store;
    let tat = nowUs;
    if (slot !== undefined) {
      // A key in a penalty box is judged as it stands, the general way.
      if (table.field(slot, 0) > nowUs) return this.leave(nowUs);
      tat = table.field(slot, 1);
    } else if ((commit && store.size >= store.maxKeys) || store.summaryOf(table) !== undefined) {
      // A new key, and the store may have to make room for it, or the key may have left it (it starts
      // from the policy's summary): the general way.
      return this.leave(nowUs);
    }
    const c = this.c;
    const t = c.a;
    const tau = c.b;
    const limit = c.limit;
    const policy = c.name;
    // `evaluateMeter`, cost 1 (charged T), no slack, in times relative to now: what the key owes before
    // and after the call.
    const owedBefore = Math.max(tat, nowUs) - nowUs;
    const owed = owedBefore + t;
    // As `decideSync` finds the table, it marks the table as used by this policy (eviction reads it).
    if (table.policy !== c) table.policy = c;
    if (owed - tau <= 0) {
      if (commit) {
        // The state `[0, TAT]`, which expires at its TAT.
        if (slot === undefined) store.addMeter(table, key, nowUs + owed);
        else store.rewriteMeter(table, slot, nowUs + owed);
      }
      if (!report) return true;
      const remaining = clampRemaining((tau - owed) / t, limit);
      const resetAfterMs = wholeUsToMs(owed);
      return admittedDecision(policy, limit, remaining, resetAfterMs);
    }
    // Denied: `settleDenied` changes nothing for a meter, but for the penalty box it starts.
    if (commit && c.blockUs > 0) return this.leave(nowUs);
    if (!report) return false;
    // Since τ − owedBefore < T, not one whole unit is left (below none when calls were booked ahead).
    const remaining = 0;
    const retryAfterMs = wholeUsToMs(owed - tau);
    const resetAfterMs = wholeUsToMs(owedBefore);
    return deniedDecision(policy, limit, remaining, retryAfterMs, resetAfterMs);
  }

  private leave(nowUs: number | undefined): undefined {
    this.nowUs = nowUs;
    return undefined;
  }
}
