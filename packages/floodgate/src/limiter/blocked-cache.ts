import { invalid } from '../errors.js';
import { localKey } from '../keys.js';
import type { CompiledPolicy } from '../model/compile.js';
import type { Decision } from '../model/decision.js';
import { kindOf } from '../model/kinds.js';

/** Options of the local cache of denied keys. */
export interface BlockedCacheOptions {
  /** Most keys remembered at once; the oldest entry goes first. @default 10_000 */
  maxKeys?: number;
}

interface Entry {
  policies: readonly CompiledPolicy[];
  /** The cost that was denied; only the same call is answered locally. */
  cost: number;
  /** The booking window of the denied call (reservations); only the same window is answered locally. */
  maxDelayUs: number;
  /** When the store was asked (local clock, ms). */
  atMs: number;
  /** Until when the store would repeat the denial unchanged: its retry, or the end of a block it started. */
  untilMs: number;
  decision: Decision;
}

/**
 * Remembers keys the store denied, until the moment the store said they could pass again, and answers
 * the same call (same policies, cost and `maxDelayMs`) locally meanwhile. Exact: a denial is kept only
 * when asking the store again would give the same answer and leave the same state, so nothing but time
 * can make the call pass before then. Other processes can only push that moment later; a `reset`, a
 * `cancel` or a settle that gives units back through this limiter forgets the key, and so does a call on
 * it that the store admits (its wait for a denied call of another cost would be too short). Not kept,
 * because the store would change the key's state on the next committed call:
 * - any denial under a sliding log that counts denied attempts (`countDenied`): each attempt is logged;
 * - a denial by `check` or `status` (not committed) under policies with `blockMs`: a `limit` denied the
 *   same way starts the penalty box; and a denial that a policy with `blockMs` did not make;
 * - past the end of a penalty box the denial started: a call the policy still refuses then starts a new
 *   block, so the entry ends with the block (and a `blocked` denial, whose block end is unknown, is not
 *   kept).
 */
export class BlockedCache {
  private readonly entries = new Map<string, Entry>();
  /**
   * When each key was last forgotten (local ms), for as many keys as `entries` holds: a denial from a
   * call that started before then was decided on what was given back after it (a call still in flight
   * during a `reset` or a refund), and is not remembered.
   */
  private readonly forgotten = new Map<string, number>();
  readonly maxKeys: number;
  /** Calls answered locally. */
  hits = 0;

  /** `now`: the local clock, ms, that calls' start times are read on. */
  constructor(
    options: BlockedCacheOptions,
    private readonly now: () => number = () => Number.NEGATIVE_INFINITY,
  ) {
    this.maxKeys = options.maxKeys ?? 10_000;
    if (!Number.isSafeInteger(this.maxKeys) || this.maxKeys < 1) {
      throw invalid('ERR_INVALID_OPTION', 'blockedCache.maxKeys', options.maxKeys, 'a positive integer');
    }
  }

  get size(): number {
    return this.entries.size;
  }

  /** The local answer for a call, or undefined to ask the store. */
  get(
    key: string,
    policies: readonly CompiledPolicy[],
    cost: number,
    maxDelayUs: number,
    nowMs: number,
  ): Decision | undefined {
    const entry = this.entries.get(localKey(key));
    if (entry === undefined || entry.policies !== policies || cost !== entry.cost || maxDelayUs !== entry.maxDelayUs) {
      return undefined;
    }
    if (nowMs >= entry.untilMs) {
      this.entries.delete(localKey(key));
      return undefined;
    }
    this.hits++;
    const age = nowMs - entry.atMs;
    const leftMs = Math.max(1, Math.ceil(entry.decision.retryAfterMs - age));
    return {
      ...entry.decision,
      retryAfterMs: leftMs,
      resetAfterMs: Math.max(0, entry.decision.resetAfterMs - age),
      policies: entry.decision.policies.map((p) => ({
        ...p,
        retryAfterMs: p.allowed ? 0 : Math.max(1, Math.min(p.retryAfterMs, leftMs)),
        resetAfterMs: Math.max(0, p.resetAfterMs - age),
      })),
    };
  }

