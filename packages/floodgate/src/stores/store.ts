import type { Clock } from '../clock.js';
import type { CompiledPolicy } from '../model/compile.js';
import type { Decision } from '../model/decision.js';
import type { Reservation } from '../model/reservation.js';
import type { Evaluation } from '../model/types.js';
import type { AcquireReply } from '../permits/model.js';
import type { PermitAcquireArgs, PermitStore } from '../permits/store.js';

/** What a limiter asks of a store: one decision on one user key under one or more policies. */
export interface StoreRequest {
  /** The limiter's key prefix (validated: no braces). */
  readonly prefix: string;
  /** The user key as given (validated, not encoded): stores encode it for their own layout. */
  readonly key: string;
  readonly policies: readonly CompiledPolicy[];
  /** Cost of the call; 0 for `status`. */
  readonly cost: number;
  /** `true` for `limit` (store the outcome), `false` for `check` and `status` (change nothing). */
  readonly commit: boolean;
  /** The caller's clock, µs; `undefined` asks the store to use its own clock (Redis TIME, clock_timestamp()). */
  readonly nowUs: number | undefined;
  /** Reservations: admit calls that fit within this many µs. 0 for plain decisions. */
  readonly maxDelayUs: number;
}

/** A store's answer: the overall verdict and one evaluation per policy, in request order. */
export interface StoreResult {
  readonly allowed: boolean;
  readonly evaluations: Evaluation[];
  /**
   * The time the store decided at, µs, when it used its own clock (the request had no `nowUs`): a
   * reservation's TATs are `nowUs + resetAfterUs`, on that clock.
   */
  readonly nowUs?: number;
}

/** What a limiter asks of a store to cancel a reservation (see `cancelReservation` in the model). */
export interface CancelRequest {
  readonly prefix: string;
  readonly key: string;
  /** The policies the reservation was made under, in the same order. */
  readonly policies: readonly CompiledPolicy[];
  readonly reservation: Reservation;
  /** The caller's clock, µs; `undefined` asks the store to use its own clock. */
  readonly nowUs: number | undefined;
}

/** Gives back units of a lease: a committed call of cost `leased` that the store decided at `leasedAtUs`. */
export interface RefundRequest {
  readonly prefix: string;
  readonly key: string;
  /** The policies of the lease, in the same order (each one passed the model's `leaseRefusal`). */
  readonly policies: readonly CompiledPolicy[];
  /** The lease's cost. */
  readonly leased: number;
  /** When the lease was granted, µs on the clock that decided it (the request's, or `StoreResult.nowUs`). */
  readonly leasedAtUs: number;
  /** Units of the lease not used, 0 < unused ≤ leased. */
  readonly unused: number;
  /** The caller's clock, µs; `undefined` asks the store to use its own clock. */
  readonly nowUs: number | undefined;
}

/**
 * Settles a call admitted with an estimated cost at its actual cost (see the model's `settlePolicy`): a
 * committed call of cost `estimate` that the store decided at `atUs`.
 */
export interface SettleRequest {
  readonly prefix: string;
  readonly key: string;
  /** The policies of the call, in the same order (each one passed the model's `settleRefusal`). */
  readonly policies: readonly CompiledPolicy[];
  /** The cost the call was admitted with. */
  readonly estimate: number;
  /** What the call really cost: more than `estimate` is charged past the limit, less is given back. */
  readonly actual: number;
  /** When the call was decided, µs on the clock that decided it (the request's, or `StoreResult.nowUs`). */
  readonly atUs: number;
  /** The caller's clock, µs; `undefined` asks the store to use its own clock. */
  readonly nowUs: number | undefined;
}

/** A permit a decision takes in the same store call: see {@link Store.decideWithPermit}. */
export interface PermitClaim {
  /** The permit's storage key (`<prefix>:{<encoded key>}:<policy name>`, the request's user key's). */
  readonly key: string;
  readonly args: PermitAcquireArgs;
}

/** What {@link Store.decideWithPermit} answers: the permit's acquire, and the rate decision. */
export interface HeldResult {
  /** The acquire's reply. When it granted and `result` is a denial, the lease was not kept. */
  readonly permit: AcquireReply;
  /** The decision of the request: charged when the permit was granted, a check (nothing charged) when not. */
  readonly result: StoreResult;
}

/** A store call's deadline, as `Store.decideTimed` is handed it. */
export interface TimedCall {
  /** Set by the store: rejects the call's promise. */
  expire: ((reason: unknown) => void) | undefined;
}

/**
 * Where rate-limit state lives. A store runs the model of `floodgate/model` atomically: one decision is
 * one script, one statement or one synchronous update, all policies of the call decided together.
 * Every store passes the same conformance suite (`floodgate/testing`). `decide` and `reset` are the
 * contract; `cancel` and `refund` are optional features (every store of this package has them), and
 * `close` releases resources. See docs/architecture.md, "How to write a store".
 */
