import { describeValue, FloodgateError, invalid } from '../../errors.js';
import { encodeKey, storageKey } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { decide } from '../../model/decide.js';
import { emptyStateLength, hasKind, KIND_METER, KINDS, maxStateLength } from '../../model/kinds.js';
import { type Evaluation, emptyEvaluation, type Reason, type State } from '../../model/types.js';
import { type InOrderRetries, PendingCalls, recover, retryInOrder } from '../kit/batcher.js';
import { booleanOption, checkOptionsObject, hasMethods, wholeOption } from '../kit/options.js';
import type {
  CancelRequest,
  HeldResult,
  PermitClaim,
  RefundRequest,
  SettleRequest,
  Store,
  StoreRequest,
  StoreResult,
  TimedCall,
} from '../store.js';
import { toStoreError } from '../store-errors.js';
import { explainUnreachable, isNoScriptError, type RedisScriptClient } from './clients.js';
import { holdingArguments, holdingReply, OWN_PERMIT_GRACE_MS } from './holding.js';
import { HOLDING_SCRIPT, HOLDING_SCRIPT_SHA } from './holding-lua.js';
import type { WindowKind } from './lua/window-fast.js';
import { type RedisPermitStore, redisPermitStore } from './permit-store.js';
import {
  DECIDE_SCRIPT,
  DECIDE_SCRIPT_SHA,
  METER_BATCH,
  METER_BATCH_SHA,
  type SingleCallScript,
  singleCallScript,
  WINDOW_BATCHES,
} from './script.js';
import { ServerPolicyWatch } from './server-policy.js';
import { hashSlot } from './slot.js';
import {
  DECIDE_WIRE,
  METER_BATCH_WIRE,
  METER_CALL_WIRE,
  OP,
  REASON_CODES,
  WINDOW_BATCH_WIRE,
  WINDOW_CALL_WIRE,
} from './wire.js';

/** Options of {@link redisStore}. */
export interface RedisStoreOptions {
  /** The client, through an adapter: `fromIoredis(client)` or `fromNodeRedis(client)`. */
  client: RedisScriptClient;
  /**
   * Script calls in flight at once per server (per hash slot on a cluster), pipelined on the client's
   * connection. Calls that arrive while that many are in flight wait and go together in the next script
   * call; a call that finds fewer in flight goes at once. @default 4
   */
  maxInFlight?: number;
  /**
   * Most calls decided in one script call. A script call of calls on long lists (a sliding log or a
   * bucketed window of more than 31 entries) also holds at most {@link MAX_SCRIPT_STATE} state numbers,
   * so those go a few at a time. @default 512
   */
  maxBatchSize?: number;
  /**
   * Extra lifetime, ms, of keys written by a limiter with its own `clock`. Redis expires keys on its own
   * clock, which the caller's clock may lag (a manual clock in tests, a paused one); a state that outlives
   * its untouched time decides exactly like an absent one, one that expires early would not. Keys decided
   * on Redis time (no `clock`) expire exactly when untouched. @default 5000
   */
  expiryGraceMs?: number;
  /**
   * Calls under a single meter policy (GCRA, token bucket with continuous refill, leaky bucket) run
   * smaller scripts that decide exactly the same with less work for Redis: one for a call that goes
   * alone, one for a batch of such calls. @default true
   */
  fastPath?: boolean;
}

/** The Redis and Redis Cluster store. */
export interface RedisStore extends Store {
  readonly name: 'redis';
  readonly hasOwnClock: true;
  /** The client the store was given. */
  readonly client: RedisScriptClient;
  /**
   * The store's own permit store, on the same client (`redisPermitStore({ client })`, made at first use;
   * without a subscriber, its waiters poll): a limiter with a concurrency policy and no `permits` keeps
   * its permits here, and decides each `limit` in one script call (`decideWithPermit`).
   */
  readonly permits: RedisPermitStore;
  /** A `limit` and a permit of `permits`, all or nothing in one script call (see `Store.decideWithPermit`). */
  decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult>;
  /** Stops taking calls and resolves once the calls in flight are answered. The client stays open. */
  close(): Promise<void>;
}

/**
 * A store on Redis or Redis Cluster. Each decision is one atomic Lua script run (all policies of the call
 * together); calls that arrive while a script call is in flight are decided together in the next one.
 * Uses Redis `TIME` unless the limiter has a `clock`.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { createLimiter, gcra } from 'floodgate';
 * import { fromIoredis, redisStore } from 'floodgate/redis';
 *
 * const limiter = createLimiter({
 *   store: redisStore({ client: fromIoredis(new Redis()) }),
 *   policies: [gcra({ limit: 100, periodMs: 60_000 })],
 * });
 * ```
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  checkOptionsObject(options, 'redisStore options');
  const client = options.client;
  if (!hasMethods(client, 'evalsha', 'eval') || typeof client.cluster !== 'boolean') {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `client must be wrapped by an adapter: fromIoredis(client) or fromNodeRedis(client), got ${describeValue(client)}`,
      { option: 'client' },
    );
  }
  const maxInFlight = wholeOption('maxInFlight', options.maxInFlight ?? 4, 1, 1024);
  const maxBatchSize = wholeOption('maxBatchSize', options.maxBatchSize ?? 512, 1, 10_000);
  const expiryGraceMs = wholeOption(
    'expiryGraceMs',
    options.expiryGraceMs ?? 5000,
    0,
    2 ** 40,
    'a whole number of milliseconds ≥ 0',
  );
  const fastPath = booleanOption('fastPath', options.fastPath ?? true);
  return new RedisStoreImpl(client, maxInFlight, maxBatchSize, String(expiryGraceMs), fastPath);
}

/**
 * The most state numbers one script call of heavy calls decides on: the sum, over its calls and their
 * policies, of `maxStateLength` (2,003 for a sliding log of limit 1,000). A call that holds more goes
 * alone. Redis serves nobody else while a script runs, and Lua's work per call grows with the state it
 * reads, sums and writes back: 512 calls on one full countDenied log of 1,000 entries were one script
 * call of 0.6 s (bench/log-stall.ts); at this bound a script call on such logs decides 2 at a time. A
 * script call of light calls holds at most `maxBatchSize` calls of at most {@link HEAVY_CALL_STATE}.
 */
