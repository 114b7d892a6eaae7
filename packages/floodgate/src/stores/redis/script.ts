import { createHash } from 'node:crypto';
import { BUCKETED_WINDOW_PORT } from './lua/bucketed-window.js';
import { decideLua } from './lua/decide.js';
import { FIXED_WINDOW_PORT } from './lua/fixed-window.js';
import { checkFlagsLua } from './lua/flags.js';
import { LIST_LUA } from './lua/list.js';
import { MAIN_LUA } from './lua/main.js';
import { METER_PORT } from './lua/meter.js';
import { METER_BATCH_SCRIPT } from './lua/meter-batch.js';
import { METER_FAST_SCRIPT } from './lua/meter-fast.js';
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

/** The batch script for calls under one meter policy each (see lua/meter-batch.ts). */
export const METER_BATCH = METER_BATCH_SCRIPT;

/** SHA-1 of {@link METER_BATCH}. */
export const METER_BATCH_SHA = createHash('sha1').update(METER_BATCH).digest('hex');
