import { createHash } from 'node:crypto';
import { type CompiledPolicy, compilePolicy } from '../../model/compile.js';
import { KIND_METER } from '../../model/kinds.js';
import type { Policy } from '../../model/policy.js';
import { BUCKETED_WINDOW_PORT } from './lua/bucketed-window.js';
import { decideLua } from './lua/decide.js';
import { FIXED_WINDOW_PORT } from './lua/fixed-window.js';
import { checkFlagsLua } from './lua/flags.js';
import { LIST_LUA } from './lua/list.js';
import { MAIN_LUA } from './lua/main.js';
import { METER_PORT } from './lua/meter.js';
import { METER_BATCH_SCRIPT } from './lua/meter-batch.js';
import { METER_FAST_SCRIPT, meterFastScript } from './lua/meter-fast.js';
import { inKindOrder, type LuaPorts } from './lua/port.js';
import { preludeLua } from './lua/prelude.js';
import { refundLua } from './lua/refund.js';
import { RESERVATION_LUA } from './lua/reservation.js';
import { SETTLE_LUA } from './lua/settle.js';
import { SLIDING_LOG_PORT } from './lua/sliding-log.js';
import { SLIDING_WINDOW_PORT } from './lua/sliding-window.js';
import { TOKEN_INTERVAL_PORT } from './lua/token-interval.js';

/** The Lua port of each kind of the model (model/kinds.ts): one per kind, or this does not build. */
export const LUA_PORTS: LuaPorts = {
  meter: METER_PORT,
  'token-interval': TOKEN_INTERVAL_PORT,
  'fixed-window': FIXED_WINDOW_PORT,
  'sliding-window': SLIDING_WINDOW_PORT,
  'sliding-log': SLIDING_LOG_PORT,
  'bucketed-window': BUCKETED_WINDOW_PORT,
};

/** The whole decision script, for a table of ports: every kind, the all-or-nothing decision, and the batch entry. */
export function decisionScript(ports: LuaPorts): string {
  return [
    '-- floodgate: rate-limit decisions, a port of the TypeScript model (floodgate/model).',
    preludeLua(ports),
    checkFlagsLua(ports),
    LIST_LUA,
    ...inKindOrder(ports).map(({ port }) => port.source),
    decideLua(ports),
    RESERVATION_LUA,
    refundLua(ports),
    SETTLE_LUA,
    MAIN_LUA,
  ].join('\n');
}

/** The whole decision script: every algorithm, the all-or-nothing decision, and the batch entry. */
export const DECIDE_SCRIPT = decisionScript(LUA_PORTS);

/** SHA-1 of the script, as `EVALSHA` names it. */
export const DECIDE_SCRIPT_SHA = createHash('sha1').update(DECIDE_SCRIPT).digest('hex');

/** The single-call script for one meter policy (see lua/meter-fast.ts). */
export const METER_SCRIPT = METER_FAST_SCRIPT;

/** SHA-1 of {@link METER_SCRIPT}. */
export const METER_SCRIPT_SHA = createHash('sha1').update(METER_SCRIPT).digest('hex');

/** A single-call meter script and its SHA-1; `baked` when the policy's numbers are in its text. */
export interface MeterCallScript {
  readonly script: string;
  readonly sha: string;
  readonly baked: boolean;
}

/** The shared single-call script, for a policy shape that has no baked script. */
const SHARED_METER_CALL: MeterCallScript = { script: METER_SCRIPT, sha: METER_SCRIPT_SHA, baked: false };

/**
 * The most policy shapes (T, τ, blockUs, queue flag) that get a baked single-call script in one process;
 * policies of further shapes run the shared one. Each script Redis is sent stays in its script cache
 * (until `SCRIPT FLUSH`), so an application that makes policies of many shapes (limits per tenant, say)
 * loads at most this many there per process.
 */
export const MAX_BAKED_METER_SCRIPTS = 64;

const bakedByPolicy = new WeakMap<CompiledPolicy, MeterCallScript>();
const bakedByShape = new Map<string, MeterCallScript>();

/**
 * The single-call script for a meter policy (lua/meter-fast.ts): baked for its shape, one script per
 * shape, for the first {@link MAX_BAKED_METER_SCRIPTS} shapes; the shared {@link METER_SCRIPT} after
 * them, and for numbers that are not whole (a compiled meter's are; a forged policy's may not be).
 */
export function meterCallScript(c: CompiledPolicy): MeterCallScript {
  let found = bakedByPolicy.get(c);
  if (found === undefined) {
    found = bake(c);
    bakedByPolicy.set(c, found);
  }
  return found;
}

function bake(c: CompiledPolicy): MeterCallScript {
  const numbers = [c.a, c.b, c.c, c.blockUs];
  if (!numbers.every((n) => Number.isSafeInteger(n))) return SHARED_METER_CALL;
  const shape = numbers.join(' ');
  let found = bakedByShape.get(shape);
  if (found === undefined) {
    if (bakedByShape.size >= MAX_BAKED_METER_SCRIPTS) return SHARED_METER_CALL;
    const script = meterFastScript({ a: c.a, b: c.b, c: c.c, blockUs: c.blockUs });
    found = { script, sha: createHash('sha1').update(script).digest('hex'), baked: true };
    bakedByShape.set(shape, found);
  }
  return found;
}

/**
 * The single-call script a call alone under this meter policy runs, for `SCRIPT LOAD` ahead of time or
 * inspection (see {@link meterCallScript}); undefined for a policy of another kind.
 */
export function meterScriptFor(policy: Policy): { script: string; sha: string } | undefined {
  const c = compilePolicy(policy);
  if (c.kind !== KIND_METER) return undefined;
  const { script, sha } = meterCallScript(c);
  return { script, sha };
}

/** The batch script for calls under one meter policy each (see lua/meter-batch.ts). */
export const METER_BATCH = METER_BATCH_SCRIPT;

/** SHA-1 of {@link METER_BATCH}. */
export const METER_BATCH_SHA = createHash('sha1').update(METER_BATCH).digest('hex');