export const MAX_SCRIPT_STATE = 4096;

/**
 * A call whose policies hold more state numbers than this (a list of more than 31 entries: a sliding log
 * or a bucketed window) is heavy: heavy calls wait in a queue of their own, and a lane has at most one
 * script call of them in flight, so a flood of them never queues ahead of other calls (see `Lane.heavy`).
 */
export const HEAVY_CALL_STATE = 64;

/** A call's weight, the state numbers of its policies at their longest, per policy list. */
const weights = new WeakMap<readonly CompiledPolicy[], number>();
function weightOf(policies: readonly CompiledPolicy[]): number {
  let weight = weights.get(policies);
  if (weight === undefined) {
    weight = 0;
    // A kind no port has weighs nothing: the script refuses it (ERR_STORE_REJECTED, naming the kind).
    for (const c of policies) weight += hasKind(c.kind) ? maxStateLength(c) : 0;
    weights.set(policies, weight);
  }
  return weight;
}

const OP_CHECK = OP.check;
const OP_LIMIT = OP.limit;
const OP_RESET = OP.reset;
const OP_CANCEL = OP.cancel;
const OP_REFUND = OP.refund;
const OP_SETTLE = OP.settle;
const REASONS: readonly Reason[] = REASON_CODES;
/**
 * The model's scratch room for next states. Evaluations from Redis never carry a next state (the script
 * stored it), so they share one.
 */
const SHARED_BUFFERS = emptyEvaluation().buffers;

/** One call waiting for, or riding in, a script call. */
interface Call {
  readonly op: string;
  readonly prefix: string;
  readonly encoded: string;
  readonly policies: readonly CompiledPolicy[];
  readonly cost: number;
  readonly nowUs: number | undefined;
  readonly maxDelayUs: number;
  /** A cancel's reservation TATs, one per policy; a refund's lease time and cost; a settle's time and estimate. */
  readonly tatUs: readonly number[] | undefined;
  /** State numbers of its policies at their longest ({@link weightOf}). */
  readonly weight: number;
  /** For a call in the heavy queue: the light calls submitted on its lane before it, all sent before it. */
  after: number;
  readonly resolve: (result: StoreResult | boolean | undefined) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Calls bound for one server (or one cluster slot): at most `maxInFlight` script calls at a time, each of
 * at most `maxBatchSize` calls, and those of heavy calls of at most {@link MAX_SCRIPT_STATE} state
 * numbers. Script calls on one lane take effect in the order they are sent (one pipelined connection),
 * which keeps calls on one key in order. `recovering` is set when a script call came back `NOSCRIPT`:
 * nothing new is sent until every script call in flight has come back and those that failed so have run
 * again, one after another in the order they were first sent. So calls on one key keep their order across
 * the node losing its scripts.
 */
interface Lane extends InOrderRetries {
  /** Light calls waiting, in the order they were submitted. */
  queue: Call[];
  /**
   * Heavy calls waiting (more than {@link HEAVY_CALL_STATE} state numbers), with the light calls on a key
   * one of them holds, in the order they were submitted. At most one script call of them is in flight,
   * and one goes first whenever the lane has room: light calls then wait behind one script call of
   * bounded work, never behind the whole heavy queue, and heavy calls are never starved. A heavy call
   * goes only once every light call submitted before it has gone (`Call.after`), and a light call on a
   * key a waiting heavy call holds joins the heavy queue (`heavyKeys`), so calls on one key never overtake
   * each other.
   */
  heavy: Call[];
  /** Calls in the heavy queue per encoded key. */
  heavyKeys: Map<string, number>;
  /** Script calls of heavy calls in flight: 0 or 1. */
  heavyInFlight: number;
  /** Light calls submitted on this lane, and sent. */
  lightSubmitted: number;
  lightSent: number;
  /** Numbers the script calls in the order they were sent. */
  sent: number;
}

/** A compiled policy's six script arguments (`DECIDE_WIRE.policy`, wire.ts), computed once per policy. */
const policyArgs = new WeakMap<CompiledPolicy, readonly string[]>();
function argsOf(c: CompiledPolicy): readonly string[] {
  let args = policyArgs.get(c);
  if (args === undefined) {
    const at = DECIDE_WIRE.policy;
    const built = new Array<string>(at.size);
    built[at.kind] = String(c.kind);
    built[at.limit] = String(c.limit);
    built[at.blockUs] = String(c.blockUs);
    built[at.a] = String(c.a);
    built[at.b] = String(c.b);
    built[at.c] = String(c.c);
    args = built;
    policyArgs.set(c, args);
  }
  return args;
}

class RedisStoreImpl implements RedisStore {
  readonly name = 'redis' as const;
  readonly hasOwnClock = true as const;
  private readonly lanes = new Map<number, Lane>();
  private readonly pending = new PendingCalls();
  /** The server's eviction settings, read (and warned about) once, at the first decision. */
  readonly serverPolicy = new ServerPolicyWatch();