  /** Records a store decision; only finite denials that a store call would repeat unchanged are kept. */
  remember(
    key: string,
    policies: readonly CompiledPolicy[],
    cost: number,
    maxDelayUs: number,
    decision: Decision,
    nowMs: number,
    committed: boolean,
  ): void {
    if (decision.allowed) {
      // An admitted call used up what a remembered denial of the key (of another cost) waits for: that
      // wait would now be too short.
      if (committed && decision.reason !== 'degraded') this.entries.delete(localKey(key));
      return;
    }
    if (decision.reason === 'degraded' || !Number.isFinite(decision.retryAfterMs)) return;
    if (!cacheable(policies, decision, committed)) return;
    const untilMs = Math.min(nowMs + decision.retryAfterMs, blockEndMs(policies, decision, nowMs));
    if (!(untilMs > nowMs)) return;
    const held = localKey(key);
    const forgottenAt = this.forgotten.get(held);
    if (forgottenAt !== undefined && forgottenAt >= nowMs) return;
    setNewest(this.entries, held, this.maxKeys, {
      policies,
      cost,
      maxDelayUs,
      atMs: nowMs,
      untilMs,
      decision: committed ? asBlocked(policies, decision) : decision,
    });
  }

  /** Forgets the key, and any denial of it from a call that started before now and has not concluded. */
  forget(key: string): void {
    const held = localKey(key);
    this.entries.delete(held);
    setNewest(this.forgotten, held, this.maxKeys, this.now());
  }
}

/** Sets `key` as the newest of `map`, letting the oldest go when the map holds `max` other keys. */
function setNewest<V>(map: Map<string, V>, key: string, max: number, value: V): void {
  if (!map.delete(key) && map.size >= max) map.delete(map.keys().next().value as string);
  map.set(key, value);
}

/**
 * Whether a denial under these policies may be answered locally. A denied committed call changes state
 * in two cases only (`settleDenied`): a policy that counts denied calls (`countDenied`) counts the
 * attempt, whatever denied it;
 * a policy with `blockMs` that denies on its limit starts its block. The block is already running after a
 * committed denial by that policy, so a denial that was not committed is unsafe to replay to a `limit`,
 * and so is one that a policy with `blockMs` did not make: it may fill meanwhile (another call, another
 * process), and the same call would then start its block.
 */
function cacheable(policies: readonly CompiledPolicy[], decision: Decision, committed: boolean): boolean {
  for (let i = 0; i < policies.length; i++) {
    const c = policies[i] as CompiledPolicy;
    if (kindOf(c).countsDenied(c) !== false) return false;
    if (c.blockUs > 0 && (!committed || decision.policies[i]?.allowed !== false)) return false;
  }
  return true;
}

/**
 * The earliest end of a penalty box this denial started, in local ms, or `Infinity`; `-Infinity` (not
 * cacheable) when a policy with `blockMs` denied as `blocked`. Past a block's end, a call that the
 * policy itself still refuses starts a new block in the store, so the cache must let the store see it.
 * A block the store started at its own time `t ≥ nowMs` ends at `t + blockMs`, never before
 * `nowMs + blockMs`; a running block's end is not in the decision (its wait may be the policy's own).
 */
function blockEndMs(policies: readonly CompiledPolicy[], decision: Decision, nowMs: number): number {
  let end = Number.POSITIVE_INFINITY;
  for (let i = 0; i < policies.length; i++) {
    const c = policies[i] as CompiledPolicy;
    const part = decision.policies[i];
    if (c.blockUs === 0 || part === undefined || part.allowed) continue;
    if (part.reason === 'blocked') return Number.NEGATIVE_INFINITY;
    if (part.reason === 'limit') end = Math.min(end, nowMs + c.blockUs / 1000);
  }
  return end;
}

/** A committed denial by a policy with `blockMs` started its block: later answers say `blocked`. */
function asBlocked(policies: readonly CompiledPolicy[], decision: Decision): Decision {
  if (!policies.some((c) => c.blockUs > 0)) return decision;
  const parts = decision.policies.map((p, i) =>
    p.reason === 'limit' && (policies[i] as CompiledPolicy).blockUs > 0 ? { ...p, reason: 'blocked' as const } : p,
  );
  const bound = parts.find((p) => p.policy === decision.policy);
  return bound?.reason === undefined
    ? { ...decision, policies: parts }
    : { ...decision, policies: parts, reason: bound.reason };
}
