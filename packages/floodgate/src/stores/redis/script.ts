import { createHash } from 'node:crypto';
import { DECIDE_LUA } from './lua/decide.js';
import { FIXED_WINDOW_LUA } from './lua/fixed-window.js';
import { MAIN_LUA } from './lua/main.js';
import { METER_LUA } from './lua/meter.js';
import { METER_BATCH_SCRIPT } from './lua/meter-batch.js';
import { METER_FAST_SCRIPT } from './lua/meter-fast.js';
import { PRELUDE_LUA } from './lua/prelude.js';
import { REFUND_LUA } from './lua/refund.js';
import { RESERVATION_LUA } from './lua/reservation.js';
import { SLIDING_LOG_LUA } from './lua/sliding-log.js';
import { SLIDING_WINDOW_LUA } from './lua/sliding-window.js';
import { TOKEN_INTERVAL_LUA } from './lua/token-interval.js';

/** The whole decision script: every algorithm, the all-or-nothing decision, and the batch entry. */
export const DECIDE_SCRIPT = [
  '-- floodgate: rate-limit decisions, a port of the TypeScript model (floodgate/model).',
  PRELUDE_LUA,
  METER_LUA,
  TOKEN_INTERVAL_LUA,
  FIXED_WINDOW_LUA,
  SLIDING_WINDOW_LUA,
  SLIDING_LOG_LUA,
  DECIDE_LUA,
  RESERVATION_LUA,
  REFUND_LUA,
  MAIN_LUA,
].join('\n');

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