  constructor(
    readonly client: RedisScriptClient,
    private readonly maxInFlight: number,
    private readonly maxBatchSize: number,
    private readonly grace: string,
    private readonly fastPath: boolean,
  ) {}

  unreachable(): string | undefined {
    return this.client.unreachable?.();
  }

  private ownPermits: RedisPermitStore | undefined;

  get permits(): RedisPermitStore {
    this.ownPermits ??= redisPermitStore({ client: this.client, expiryGraceMs: OWN_PERMIT_GRACE_MS });
    return this.ownPermits;
  }

  /**
   * One script call (holding-lua.ts), sent at once rather than batched: the permit's acquire, the call's
   * decision (a check when the permit was refused), and the lease's release when the decision is not an
   * admission.
   */
  async decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult> {
    this.serverPolicy.onDecide(this.client);
    const nowUs = request.nowUs;
    if (nowUs !== undefined && !(Number.isSafeInteger(nowUs) && nowUs >= 0)) {
      throw invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of microseconds since the epoch');
    }
    if (this.pending.closed) throw new FloodgateError('ERR_CLOSED', 'the redis store is closed');
    let result: StoreResult | undefined;
    let failed: unknown;
    const call: Call = {
      op: OP_LIMIT,
      prefix: request.prefix,
      encoded: encodeKey(request.key),
      policies: request.policies,
      cost: request.cost,
      nowUs,
      maxDelayUs: request.maxDelayUs,
      tatUs: undefined,
      weight: 0,
      after: 0,
      resolve: (decided) => {
        result = decided as StoreResult;
      },
      reject: (error) => {
        failed = error;
      },
    };
    const { keys, args } = holdingArguments(request, claim, scriptArguments([call], this.grace));
    this.pending.count++;
    try {
      let reply: unknown;
      try {
        reply = await this.client.evalsha(HOLDING_SCRIPT_SHA, keys, args);
      } catch (error) {
        if (!isNoScriptError(error)) throw error;
        reply = await this.client.eval(HOLDING_SCRIPT, keys, args);
      }
      const { permit, decided } = holdingReply(reply);
      settle([call], decided);
      if (result === undefined) throw failed;
      return { permit, result };
    } catch (error) {
      throw explainUnreachable(this.client, error);
    } finally {
      this.pending.answered(1);
    }
  }

  decide(request: StoreRequest): Promise<StoreResult> {
    return this.decideTimed(request, undefined);
  }

  /** `decide`, the limiter's deadline kept on the call's own record (`Store.decideTimed`). */
  decideTimed(request: StoreRequest, deadline: TimedCall | undefined): Promise<StoreResult> {
    this.serverPolicy.onDecide(this.client);
    const nowUs = request.nowUs;
    if (nowUs !== undefined && !(Number.isSafeInteger(nowUs) && nowUs >= 0)) {
      return Promise.reject(
        invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of microseconds since the epoch'),
      );
    }
    return this.submit(
      request.commit ? OP_LIMIT : OP_CHECK,
      request.prefix,
      request.key,
      request.policies,
      request.cost,
      nowUs,
      request.maxDelayUs,
      undefined,
      deadline,
    ) as Promise<StoreResult>;
  }

  cancel(request: CancelRequest): Promise<boolean> {
    const nowUs = request.nowUs;
    if (nowUs !== undefined && !(Number.isSafeInteger(nowUs) && nowUs >= 0)) {
      return Promise.reject(
        invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of microseconds since the epoch'),
      );
    }
    const { reservation } = request;
    return this.submit(
      OP_CANCEL,
      request.prefix,
      request.key,
      request.policies,
      reservation.cost,
      nowUs,
      0,
      reservation.tatUs,
    ) as Promise<boolean>;
  }

  refund(request: RefundRequest): Promise<void> {
    return this.afterTheCall(OP_REFUND, request, request.unused, [request.leasedAtUs, request.leased]);
  }

  /** One script call, laid out as a refund (lua/main.ts): the actual cost, then the call's time and estimate. */
  settle(request: SettleRequest): Promise<void> {
    return this.afterTheCall(OP_SETTLE, request, request.actual, [request.atUs, request.estimate]);
  }

  /** A refund or a settle: one script call of `op` with `cost`, then the call's time and cost (`times`). */
  private async afterTheCall(
    op: string,
    request: RefundRequest | SettleRequest,
    cost: number,
    times: readonly number[],
  ): Promise<void> {
    const nowUs = request.nowUs;
    if (nowUs !== undefined && !(Number.isSafeInteger(nowUs) && nowUs >= 0)) {
      throw invalid('ERR_INVALID_OPTION', 'clock.nowUs()', nowUs, 'a whole number of microseconds since the epoch');
    }
    await this.submit(op, request.prefix, request.key, request.policies, cost, nowUs, 0, times);
  }

  async reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
    if (policies.length === 0) return;
    await this.submit(OP_RESET, prefix, key, policies, 0, undefined, 0);
  }

  /** Stops taking calls and resolves once the calls in flight are answered. The client stays open. */
  close(): Promise<void> {
    return this.pending.close();
  }