export interface Store {
  /** Short name for logs and metrics: `memory`, `redis`, `postgres`, `sqlite`. */
  readonly name: string;
  /** True when the store reads its own clock when a request carries no `nowUs`. */
  readonly hasOwnClock: boolean;
  /**
   * Optional. Why the server cannot be reached now, in plain words (`connection refused to
   * 127.0.0.1:6379`), or undefined when it can (or the store cannot tell): a call that times out says it.
   */
  unreachable?(): string | undefined;
  decide(request: StoreRequest): Promise<StoreResult>;
  /**
   * Optional. `decide`, with the limiter's `timeoutMs` kept on the store's own record of the call instead
   * of a promise of the limiter's around it: before it returns, the store sets `deadline.expire` to the
   * function that rejects the promise it returns (unless that promise is already settled). When the
   * timeout passes first, the limiter calls it (with a marker of its own), and the store's answer, when it
   * comes, finds the promise settled and is dropped. A store that keeps a record per call anyway (the
   * Redis store) saves a promise and three closures per call this way.
   */
  decideTimed?(request: StoreRequest, deadline: TimedCall): Promise<StoreResult>;
  /** Forgets the state of `key` under the given policies. */
  reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void>;
  /**
   * Optional. Cancels a reservation atomically, giving back what the model's `cancelReservation` gives
   * back; resolves to true when every policy gave the whole cost back. Without it, `limiter.cancel`
   * refuses with `ERR_INVALID_OPTION`, and an aborted `acquire({ reserve: true })` keeps its booking; the
   * conformance suite then checks that refusal and skips its tables that cancel.
   */
  cancel?(request: CancelRequest): Promise<boolean>;
  /**
   * Optional. Gives back the unused units of a lease atomically under every policy, as the model's
   * `refundPolicy` says (never more than the lease left unused). Without it, `leasedLimiter` refuses the
   * store with `ERR_INVALID_OPTION`; the conformance suite then checks that refusal and skips its lease tables.
   */
  refund?(request: RefundRequest): Promise<void>;
  /**
   * Optional. Settles a call admitted with an estimated cost at its actual cost atomically under every
   * policy, as the model's `settlePolicy` says, in one round trip. Without it, `limiter.settle` refuses
   * with `ERR_INVALID_OPTION`; the conformance suite then checks that refusal and skips its settle tables.
   */
  settle?(request: SettleRequest): Promise<void>;
  /**
   * Optional. The store's own permit store, on the same state (the same process, Redis client or
   * database): a limiter with a concurrency policy whose permits live here (its `permits` omitted, or this
   * store) decides each `limit` in one call of `decideWithPermit`.
   */
  readonly permits?: PermitStore;
  /**
   * Optional, with `permits`. A `limit` (`request.commit` true) and a permit of `permits`, all or nothing
   * in one atomic store call, as the two calls of a limiter would decide them in order: the permit's
   * acquire first (which sweeps expired leases); refused, the request decided without charging anything
   * (a check); granted, the request decided charging the call, and, when that denies (or fails), the
   * lease released in the same step. Resolves to both answers.
   */
  decideWithPermit?(request: StoreRequest, claim: PermitClaim): Promise<HeldResult>;
  /** Releases what the store holds (never the user's client). */
  close?(): Promise<void>;
}

/**
 * A store's fast path for one limiter: it decides that limiter's calls that carry no options (cost 1, the
 * limiter's own policies, no reservation, its clock) the way the general path would, or leaves a call to
 * the general path having changed nothing. The limiter asks it first, and only for such calls; the
 * conformance and fast-path suites of `floodgate/testing` hold it to the general path and the model.
 */
export interface FastPath {
  /**
   * The decision of a call on `key` (`commit`: a `limit`, else a `check`), or `undefined` when the general
   * path must decide it: at `nowUs`, when the fast path read the clock for it (`key` is then a valid key).
   */
  decide(key: string, commit: boolean): Decision | undefined;
  /**
   * Optional: `decide`'s verdict alone (`allowed` of the decision it would return), for
   * `limiter.allowSync`, or `undefined` when the general path must decide the call (as `decide` leaves it).
   */
  allows?(key: string, commit: boolean): boolean | undefined;
  /** After `decide` or `allows` left a call: the time it read for it, µs, or undefined when it read none. */
  readonly nowUs: number | undefined;
}

/** A store that can also decide synchronously, for hot in-process paths. */
export interface SyncStore extends Store {
  /**
   * Optional: a fast path for a limiter's calls without options under `policies` (its compiled policies),
   * keys under `prefix`, time from `clock`; undefined when the store has none for these policies. Asked
   * once, when the limiter is made (the memory store offers its meter fast path for one plain meter).
   */
  fastPath?(prefix: string, policies: readonly CompiledPolicy[], clock: Clock): FastPath | undefined;
  decideSync(request: StoreRequest): StoreResult;
  resetSync(prefix: string, key: string, policies: readonly CompiledPolicy[]): void;
  /** Optional: `cancel` without a promise (the limiter uses it when present, else `cancel`). */
  cancelSync?(request: CancelRequest): boolean;
  /** Optional: `refund` without a promise. */
  refundSync?(request: RefundRequest): void;
  /** Optional: `settle` without a promise. */
  settleSync?(request: SettleRequest): void;
}

export function isSyncStore(store: Store): store is SyncStore {
  return typeof (store as Partial<SyncStore>).decideSync === 'function';
}
