import type { KindName } from '../../model/kinds.js';
import { BUCKETED_WINDOW_PORT } from './kinds/bucketed-window.js';
import { FIXED_WINDOW_PORT } from './kinds/fixed-window.js';
import { METER_PORT } from './kinds/meter.js';
import { SLIDING_LOG_PORT } from './kinds/sliding-log.js';
import { SLIDING_WINDOW_PORT } from './kinds/sliding-window.js';
import type { SqlPort } from './kinds/sql-port.js';
import { TOKEN_INTERVAL_PORT } from './kinds/token-interval.js';

export type { SqlPort } from './kinds/sql-port.js';

/**
 * The PL/pgSQL port of each kind of the model, one file per kind in kinds/ (as the Lua port has one per
 * kind): one per kind, or this does not build. The functions of port.ts dispatch on the kind's number and
 * raise for a number without a port, or for a variant its kind does not declare (guards.ts).
 */
export const SQL_PORTS: { readonly [N in KindName]: SqlPort } = {
  meter: METER_PORT,
  'token-interval': TOKEN_INTERVAL_PORT,
  'fixed-window': FIXED_WINDOW_PORT,
  'sliding-window': SLIDING_WINDOW_PORT,
  'sliding-log': SLIDING_LOG_PORT,
  'bucketed-window': BUCKETED_WINDOW_PORT,
};