  private submit(
    op: string,
    prefix: string,
    key: string,
    policies: readonly CompiledPolicy[],
    cost: number,
    nowUs: number | undefined,
    maxDelayUs: number,
    tatUs?: readonly number[],
    deadline?: TimedCall,
  ): Promise<StoreResult | boolean | undefined> {
    if (this.pending.closed) return Promise.reject(new FloodgateError('ERR_CLOSED', 'the redis store is closed'));
    const encoded = encodeKey(key);
    const slot = this.client.cluster ? hashSlot(encoded) : 0;
    let lane = this.lanes.get(slot);
    if (lane === undefined) {
      lane = {
        inFlight: 0,
        queue: [],
        heavy: [],
        heavyKeys: new Map(),
        heavyInFlight: 0,
        lightSubmitted: 0,
        lightSent: 0,
        sent: 0,
        recovering: false,
        retries: [],
      };
      this.lanes.set(slot, lane);
    }
    this.pending.count++;
    const weight = weightOf(policies);
    return new Promise((resolve, reject) => {
      if (deadline !== undefined) deadline.expire = reject;
      const call: Call = {
        op,
        prefix,
        encoded,
        policies,
        cost,
        nowUs,
        maxDelayUs,
        tatUs,
        weight,
        after: 0,
        resolve,
        reject,
      };
      const current = lane;
      const heavyKeys = current.heavyKeys;
      if (weight > HEAVY_CALL_STATE || (heavyKeys.size > 0 && heavyKeys.has(encoded))) {
        call.after = current.lightSubmitted;
        current.heavy.push(call);
        heavyKeys.set(encoded, (heavyKeys.get(encoded) ?? 0) + 1);
        if (!current.recovering) this.drain(slot, current);
        return;
      }
      current.lightSubmitted++;
      if (current.inFlight < this.maxInFlight && !current.recovering && current.queue.length === 0) {
        // Nothing waits ahead of it: no batching delay at low load.
        current.lightSent++;
        this.send(slot, current, [call], false);
      } else {
        current.queue.push(call);
      }
    });
  }

  private send(slot: number, lane: Lane, calls: Call[], heavy: boolean): void {
    lane.inFlight++;
    if (heavy) lane.heavyInFlight++;
    void this.run(slot, lane, calls, lane.sent++, heavy);
  }

  private async run(slot: number, lane: Lane, calls: Call[], at: number, heavy: boolean): Promise<void> {
    try {
      const call = calls[0] as Call;
      const single = this.fastPath && calls.length === 1 ? singleArguments(call, this.grace) : undefined;
      const batch = this.fastPath && single === undefined ? batchArguments(calls, this.grace) : undefined;
      const [script, sha, { keys, args }] =
        single !== undefined
          ? [single.script, single.sha, single]
          : batch !== undefined
            ? [batch.script, batch.sha, batch]
            : [DECIDE_SCRIPT, DECIDE_SCRIPT_SHA, scriptArguments(calls, this.grace)];
      let reply: unknown;
      try {
        reply = await this.client.evalsha(sha, keys, args);
      } catch (error) {
        // The node lost its script cache (SCRIPT FLUSH, restart, failover): EVAL loads it again there, in
        // order with the other script calls that failed so (see Lane.recovering).
        if (!isNoScriptError(error)) throw error;
        reply = await retryInOrder(
          lane,
          at,
          () => this.client.eval(script, keys, args),
          () => this.drain(slot, lane),
        );
      }
      if (single !== undefined) settleSingle(call, single.kind, reply);
      else if (batch !== undefined) settleBatch(calls, batch.kind, reply);
      else settle(calls, reply);
    } catch (error) {
      const explained = explainUnreachable(this.client, error);
      for (const call of calls) call.reject(explained);
    } finally {
      lane.inFlight--;
      if (heavy) lane.heavyInFlight--;
      this.pending.answered(calls.length);
      if (lane.recovering) {
        recover(lane, () => this.drain(slot, lane));
      } else {
        this.drain(slot, lane);
      }
    }
  }

  /**
   * Sends what waits, as far as `maxInFlight` allows: a script call of heavy calls first when none is in
   * flight, then light ones; forgets a cluster slot's lane once it is idle.
   */
  private drain(slot: number, lane: Lane): void {
    while (lane.inFlight < this.maxInFlight) {
      const next = lane.heavy[0];
      if (lane.heavyInFlight === 0 && next !== undefined && next.after <= lane.lightSent) {
        this.send(slot, lane, this.takeHeavy(lane), true);
      } else if (lane.queue.length > 0) {
        const queue = lane.queue;
        const calls = queue.length > this.maxBatchSize ? queue.splice(0, this.maxBatchSize) : queue;
        if (calls === queue) lane.queue = [];
        lane.lightSent += calls.length;
        this.send(slot, lane, calls, false);
      } else {
        break;
      }
    }
    // A cluster's idle lanes go (one per hash slot would pile up); a single node's one lane stays, so that
    // calls one at a time do not build and drop a lane each.
    if (
      this.client.cluster &&
      lane.inFlight === 0 &&
      lane.queue.length === 0 &&
      lane.heavy.length === 0 &&
      this.lanes.get(slot) === lane
    ) {
      this.lanes.delete(slot);
    }
  }

  /**
   * The next script call of heavy calls: the head of the heavy queue, and the calls after it that may go
   * (`Call.after`), as far as `maxBatchSize` calls and MAX_SCRIPT_STATE state numbers allow.
   */
  private takeHeavy(lane: Lane): Call[] {
    const queue = lane.heavy;
    const n = Math.min(queue.length, this.maxBatchSize);
    let work = 0;
    let i = 0;
    for (; i < n; i++) {
      const call = queue[i] as Call;
      work += call.weight;
      if (i > 0 && (work > MAX_SCRIPT_STATE || call.after > lane.lightSent)) break;
    }
    const calls = queue.splice(0, i);
    const keys = lane.heavyKeys;
    for (const { encoded } of calls) {
      const left = (keys.get(encoded) as number) - 1;
      if (left === 0) keys.delete(encoded);
      else keys.set(encoded, left);
    }
    return calls;
  }
}

