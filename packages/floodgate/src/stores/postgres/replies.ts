import { FloodgateError } from '../../errors.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { decide } from '../../model/decide.js';
import { kindOf } from '../../model/kinds.js';
import { type Evaluation, emptyEvaluation, type Reason, type State } from '../../model/types.js';
import type { StoreRequest, StoreResult } from '../store.js';
import type { CallForm, StatementReply } from './wire.js';

/*
 * The client's half of the port: reads what the decide function and the meter statements return (laid out
 * as wire.ts says), writes the report with the model (model/decide.ts) from the states the server read,
 * and checks the server's verdict against the model's: a mismatch is ERR_STORE_PROTOCOL.
 */

const REASONS: readonly Reason[] = ['ok', 'limit', 'blocked', 'exceeds-capacity'];
/** The longest state a `'state'` reply may carry: the fixed-size kinds keep at most a handful of numbers. */
const MAX_STATE_LENGTH = 16;

/** How the decide function answers a call under these policies (see `CallForm`). */
export function callForm(policies: readonly CompiledPolicy[]): CallForm {
  for (const c of policies) if (!('fields' in kindOf(c).layout)) return 'report';
  return 'state';
}

function protocol(message: string): FloodgateError {
  return new FloodgateError('ERR_STORE_PROTOCOL', `the postgres store ${message}`);
}

/** Runs the model on the states the server read and checks its verdicts, overall and per policy. */
function modelReport(
  policies: readonly CompiledPolicy[],
  states: readonly (State | undefined)[],
  nowUs: number,
  request: StoreRequest,
  verdicts: readonly boolean[],
  allowed: boolean,
  what: string,
  evaluations: Evaluation[] = policies.map(() => emptyEvaluation()),
): Evaluation[] {
  const modelAllowed = decide(
    policies,
    states,
    nowUs,
    request.cost,
    { commit: request.commit, maxDelayUs: request.maxDelayUs },
    evaluations,
  );
  const disagree = evaluations.findIndex((e, i) => e.allowed !== verdicts[i]);
  if (modelAllowed !== allowed || disagree >= 0) {
    const at = disagree >= 0 ? `policy ${JSON.stringify(policies[disagree]?.name)}` : 'the call';
    throw protocol(
      `got a verdict from its ${what} that the model does not reach on the state it read (${at}: the server ${
        (disagree >= 0 ? verdicts[disagree] : allowed) ? 'admitted' : 'denied'
      }, the model ${(disagree >= 0 ? evaluations[disagree]?.allowed : modelAllowed) ? 'admits' : 'denies'}); its table holds a state no version of this port wrote`,
    );
  }
  for (const e of evaluations) e.next = undefined;
  return evaluations;
}

/** Reads a comma-separated reply of the decide function, number by number. */
export class Reply {
  private readonly values: readonly string[];
  private p = 0;
  constructor(text: string) {
    this.values = text === '' ? [] : text.split(',');
  }
  next(): number {
    if (this.p >= this.values.length) throw protocol('got a result of the wrong length');
    return Number(this.values[this.p++]);
  }
  end(): void {
    if (this.p !== this.values.length) throw protocol('got a result of the wrong length');
  }
}

/** One call's answer from the decide function (not a reset), in the form its policies give it. */
export function decodeCall(reply: Reply, policies: readonly CompiledPolicy[], request: StoreRequest): StoreResult {
  const allowed = reply.next() === 1;
  const nowUs = reply.next();
  if (callForm(policies) === 'report') {
    const evaluations: Evaluation[] = [];
    for (let i = 0; i < policies.length; i++) {
      const e = emptyEvaluation();
      e.allowed = reply.next() === 1;
      e.reason = REASONS[reply.next()] as Reason;
      e.remaining = reply.next();
      e.retryAfterUs = reply.next();
      e.resetAfterUs = reply.next();
      e.delayUs = reply.next();
      evaluations.push(e);
    }
    return { allowed, evaluations, nowUs };
  }
  const verdicts: boolean[] = [];
  const states: (State | undefined)[] = [];
  for (let i = 0; i < policies.length; i++) {
    verdicts.push(reply.next() === 1);
    const length = reply.next();
    if (length === -1) {
      states.push(undefined);
      continue;
    }
    if (!Number.isInteger(length) || length < 0 || length > MAX_STATE_LENGTH) {
      throw protocol(`got a state of length ${length}`);
    }
    const state: number[] = [];
    for (let j = 0; j < length; j++) state.push(reply.next());
    states.push(state);
  }
  return {
    allowed,
    evaluations: modelReport(policies, states, nowUs, request, verdicts, allowed, 'decide function'),
    nowUs,
  };
}

