import { createHash } from 'node:crypto';
import { type CompiledPolicy, compilePolicy } from '../../model/compile.js';
import { KIND_METER, KINDS } from '../../model/kinds.js';
import type { Policy } from '../../model/policy.js';
import { BUCKETED_WINDOW_PORT } from './lua/bucketed-window.js';
import { decideLua } from './lua/decide.js';
import { FIXED_WINDOW_PORT } from './lua/fixed-window.js';
import { checkFlagsLua } from './lua/flags.js';
import { LIST_LUA } from './lua/list.js';
import { MAIN_LUA } from './lua/main.js';
import { METER_PORT } from './lua/meter.js';
import { METER_BATCH_SCRIPT, WINDOW_BATCH_SCRIPTS } from './lua/meter-batch.js';
import { METER_FAST_SCRIPT, meterFastScript } from './lua/meter-fast.js';
import { inKindOrder, type LuaPorts } from './lua/port.js';
import { preludeLua } from './lua/prelude.js';
import { refundLua } from './lua/refund.js';
import { RESERVATION_LUA } from './lua/reservation.js';
import { SETTLE_LUA } from './lua/settle.js';
import { SLIDING_LOG_PORT } from './lua/sliding-log.js';
import { SLIDING_WINDOW_PORT } from './lua/sliding-window.js';
import { TOKEN_INTERVAL_PORT } from './lua/token-interval.js';
import { WINDOW_FAST_SCRIPTS, type WindowKind, windowFastScript } from './lua/window-fast.js';

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
export const METER_SCRIPT_SHA = sha1(METER_SCRIPT);

/**
 * A single-call script and its SHA-1: `kind` says which (lua/meter-fast.ts, or lua/window-fast.ts for a
 * fixed or sliding window or an interval token bucket), `baked` whether the policy's numbers are in its text.
 */
export interface SingleCallScript {
  readonly script: string;
  readonly sha: string;
  readonly kind: 'meter' | WindowKind;
  readonly baked: boolean;
}

/** The shared single-call scripts, for a policy shape that has no baked script. */
const SHARED_METER_CALL: SingleCallScript = {
  script: METER_SCRIPT,
  sha: METER_SCRIPT_SHA,
  kind: 'meter',
  baked: false,
};
const SHARED_WINDOW_CALLS = Object.fromEntries(
  (Object.entries(WINDOW_FAST_SCRIPTS) as [WindowKind, string][]).map(([kind, script]) => [
    kind,
    { script, sha: sha1(script), kind, baked: false },
  ]),
) as Record<WindowKind, SingleCallScript>;

/**
 * The most policy shapes (a meter's T, τ, blockUs and queue flag; a window's or an interval bucket's
 * limit and compiled `a`, `b`, `c`), of every kind together, that get a baked single-call script in one
 * process; policies of further shapes run the shared one of their kind. Each script Redis is sent stays in its script cache (until `SCRIPT FLUSH`), so
 * an application that makes policies of many shapes (limits per tenant, say) loads at most this many
 * there per process.
 */
export const MAX_BAKED_METER_SCRIPTS = 64;

const byPolicy = new WeakMap<CompiledPolicy, SingleCallScript | null>();
const bakedByShape = new Map<string, SingleCallScript>();

function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

/**
 * The single-call script for a policy alone, or undefined when its calls take the full script: a meter's
 * (lua/meter-fast.ts), or, without a penalty box, a fixed window's (whether it counts denied calls or
 * not), a sliding window's or an interval token bucket's (lua/window-fast.ts). Baked for its shape, one
 * script per shape, for the first {@link MAX_BAKED_METER_SCRIPTS} shapes; the shared
 * one after them, and for numbers a baked script cannot hold (a compiled policy's can; a forged one's may not).
 */