/** A compiled policy's argument (`DECIDE_WIRE.policy`), by its name there. */
type PolicyArgument = keyof typeof DECIDE_WIRE.policy;

/**
 * The slots of a script's policy numbers (`wire`) paired with the compiled policy's argument each carries,
 * in increasing order of slot: `names` maps each slot's name in `wire` to its argument's.
 */
function policySlots<N extends string>(
  wire: { readonly [name in NoInfer<N>]: number },
  names: { readonly [name in N]: PolicyArgument },
): (readonly [number, number])[] {
  const pairs = (Object.keys(names) as N[]).map((name) => [wire[name], DECIDE_WIRE.policy[names[name]]] as const);
  return pairs.sort((x, y) => x[0] - y[0]);
}

/** A meter's script numbers (`METER_CALL_WIRE.argv`, `METER_BATCH_WIRE.policy`): its penalty, T, τ, queue mode. */
const METER_ARGUMENTS = { blockUs: 'blockUs', t: 'a', tau: 'b', queue: 'c' } as const;
/** A window's (`WINDOW_CALL_WIRE.argv`, `WINDOW_BATCH_WIRE.policy`): its limit and compiled `a`, `b`, `c`. */
const WINDOW_ARGUMENTS = { limit: 'limit', a: 'a', b: 'b', c: 'c' } as const;

/** The policy's numbers a shared single-call script takes, and a batch script's policy group. */
const METER_POLICY_SLOTS = policySlots(METER_CALL_WIRE.argv, METER_ARGUMENTS);
const WINDOW_POLICY_SLOTS = policySlots(WINDOW_CALL_WIRE.argv, WINDOW_ARGUMENTS);
const METER_BATCH_SLOTS = policySlots(METER_BATCH_WIRE.policy, METER_ARGUMENTS);
const WINDOW_BATCH_SLOTS = policySlots(WINDOW_BATCH_WIRE.policy, WINDOW_ARGUMENTS);

/** No ARGV: what a baked single-call script takes for the commonest call (see lua/meter-fast.ts). */
const NO_ARGS: readonly string[] = [];

/** A call alone that a single-call script decides: its script, KEYS and ARGV. */
interface SingleCall {
  readonly keys: string[];
  readonly args: readonly string[];
  readonly script: string;
  readonly sha: string;
  readonly kind: SingleCallScript['kind'];
}

/**
 * The single-call script for a call (lua/meter-fast.ts, lua/window-fast.ts) with its KEYS and ARGV, or
 * undefined when its policies take the full script. A `limit` of cost 1 (with no delay, under a meter) on
 * Redis's clock sends no ARGV to its policy's baked script; other calls send the call's numbers, and the
 * shared script the policy's after them.
 */
function singleArguments(call: Call, grace: string): SingleCall | undefined {
  if (call.policies.length !== 1 || (call.op !== OP_LIMIT && call.op !== OP_CHECK)) return undefined;
  const c = call.policies[0] as CompiledPolicy;
  const found = singleCallScript(c);
  if (found === undefined) return undefined;
  const { script, sha, baked, kind } = found;
  const keys = [storageKey(call.prefix, call.encoded, c.name)];
  if (baked && call.nowUs === undefined && call.op === OP_LIMIT && call.cost === 1 && call.maxDelayUs === 0) {
    return { keys, args: NO_ARGS, script, sha, kind };
  }
  // The first four slots are the same in both wires: the clock, the grace, the operation, the cost.
  const A = METER_CALL_WIRE.argv;
  const meter = kind === 'meter';
  const slots = meter ? METER_POLICY_SLOTS : WINDOW_POLICY_SLOTS;
  const args = new Array<string>(baked ? (meter ? A.maxDelayUs : A.cost) : (slots.at(-1)?.[0] as number));
  args[A.nowUs - 1] = call.nowUs === undefined ? '' : String(call.nowUs);
  args[A.graceMs - 1] = grace;
  args[A.op - 1] = call.op;
  args[A.cost - 1] = String(call.cost);
  if (meter) args[A.maxDelayUs - 1] = String(call.maxDelayUs);
  if (!baked) {
    const p = argsOf(c);
    for (const [slot, from] of slots) args[slot - 1] = p[from] as string;
  }
  return { keys, args, script, sha, kind };
}

/**
 * The runs of a script call's body: consecutive calls that differ only by their key share one entry, led
 * by how many calls it stands for (see lua/main.ts and lua/meter-batch.ts).
 */
class Runs {
  private previous: Call | undefined;
  private at = 0;
  private count = 0;

  constructor(private readonly body: string[]) {}

  /**
   * Counts `call` into the current run when it has the run's operation, time, cost and delay and
   * `samePolicies` says the policies agree too (the entry is the run's: only the keys differ).
   */
  joins(call: Call, samePolicies: (call: Call, previous: Call) => boolean): boolean {
    const previous = this.previous;
    if (
      previous !== undefined &&
      call.op === previous.op &&
      call.nowUs === previous.nowUs &&
      call.cost === previous.cost &&
      call.maxDelayUs === previous.maxDelayUs &&
      samePolicies(call, previous)
    ) {
      this.count++;
      return true;
    }
    return false;
  }

  /** Starts a run with `call`, whose entry the caller pushes next (after the count's place). */
  start(call: Call): void {
    if (this.previous !== undefined) this.body[this.at] = String(this.count);
    this.previous = call;
    this.count = 1;
    this.at = this.body.length;
  }

  /** Writes the last run's count. */
  end(): void {
    this.body[this.at] = String(this.count);
  }
}

/** A single-policy call of a batch script runs with the one before it under the same policy. */
function samePolicy(call: Call, previous: Call): boolean {
  return call.policies[0] === previous.policies[0];
}

