import type { Evaluation, State } from './types.js';

/**
 * The numbers a policy compiles to, which are all its kind runs on (`CompiledPolicy` adds the policy, its
 * name and its penalty): `kind` is the id of a {@link KindDescriptor}, `limit` the largest cost admitted at
 * once, and `a`, `b`, `c` the kind's parameters (its `params` say what they mean).
 */
export interface CompiledNumbers {
  readonly kind: number;
  readonly limit: number;
  readonly a: number;
  readonly b: number;
  readonly c: number;
}

/**
 * A key's state under a kind, after the penalty slot (index 0): named fields of a fixed-size state, or a
 * list of `(time, amount)` pairs oldest first, at most `maxPairs(c)` of them.
 *
 * `untouchedAtLatest`: every field is a time (µs), and from the latest, the penalty's end included, the
 * state decides as no state would: it is its own expiry.
 */
export type StateLayout =
  | { readonly fields: readonly string[]; readonly untouchedAtLatest?: true }
  | { readonly pairs: readonly [string, string]; maxPairs(c: CompiledNumbers): number };

/** One field of a {@link StateReading}: µs since the epoch (`time`), µs (`duration`), or a plain number. */
export interface StateField {
  readonly label: string;
  readonly value: number;
  readonly unit: 'time' | 'duration' | 'number';
}

/** What a key's state holds at one instant, read the way the evaluation reads it (see `readState`). */
export interface StateReading {
  /**
   * Cost counted against the policy right now, before flooring: a meter's owed time in units of cost,
   * an interval token bucket's tokens used, a window's (weighted) count, a log's logged cost.
   */
  readonly used: number;
  /** End of the penalty block, µs; 0 when none. */
  readonly blockedUntilUs: number;
  /** The kind's own fields, named, for people. */
  readonly fields: readonly StateField[];
}

/**
 * One kind: a state machine that stores run, written once. Several algorithms may compile to one kind
 * (GCRA, the continuous token bucket and the leaky bucket are all the meter). The Lua and PL/pgSQL ports
 * take the kind's number, tag and layout from here; each store has one port per kind, in a table the
 * compiler checks (`LUA_PORTS`, `SQL_PORTS`).
 */
export interface KindDescriptor<Id extends number = number, Name extends string = string> {
  /** The number stores receive. Ids run 1, 2, 3… without gaps and never change meaning: a new state layout takes a new id. */
  readonly id: Id;
  /** Lower-case words joined by `-` (`token-interval`); the ports' constant is `KIND_TOKEN_INTERVAL`. */
  readonly name: Name;
  /** The character that starts the kind's stored Redis value; `''` for the meter only (a bare TAT). */
  readonly tag: string;
  readonly layout: StateLayout;
  /** What the compiled numbers `a`, `b`, `c` mean for this kind (documentation and port comments). */
  readonly params: { readonly a: string; readonly b: string; readonly c: string };
  /**
   * The parameters that select a variant of the kind (queue mode, `countDenied`, alignment), with every
   * value the kind implements. `compilePolicy` refuses any other value, and the Lua and SQL ports raise on
   * one (their guards are generated from this list), so a new variant cannot run another variant's code.
   */
  readonly flags: { readonly [P in 'a' | 'b' | 'c']?: readonly number[] };
  /**
   * How a cost meets the capacity (`exceedsCapacity`): `'charge'` compares `meterCharge(cost, a)` with
   * the tolerance `b`; `'count'` compares the cost with `limit`.
   */
  readonly capacity: 'charge' | 'count';
  /** A lease counted under this kind is spent only until the key's state resets (a window that closes). */
  readonly leaseEndsAtReset: boolean;
  /** The algorithm itself: see `evaluatePolicy` for the contract. Pure; writes `out`. */
  readonly evaluate: Evaluate;
  /** The state after `unused` units of a lease are given back (see model/refund.ts); undefined when nothing changes. */
  refund(
    c: CompiledNumbers,
    s: State,
    nowUs: number,
    leasedAtUs: number,
    leased: number,
    unused: number,
  ): State | undefined;
  /** Why a policy of this kind cannot be leased, or undefined when it can (penalty boxes are refused for all kinds). */
  leaseRefusal(c: CompiledNumbers): string | undefined;
  /**
   * Whether a denied call changes this policy's state (`logDenied`), so a denial is not repeated unchanged:
   * `false`; `'attempts'`, a denied call that could fit is counted (a `countDenied` sliding log); or
   * `'every-call'`, every committed call is counted, one whose cost this or another policy can never
   * admit too (a `countDenied` fixed window, as Envoy's reference service counts hits).
   */
  countsDenied(c: CompiledNumbers): DeniedCount;
  /** The state once a denied call of `cost` is counted; called only when `countsDenied(c)` is not false. */
  logDenied?(c: CompiledNumbers, s: State | undefined, nowUs: number, cost: number): State;
  /** Reads the state at `nowUs` as the evaluation would, for people (status pages, the web simulator). */
  read(c: CompiledNumbers, s: State | undefined, nowUs: number): StateReading;
}

/**
 * One policy's verdict on one call (a kind's evaluation): reads the state `s` at `nowUs` for a call of
 * `cost` that may wait up to `maxDelayUs` (reservations), and writes `out`, `out.next` included. Pure.
 */
export type Evaluate = (
  c: CompiledNumbers,
  s: State | undefined,
  nowUs: number,
  cost: number,
  maxDelayUs: number,
  out: Evaluation,
) => void;

/** See {@link KindDescriptor.countsDenied}. */
export type DeniedCount = false | 'attempts' | 'every-call';