export function singleCallScript(c: CompiledPolicy): SingleCallScript | undefined {
  let found = byPolicy.get(c);
  if (found === undefined) {
    const window = windowKindOf(c);
    found = c.kind === KIND_METER ? bakeMeter(c) : window !== undefined ? bakeWindow(c, window) : null;
    byPolicy.set(c, found);
  }
  return found ?? undefined;
}

/** The window kind of a policy lua/window-fast.ts decides, if it is one. */
function windowKindOf(c: CompiledPolicy): WindowKind | undefined {
  if (c.blockUs !== 0) return undefined;
  if (c.kind === KINDS['fixed-window'].id) return 'fixed-window';
  if (c.kind === KINDS['sliding-window'].id) return 'sliding-window';
  if (c.kind === KINDS['token-interval'].id) return 'token-interval';
  return undefined;
}

function bakeMeter(c: CompiledPolicy): SingleCallScript {
  const numbers = [c.a, c.b, c.c, c.blockUs];
  if (!numbers.every((n) => Number.isSafeInteger(n))) return SHARED_METER_CALL;
  return baked(`m ${numbers.join(' ')}`, SHARED_METER_CALL, () =>
    meterFastScript({ a: c.a, b: c.b, c: c.c, blockUs: c.blockUs }),
  );
}

function bakeWindow(c: CompiledPolicy, kind: WindowKind): SingleCallScript {
  const shared = SHARED_WINDOW_CALLS[kind];
  const numbers = [c.limit, c.a, c.b, c.c];
  if (!numbers.every((n) => Number.isFinite(n))) return shared;
  return baked(`${kind} ${numbers.join(' ')}`, shared, () =>
    windowFastScript(kind, { limit: c.limit, a: c.a, b: c.b, c: c.c }),
  );
}

/** The baked script of a shape, made once; the shared one when the process has baked its most. */
function baked(shape: string, shared: SingleCallScript, make: () => string): SingleCallScript {
  let found = bakedByShape.get(shape);
  if (found === undefined) {
    if (bakedByShape.size >= MAX_BAKED_METER_SCRIPTS) return shared;
    const script = make();
    found = { script, sha: sha1(script), kind: shared.kind, baked: true };
    bakedByShape.set(shape, found);
  }
  return found;
}

/**
 * The single-call script a call alone under this meter policy runs, for `SCRIPT LOAD` ahead of time or
 * inspection (see {@link singleCallScriptFor}); undefined for a policy of another kind.
 */
export function meterScriptFor(policy: Policy): { script: string; sha: string } | undefined {
  const c = compilePolicy(policy);
  return c.kind === KIND_METER ? singleCallScriptFor(policy) : undefined;
}

/**
 * The single-call script a call alone under this policy runs (a meter's; without a penalty box, a fixed
 * window's, a sliding window's or an interval token bucket's), for `SCRIPT LOAD` ahead of time or
 * inspection; undefined for a policy whose calls take the full script ({@link DECIDE_SCRIPT}).
 */
export function singleCallScriptFor(policy: Policy): { script: string; sha: string } | undefined {
  const found = singleCallScript(compilePolicy(policy));
  return found === undefined ? undefined : { script: found.script, sha: found.sha };
}

/** The batch script for calls under one meter policy each (see lua/meter-batch.ts). */
export const METER_BATCH = METER_BATCH_SCRIPT;

/** SHA-1 of {@link METER_BATCH}. */
export const METER_BATCH_SHA = createHash('sha1').update(METER_BATCH).digest('hex');

/**
 * The batch scripts for calls under one window policy each, one kind a batch (see lua/meter-batch.ts), and
 * their SHA-1, for the windows whose calls alone take lua/window-fast.ts.
 */
export const WINDOW_BATCHES = Object.fromEntries(
  (Object.entries(WINDOW_BATCH_SCRIPTS) as [WindowKind, string][]).map(([kind, script]) => [
    kind,
    { script, sha: sha1(script) },
  ]),
) as Readonly<Record<WindowKind, { readonly script: string; readonly sha: string }>>;