/** A call runs with the one before it under the same policies, but for a cancel or a refund (each has its own arguments). */
function sameDecision(call: Call, previous: Call): boolean {
  return call.op !== OP_CANCEL && call.op !== OP_REFUND && call.op !== OP_SETTLE && call.policies === previous.policies;
}

/** A batch of calls a batch script decides: its script, KEYS and ARGV. */
interface BatchCall {
  readonly keys: string[];
  readonly args: string[];
  readonly script: string;
  readonly sha: string;
  readonly kind: SingleCallScript['kind'];
}

/**
 * The kind of batch script (lua/meter-batch.ts) that decides every one of `calls`: each a `limit` or a
 * `check` under one policy, all meters or all windows of one kind whose calls alone take the single-call
 * window script; undefined otherwise (the full script decides them).
 */
function batchKind(calls: readonly Call[]): SingleCallScript['kind'] | undefined {
  let kind: SingleCallScript['kind'] | undefined;
  for (const call of calls) {
    if (call.policies.length !== 1 || (call.op !== OP_LIMIT && call.op !== OP_CHECK)) return undefined;
    const c = call.policies[0] as CompiledPolicy;
    // A meter needs no lookup (the batch's hot path); any other kind, its single-call script's kind.
    const own = c.kind === KIND_METER ? 'meter' : singleCallScript(c)?.kind;
    if (own === undefined || (kind !== undefined && own !== kind)) return undefined;
    kind = own;
  }
  return kind;
}

/** KEYS and ARGV of the batch script of the calls' kind (lua/meter-batch.ts), or undefined when there is none. */
function batchArguments(calls: readonly Call[], grace: string): BatchCall | undefined {
  const kind = batchKind(calls);
  if (kind === undefined) return undefined;
  const n = calls.length;
  const keys = new Array<string>(n);
  const head: string[] = [grace, '0', '0'];
  const body: string[] = [];
  const numbers = new Map<CompiledPolicy, string>();
  // Links each call to the next one on its storage key (see the script's header: a link is j × 16384 + k,
  // 1-based, sent in hexadecimal; sorting the numbers sorts them by j). Looked up by the caller's encoded
  // key, the latest call on it, and through `same` the earlier ones on it (under another prefix or
  // policy): a map keyed by the storage key, a new string to hash each call, cost the client 4× as much.
  const latest = new Map<string, number>();
  let same: (number | undefined)[] | undefined;
  let links: number[] | undefined;
  const runs = new Runs(body);
  for (let i = 0; i < n; i++) {
    const call = calls[i] as Call;
    const c = call.policies[0] as CompiledPolicy;
    const key = storageKey(call.prefix, call.encoded, c.name);
    keys[i] = key;
    const earlier = latest.get(call.encoded);
    if (earlier !== undefined) {
      same ??= new Array<number | undefined>(n);
      same[i] = earlier;
      let j: number | undefined = earlier;
      while (j !== undefined && keys[j] !== key) j = same[j];
      if (j !== undefined) {
        links ??= [];
        links.push((j + 1) * 16384 + i + 1);
      }
    }
    latest.set(call.encoded, i);
    if (runs.joins(call, samePolicy)) continue;
    // A new run: calls that differ from this one only by their key join it.
    runs.start(call);
    let number = numbers.get(c);
    if (number === undefined) {
      number = String(numbers.size + 1);
      numbers.set(c, number);
      const p = argsOf(c);
      const at = head.length;
      const [slots, size] =
        kind === 'meter'
          ? [METER_BATCH_SLOTS, METER_BATCH_WIRE.policy.size]
          : [WINDOW_BATCH_SLOTS, WINDOW_BATCH_WIRE.policy.size];
      for (let j = 0; j < size; j++) head.push('');
      for (const [slot, from] of slots) head[at + slot] = p[from] as string;
    }
    body.push(
      '',
      call.nowUs === undefined ? '' : String(call.nowUs),
      call.op,
      String(call.cost),
      String(call.maxDelayUs),
      number,
    );
  }
  runs.end();
  head[1] = String(numbers.size);
  const { script, sha } = kind === 'meter' ? METER_BATCH_CALL : WINDOW_BATCHES[kind];
  if (links === undefined) return { keys, args: head.concat(body), script, sha, kind };
  // Found in the order of their later call; the script takes them in the order of the earlier one.
  links.sort((x, y) => x - y);
  head[2] = String(links.length);
  return { keys, args: head.concat(links.map(hex), body), script, sha, kind };
}

/** The meter's batch script. */
const METER_BATCH_CALL = { script: METER_BATCH, sha: METER_BATCH_SHA };

/** A link of the meter batch script's ARGV: its tonumber(s, 16) is strtoul, cheaper than base 10's strtod. */
function hex(n: number): string {
  return n.toString(16);
}

/** A meter state as the scripts store it (lua/prelude.ts): the TAT, or `!<blockedUntil> <tat>`. */
function meterState(value: unknown): State | undefined {
  if (typeof value !== 'string' || value === '') return undefined;
  if (value.charCodeAt(0) === 33) {
    const parts = /^!(\S+) (\S+)$/.exec(value);
    if (parts === null) return undefined;
    const blocked = Number(parts[1]);
    const tat = Number(parts[2]);
    return Number.isNaN(blocked) || Number.isNaN(tat) ? undefined : [blocked, tat];
  }
  const tat = Number(value);
  return Number.isNaN(tat) ? undefined : [0, tat];
}

/**
 * A window kind's tag (its character code), its state's length and its commonest value (whole numbers, no
 * box), from its descriptor, by kind.
 */