const METER_OUT = emptyEvaluation();
const METER_OUTS = [METER_OUT];
/** The buffers of the evaluations the single-policy statements hand over (their `next` is always undefined). */
const SHARED_BUFFERS = emptyEvaluation().buffers;

/** A bigint as PostgreSQL prints it, within the numbers JavaScript holds exactly. */
function isWholeNumber(text: string): boolean {
  return text !== '' && Number.isSafeInteger(Number(text));
}

const BITS = new DataView(new ArrayBuffer(8));

/**
 * A number sent as itself when whole, else as minus the bits of its float8 (`StatementReply.bitsAt`);
 * undefined when the text is neither (or the bits are not a finite number ≥ 0).
 */
function wholeOrBits(text: string): number | undefined {
  if (isWholeNumber(text) && text[0] !== '-') return Number(text);
  if (!/^-[1-9][0-9]{0,18}$/.test(text)) return undefined;
  const bits = -BigInt(text);
  if (bits >= 1n << 63n) return undefined;
  BITS.setBigUint64(0, bits);
  const value = BITS.getFloat64(0);
  return Number.isFinite(value) && value > 0 ? value : undefined;
}

/**
 * The decision of a single-policy statement (`StatementReply`): the model run on the state the statement
 * decided on, at its time, which is exactly what the statement applied, and the statement's verdict
 * checked against it.
 */
export function decodeStatement(
  policy: CompiledPolicy,
  request: StoreRequest,
  rows: readonly Record<string, unknown>[],
  layout: StatementReply,
): StoreResult {
  const text = rows[0]?.r;
  if (typeof text !== 'string' || text.length < 2 || text[0] !== '{' || text[text.length - 1] !== '}') {
    throw protocol(`got no result from its ${layout.statement}`);
  }
  const parts = text.slice(1, -1).split(',');
  const inserted = parts.length === layout.insertedLength;
  const fields = parts.slice(layout.state, layout.state + layout.stateLength);
  const empty = fields.every((f) => f === 'NULL');
  let state: number[] | undefined;
  if (!inserted && !empty && parts.length === layout.length) {
    state = [];
    for (const [i, f] of fields.entries()) {
      const value = i === layout.bitsAt ? wholeOrBits(f) : isWholeNumber(f) ? Number(f) : undefined;
      if (value === undefined) throw protocol(`got an unexpected result: ${text}`);
      state.push(value);
    }
  }
  const head = inserted ? parts : [parts[layout.nowUs] as string, parts[layout.verdict] as string];
  if (!(inserted || parts.length === layout.length) || !head.every(isWholeNumber)) {
    throw protocol(`got an unexpected result: ${text}`);
  }
  const nowUs = Number(parts[layout.nowUs]);
  // A key the statement inserted was admitted: the write statement is sent only for a cost that fits.
  const verdict = inserted || parts[layout.verdict] === '1';
  const [e] = modelReport([policy], [state], nowUs, request, [verdict], verdict, layout.statement, METER_OUTS);
  const out = e as Evaluation;
  return {
    allowed: verdict,
    evaluations: [
      {
        allowed: out.allowed,
        reason: out.reason,
        remaining: out.remaining,
        retryAfterUs: out.retryAfterUs,
        resetAfterUs: out.resetAfterUs,
        delayUs: out.delayUs,
        next: undefined,
        buffers: SHARED_BUFFERS,
      },
    ],
    nowUs,
  };
}
