import type { CompiledPolicy } from './compile.js';
import type { Evaluate } from './descriptor.js';
import { emptyStateLength, exceedsCapacity, kindOf } from './kinds.js';
import { type Evaluation, emptyEvaluation, type State } from './types.js';

const probe = emptyEvaluation();

/**
 * One policy's verdict on a call, penalty box and impossible costs included. Pure: reads `s`, writes
 * `out`, never touches a clock. `out.next` is the state to store if the call is committed.
 */
export const evaluatePolicy: Evaluate = (c, s, nowUs, cost, maxDelayUs, out) => {
  // The kind's own evaluation (throws for a kind this model does not know: nothing is left half-written).
  const k = kindOf(c);
  if (exceedsCapacity(c, cost, k)) {
    // Can never fit: report the key as it stands and change nothing.
    k.evaluate(c, s, nowUs, 0, 0, out);
    out.allowed = false;
    out.reason = 'exceeds-capacity';
    out.retryAfterUs = Number.POSITIVE_INFINITY;
    out.delayUs = 0;
    out.next = undefined;
    return;
  }
  const blockedUntil = s === undefined ? 0 : (s[0] as number);
  if (blockedUntil > nowUs) {
    // The same call passes once the block is over and the policy itself admits it: the later of the
    // two (a block shorter than the policy's own wait must not promise a retry that is then denied,
    // which would start a new block). The key is reported as it stands (a cost-0 evaluation).
    k.evaluate(c, s, nowUs, cost, maxDelayUs, out);
    const own = out.allowed ? 0 : out.retryAfterUs;
    k.evaluate(c, s, nowUs, 0, 0, out);
    const wait = Math.max(blockedUntil - nowUs, own);
    out.allowed = false;
    out.reason = 'blocked';
    out.remaining = 0;
    out.retryAfterUs = wait;
    out.resetAfterUs = Math.max(out.resetAfterUs, wait);
    out.delayUs = 0;
    out.next = undefined;
    return;
  }
  k.evaluate(c, s, nowUs, cost, maxDelayUs, out);
};

/**
 * Settles one policy's report when the call as a whole was denied. A policy that admitted the call
 * consumed nothing, so it reports the key as it stands. With `commit`, policies that remember denials
 * get their new state in `out.next`: a counted call (a kind whose `countsDenied`: a logged attempt of a
 * `countDenied` sliding log, the count of a `countDenied` fixed window, which counts even a cost above its
 * limit) and the penalty box (`blockMs`, only for the policy that itself denied on its limit). Every
 * report's `retryAfterUs` is its wait for the same call from the state it is left in: a policy that
 * admitted the call but counted it still reports `allowed` (it did not deny), with the wait that the
 * counted call imposes.
 */
export function settleDenied(
  c: CompiledPolicy,
  s: State | undefined,
  nowUs: number,
  cost: number,
  commit: boolean,
  out: Evaluation,
): void {
  const allowedHere = out.allowed;
  if (allowedHere) reportAsAllowed(c, s, nowUs, out);
  out.next = undefined;
  // A cost-0 call is a check: it never starts a penalty or counts an attempt.
  if (!commit || cost === 0 || out.reason === 'blocked') return;
  const k = kindOf(c);
  const counts = k.countsDenied(c);
  if (out.reason === 'exceeds-capacity' && counts !== 'every-call') return;
  let next = s;
  if (counts !== false && k.logDenied !== undefined) {
    next = k.logDenied(c, s, nowUs, cost);
    evaluatePolicy(c, next, nowUs, cost, 0, out);
    if (allowedHere) {
      // The policy did not deny this call, but the attempt it counted may leave no room for the same
      // call: its wait for the same cost, after the attempt, is part of the decision's retryAfter (toDecision).
      const wait = out.allowed ? 0 : out.retryAfterUs;
      reportAsAllowed(c, next, nowUs, out);
      out.retryAfterUs = wait;
      out.resetAfterUs = Math.max(out.resetAfterUs, wait);
    }
    out.next = next;
  }
  if (c.blockUs > 0 && out.reason === 'limit') {
    const blocked = next === undefined ? new Array<number>(emptyStateLength(k)).fill(0) : [...next];
    blocked[0] = nowUs + c.blockUs;
    out.next = blocked;
    out.remaining = 0;
    // The retry must pass both the block and the policy's own wait for this cost (`out.retryAfterUs`,
    // after a counted attempt when denied attempts count): a retry the policy itself still denies would
    // start a new block.
    out.retryAfterUs = Math.max(c.blockUs, out.retryAfterUs);
    out.resetAfterUs = Math.max(out.resetAfterUs, out.retryAfterUs);
  }
}

function reportAsAllowed(c: CompiledPolicy, s: State | undefined, nowUs: number, out: Evaluation): void {
  evaluatePolicy(c, s, nowUs, 0, 0, out);
  out.allowed = true;
  out.reason = 'ok';
  out.retryAfterUs = 0;
  out.delayUs = 0;
}

/** Options of {@link decide}. */
export interface DecideOptions {
  /** Store the outcome (`limit`) or only report it (`check`). */
  commit: boolean;
  /** Admit calls that fit within this many µs, booking the capacity now (reservations). @default 0 */
  maxDelayUs?: number;
}

/**
 * Decides a call against several policies at once, all-or-nothing: admitted only if every policy admits
 * it; when one denies, nothing is consumed (only the denial memories of `settleDenied` are kept, and
 * none at all when the cost exceeds what some policy can ever admit, but the count of a policy that
 * counts every call).
 * Each `evaluations[i].next` is the state to store for policy `i`, or undefined to leave it as it is.
 */
export function decide(
  policies: readonly CompiledPolicy[],
  states: readonly (State | undefined)[],
  nowUs: number,
  cost: number,
  options: DecideOptions,
  evaluations: Evaluation[] = policies.map(() => emptyEvaluation()),
): boolean {
  const maxDelayUs = options.maxDelayUs ?? 0;
  let allowed = true;
  let impossible = false;
  for (let i = 0; i < policies.length; i++) {
    const out = evaluations[i] as Evaluation;
    evaluatePolicy(policies[i] as CompiledPolicy, states[i], nowUs, cost, maxDelayUs, out);
    if (!out.allowed) {
      allowed = false;
      if (out.reason === 'exceeds-capacity') impossible = true;
    }
  }
  if (!allowed) {
    // A cost that one policy can never admit changes nothing under any policy (DESIGN §4): no policy
    // starts a penalty or logs the attempt, each only reports the key as it stands; only a policy that
    // counts every call (a `countDenied` fixed window) counts it.
    const commit = options.commit && !impossible;
    for (let i = 0; i < policies.length; i++) {
      const c = policies[i] as CompiledPolicy;
      const keep = commit || (options.commit && kindOf(c).countsDenied(c) === 'every-call');
      settleDenied(c, states[i], nowUs, cost, keep, evaluations[i] as Evaluation);
    }
  } else if (!options.commit) {
    for (const out of evaluations) out.next = undefined;
  }
  return allowed;
}

/** Reads what a policy holds for a key now, as `status` reports it (cost 0, nothing changes). */
export function inspect(c: CompiledPolicy, s: State | undefined, nowUs: number, out: Evaluation = probe): Evaluation {
  evaluatePolicy(c, s, nowUs, 0, 0, out);
  out.next = undefined;
  return out;
}