const WINDOW_STATES = Object.fromEntries(
  (Object.keys(WINDOW_BATCHES) as WindowKind[]).map((kind) => {
    const { tag } = KINDS[kind];
    const length = emptyStateLength(KINDS[kind]);
    const numbers = Array.from({ length: length - 1 }, () => '(\\d+)').join(' ');
    return [kind, { tag: tag.charCodeAt(0), length, common: new RegExp(`^${tag}${numbers}$`) }];
  }),
) as Record<WindowKind, { tag: number; length: number; common: RegExp }>;

/**
 * A window's state as its scripts reply it (lua/window-fast.ts `readState`): the commonest value
 * (`<tag><number> …`, whole numbers) as stored, any other state as the script read it, printed
 * `<tag>!<blockedUntil> <number> …` with `%.17g` (C's spelling: `inf`, `-inf`, `nan` for those), `''` for
 * none. Read with the pattern the script reads the common value with.
 */
function windowState(kind: WindowKind, value: unknown): State | undefined {
  const { tag, length, common } = WINDOW_STATES[kind];
  if (typeof value !== 'string' || value.charCodeAt(0) !== tag) return undefined;
  const whole = common.exec(value);
  if (whole !== null) {
    const s = [0];
    for (let i = 1; i < length; i++) s.push(Number(whole[i]));
    return s;
  }
  if (value.charCodeAt(1) !== 33) return undefined;
  const s = value.slice(2).split(' ').map(printedNumber);
  return s.length === length && !s.some((x) => x === undefined) ? (s as number[]) : undefined;
}

/** A number as C's `%.17g` prints it (`inf`, `-inf`, `nan`, `-nan` included), or undefined. */
function printedNumber(word: string): number | undefined {
  if (word === 'inf') return Number.POSITIVE_INFINITY;
  if (word === '-inf') return Number.NEGATIVE_INFINITY;
  if (word === 'nan' || word === '-nan') return Number.NaN;
  const x = Number(word);
  return word === '' || Number.isNaN(x) ? undefined : x;
}

const SINGLE_OUT = emptyEvaluation();
const SINGLE_OUTS = [SINGLE_OUT];

/** The result of a call a state-port script of `kind` decided on `value` (as replied): see `stateResult`. */
function scriptResult(
  call: Call,
  kind: SingleCallScript['kind'],
  value: unknown,
  nowUs: number,
  serverAllowed: boolean,
): StoreResult {
  const state = kind === 'meter' ? meterState(value) : windowState(kind, value);
  return stateResult(call, kind, state, value, nowUs, serverAllowed);
}

/**
 * The result of a call a state-port script decided (`kind`'s, see wire.ts): the model run on the state
 * the script decided it on (`value` as read, `state` decoded; the report is the client's), checked
 * against the script's verdict. The two ran the same model on the same state, so they agree unless the
 * script, its arguments or the reply are not what this client expects (an older or newer script under
 * the same name, a proxy that rewrites replies): a free check on every call, which fails the call rather
 * than report a decision the server did not make.
 */
function stateResult(
  call: Call,
  kind: SingleCallScript['kind'],
  state: State | undefined,
  value: unknown,
  nowUs: number,
  serverAllowed: boolean,
): StoreResult {
  const allowed = decide(
    call.policies,
    [state],
    nowUs,
    call.cost,
    { commit: call.op === OP_LIMIT, maxDelayUs: call.maxDelayUs },
    SINGLE_OUTS,
  );
  if (allowed !== serverAllowed) {
    throw new FloodgateError(
      'ERR_STORE_PROTOCOL',
      `the ${kind} script ${serverAllowed ? 'allowed' : 'denied'} a call the model ${allowed ? 'allows' : 'denies'} on the state it read (${describeValue(value)} at ${String(nowUs)} µs)`,
    );
  }
  const e = SINGLE_OUT;
  return {
    allowed,
    evaluations: [
      {
        allowed: e.allowed,
        reason: e.reason,
        remaining: e.remaining,
        retryAfterUs: e.retryAfterUs,
        resetAfterUs: e.resetAfterUs,
        delayUs: e.delayUs,
        next: undefined,
        buffers: SHARED_BUFFERS,
      },
    ],
    nowUs,
  };
}

/**
 * Hands a call alone its decision from its single-call script (see lua/meter-fast.ts, lua/window-fast.ts,
 * `METER_CALL_WIRE.reply`): `<verdict> <seconds> <µs> <state>`, read with three `indexOf`s.
 */
function settleSingle(call: Call, kind: SingleCallScript['kind'], reply: unknown): void {
  const at = typeof reply === 'string' ? meterReplyFields(reply) : undefined;
  if (at === undefined) {
    call.reject(
      new FloodgateError('ERR_STORE_PROTOCOL', `unexpected reply from the ${kind} script: ${describeValue(reply)}`),
    );
    return;
  }
  const text = reply as string;
  const nowUs = Number(text.slice(2, at.micros - 1)) * 1e6 + Number(text.slice(at.micros, at.state - 1));
  try {
    call.resolve(scriptResult(call, kind, text.slice(at.state), nowUs, text.charCodeAt(0) === 49));
  } catch (error) {
    call.reject(error);
  }
}

/**
 * Where the µs and the state start in a single-call meter reply, or undefined when it is not one: a
 * verdict of `0` or `1`, then seconds and µs of 1 to 16 digits each, each field after one space.
 */
function meterReplyFields(reply: string): { micros: number; state: number } | undefined {
  const verdict = reply.charCodeAt(0);
  if ((verdict !== 48 && verdict !== 49) || reply.charCodeAt(1) !== 32) return undefined;
  const micros = digitsEnd(reply, 2) + 1;
  if (micros === 0) return undefined;
  const state = digitsEnd(reply, micros) + 1;
  if (state === 0) return undefined;
  return { micros, state };
}

