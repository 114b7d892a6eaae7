import { METER_CALL_WIRE } from '../wire.js';
import { meterFlagGuard } from './flags.js';
import { meterTransition } from './meter-transition.js';

const A = METER_CALL_WIRE.argv;

/**
 * A second, minimal script for the commonest call: one call under a single meter policy (GCRA, token
 * bucket with continuous refill, leaky bucket in either mode), sent when no other call waits to share a
 * script call. Redis runs a script's whole chunk on every call, so the full script's definitions cost
 * more than this decision itself; this one defines nothing. The decision is the meter's transition
 * (lua/meter-transition.ts), the same Lua as the batch script's.
 *
 * KEYS[1]  the storage key
 * ARGV     see `METER_CALL_WIRE.argv` (wire.ts): the clock ('' = Redis TIME), grace ms (as in lua/main.ts), op
 *          (0 check, 1 limit), cost, maxDelayUs, blockUs, T (a), τ (b), the queue flag (c), which must
 *          be one the meter declares (a Redis error otherwise)
 * Clock    the call's nowUs when given, else Redis TIME (integer µs); expiry is always on Redis's clock.
 * Returns  `METER_CALL_WIRE.reply`: { verdict (1/0), nowUs decided at, the state read (nil when none) }
 * Writes   the new TAT as a plain integer (`SET … PXAT` at the untouched time, rounded up), or, once
 *          denied under `blockMs`, `!<blockedUntil> <tat>`; the state layout of lua/prelude.ts.
 */
export const METER_FAST_SCRIPT = `-- floodgate: one call under one meter policy (see floodgate/model meter.ts, decide.ts).
local ceil, format, byte, match = math.ceil, string.format, string.byte, string.match
local argv = ARGV
local value = redis.call('GET', KEYS[1])
local redis_now = nil
local now
local extra = 0
if argv[${A.nowUs}] == '' then
  local t = redis.call('TIME')
  redis_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = redis_now
else
  now = tonumber(argv[${A.nowUs}])
  extra = tonumber(argv[${A.graceMs}]) * 1000
end
local cost = tonumber(argv[${A.cost}])
local writes = argv[${A.op}] == '1' and cost ~= 0
local block = tonumber(argv[${A.blockUs}])
local tau = tonumber(argv[${A.tau}])
local queue = tonumber(argv[${A.queue}])
${meterFlagGuard('queue')}
local slack = tonumber(argv[${A.maxDelayUs}])
if queue == 1 then slack = 0 end
local charge = cost * tonumber(argv[${A.t}])
charge = ceil(charge - charge * 1e-15)
${meterTransition((expr) => `next_value = format('%d', ${expr})`)}
if next_value then
  if redis_now == nil then
    local t2 = redis.call('TIME')
    redis_now = tonumber(t2[1]) * 1000000 + tonumber(t2[2])
  end
  if reset < 1 then reset = 1 end
  -- Whole numbers as strings made with format('%d'): redis.call turns a number into a string with
  -- %.17g, which costs Redis more and prints a whole number the same.
  redis.call('SET', KEYS[1], next_value, 'PXAT', format('%d', ceil((redis_now + reset + extra) / 1000)))
end
if allowed then return { 1, now, value } end
return { 0, now, value }
`;
