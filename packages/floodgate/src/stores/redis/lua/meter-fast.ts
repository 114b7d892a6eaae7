import { meterCharge } from '../../../model/meter.js';
import { METER_CALL_WIRE } from '../wire.js';
import { meterFlagGuard } from './flags.js';
import { meterTransition } from './meter-transition.js';
import { singleCallScript } from './single-call.js';

const A = METER_CALL_WIRE.argv;

/** A meter policy's numbers, written into its own single-call script (`meterFastScript`). */
export interface MeterShape {
  /** T, µs per unit of cost (compiled `a`). */
  readonly a: number;
  /** τ, the tolerance in µs (compiled `b`). */
  readonly b: number;
  /** The variant flag (compiled `c`): 1 = queue mode. */
  readonly c: number;
  readonly blockUs: number;
}

/** A whole number as Lua source: exactly the double the client holds (its shortest round-trip form). */
function literal(n: number): string {
  if (!Number.isSafeInteger(n)) throw new Error(`not a whole number of µs: ${String(n)}`);
  return String(n);
}

/**
 * Minimal scripts for the commonest call: one call under a single meter policy (GCRA, token bucket with
 * continuous refill, leaky bucket in either mode), sent when no other call waits to share a script call.
 * Redis runs a script's whole chunk on every call, so the full script's definitions cost more than this
 * decision itself; these define nothing. The decision is the meter's transition
 * (lua/meter-transition.ts), the same Lua as the batch script's.
 *
 * Two forms. **Shared** (`shape` undefined, `METER_SCRIPT`): the policy's numbers come with each call,
 * in ARGV. **Baked** (one script per policy shape, see redis-store.ts `MeterScripts`): T, τ, blockUs and
 * the queue flag are numbers in the script's text, so a call sends none of them, and the commonest call
 * of all (a `limit` of cost 1, no delay allowed, on Redis's clock) sends no ARGV at all: Redis turns
 * every argument into a Lua string and every `tonumber` of one is a `strtod`, which together cost it more
 * than the rest of the decision (bench/redis-profile.ts).
 *
 * KEYS[1]  the storage key
 * ARGV     see `METER_CALL_WIRE.argv` (wire.ts): the clock ('' = Redis TIME), grace ms (as in lua/main.ts), op
 *          (0 check, 1 limit), cost, maxDelayUs; the shared form then blockUs, T (a), τ (b), the queue
 *          flag (c), which must be one the meter declares (a Redis error otherwise). The baked form takes
 *          either the first five or none: none is a `limit` of cost 1 with no delay on Redis's clock.
 * Clock    the call's nowUs when given, else Redis TIME (integer µs); expiry is always on Redis's clock.
 * Returns  `METER_CALL_WIRE.reply`, one string: `<verdict 1/0> <seconds> <µs> <the state read, empty when none>`,
 *          the time decided at being seconds × 10^6 + µs (Redis TIME's two numbers, or 0 and the call's µs)
 * Writes   the new TAT as a plain integer (`SET … PXAT` at the untouched time, rounded up), or, once
 *          denied under `blockMs`, `!<blockedUntil> <tat>`; the state layout of lua/prelude.ts.
 */
export function meterFastScript(shape?: MeterShape): string {
  const policy =
    shape === undefined
      ? `local t = tonumber(argv[${A.t}])
local block = tonumber(argv[${A.blockUs}])
local tau = tonumber(argv[${A.tau}])
local queue = tonumber(argv[${A.queue}])`
      : `local t, block, tau, queue = ${literal(shape.a)}, ${literal(shape.blockUs)}, ${literal(shape.b)}, ${literal(shape.c)}`;
  const header =
    shape === undefined
      ? '-- floodgate: one call under one meter policy (see floodgate/model meter.ts, decide.ts).'
      : `-- floodgate: one call under the meter T = ${literal(shape.a)} µs, tau = ${literal(shape.b)} µs, block ${literal(shape.blockUs)} µs, c = ${literal(shape.c)} (see floodgate/model meter.ts, decide.ts).`;
  return singleCallScript({
    header,
    locals: 'local ceil, format, byte, match = math.ceil, string.format, string.byte, string.match',
    policy: `${policy}\n${meterFlagGuard('queue')}`,
    declarations: 'local charge, slack = 0, 0\n',
    // The baked form's call with no ARGV: Redis's clock, a limit of cost 1, no delay allowed.
    commonest: shape === undefined ? undefined : `charge, writes = ${literal(meterCharge(1, shape.a))}, true`,
    call: `if queue ~= 1 then slack = tonumber(argv[${A.maxDelayUs}]) end
charge = cost * t
charge = ceil(charge - charge * 1e-15)
`,
    transition: meterTransition((expr) => `next_value = format('%d', ${expr})`),
    replied: "(value or '')",
  });
}

/** The shared single-call script: the policy's numbers in ARGV. */
export const METER_FAST_SCRIPT = meterFastScript();