/** The index of the space after 1 to 16 digits from `from`, or -1. */
function digitsEnd(text: string, from: number): number {
  let i = from;
  for (; i < text.length && i - from <= 16; i++) {
    const c = text.charCodeAt(i);
    if (c === 32) return i > from ? i : -1;
    if (c < 48 || c > 57) return -1;
  }
  return -1;
}

/**
 * Hands each call of a meter batch its decision (see lua/meter-batch.ts): the model run on the state the
 * script decided it on, checked against the script's verdict (the denied calls' numbers, after the time).
 */
function settleBatch(calls: readonly Call[], kind: SingleCallScript['kind'], reply: unknown): void {
  const n = calls.length;
  if (!Array.isArray(reply) || reply.length < n + 1 || reply.length > 2 * n + 1) {
    const error = new FloodgateError(
      'ERR_STORE_PROTOCOL',
      `unexpected reply from the ${kind} batch script: ${describeValue(reply)}`,
    );
    for (const call of calls) call.reject(error);
    return;
  }
  const redisNowUs = Number(reply[n]);
  // The calls the script denied (1-based, increasing, after the time): anything else is not this script's.
  const denied = new Uint8Array(n + 1);
  let last = 0;
  for (let d = n + 1; d < reply.length; d++) {
    const at = Number(reply[d]);
    if (!(Number.isSafeInteger(at) && at > last && at <= n)) {
      const error = new FloodgateError(
        'ERR_STORE_PROTOCOL',
        `unexpected verdicts from the ${kind} batch script: ${describeValue(reply.slice(n + 1))}`,
      );
      for (const call of calls) call.reject(error);
      return;
    }
    denied[at] = 1;
    last = at;
  }
  for (let i = 0; i < n; i++) {
    const call = calls[i] as Call;
    const value = reply[i];
    if (value === METER_BATCH_WIRE.reply.wrongType) {
      call.reject(
        toStoreError('redis', new Error('WRONGTYPE Operation against a key holding the wrong kind of value')),
      );
      continue;
    }
    try {
      call.resolve(scriptResult(call, kind, value, call.nowUs ?? redisNowUs, denied[i + 1] === 0));
    } catch (error) {
      call.reject(error);
    }
  }
}

/** KEYS and ARGV of one script call (see lua/main.ts for the layout). */
function scriptArguments(calls: readonly Call[], grace: string): { keys: string[]; args: string[] } {
  const keys: string[] = [];
  const head: string[] = [grace, '0'];
  const body: string[] = [];
  const numbers = new Map<CompiledPolicy, string>();
  const runs = new Runs(body);
  for (const call of calls) {
    for (const c of call.policies) keys.push(storageKey(call.prefix, call.encoded, c.name));
    if (runs.joins(call, sameDecision)) continue;
    // A new run: calls that differ from this one only by their key join it.
    runs.start(call);
    body.push(
      '',
      call.op,
      call.nowUs === undefined ? '' : String(call.nowUs),
      String(call.cost),
      String(call.maxDelayUs),
      String(call.policies.length),
    );
    for (const c of call.policies) {
      let number = numbers.get(c);
      if (number === undefined) {
        number = String(numbers.size + 1);
        numbers.set(c, number);
        head.push(...argsOf(c));
      }
      body.push(number);
    }
    if (call.tatUs !== undefined) for (const tat of call.tatUs) body.push(String(tat));
  }
  runs.end();
  head[1] = String(numbers.size);
  return { keys, args: head.concat(body) };
}

/** Hands each call its part of the script's reply. */
function settle(calls: readonly Call[], reply: unknown): void {
  if (!Array.isArray(reply)) {
    const error = new FloodgateError(
      'ERR_STORE_PROTOCOL',
      `unexpected reply from the decision script: ${describeValue(reply)}`,
    );
    for (const call of calls) call.reject(error);
    return;
  }
  // Numbers with Number(): a client may hand integer replies over as strings (ioredis `stringNumbers`).
  let r = 0;
  for (const call of calls) {
    const first = Number(reply[r]);
    if (first === -1) {
      // This call's GET or SET failed inside the script (see lua/main.ts); the others went on. Sorted
      // like any store error: a key of another type (WRONGTYPE) refuses this call alone, OOM is a fault.
      call.reject(toStoreError('redis', new Error(String(reply[r + 1]))));
      r += 2;
      continue;
    }
    if (call.op === OP_RESET || call.op === OP_REFUND || call.op === OP_SETTLE) {
      r++;
      call.resolve(undefined);
      continue;
    }
    if (call.op === OP_CANCEL) {
      r++;
      call.resolve(first === 1);
      continue;
    }
    const allowed = first === 1;
    const nowUs = Number(reply[r + 1]);
    r += 2;
    const evaluations: Evaluation[] = [];
    for (let i = 0; i < call.policies.length; i++) {
      const reason = REASONS[Number(reply[r])] ?? 'limit';
      const retry = Number(reply[r + 2]);
      evaluations.push({
        allowed: reason === 'ok',
        reason,
        remaining: Number(reply[r + 1]),
        retryAfterUs: retry === -1 ? Number.POSITIVE_INFINITY : retry,
        resetAfterUs: Number(reply[r + 3]),
        delayUs: Number(reply[r + 4]),
        next: undefined,
        buffers: SHARED_BUFFERS,
      });
      r += 5;
    }
    call.resolve({ allowed, evaluations, nowUs });
  }
}
