import { WINDOW_CALL_WIRE } from '../wire.js';
import { windowAtLua } from './fixed-window.js';
import { windowFlagGuard } from './flags.js';

const A = WINDOW_CALL_WIRE.argv;

/** A fixed-window policy's numbers, written into its own single-call script (`windowFastScript`). */
export interface WindowShape {
  readonly limit: number;
  /** The window, µs (compiled `a`). */
  readonly a: number;
  /** The alignment (compiled `c`): 0 clock, 1 a key's first request. */
  readonly c: number;
}

/** A finite number as Lua source: exactly the double the client holds (its shortest round-trip form). */
function literal(n: number): string {
  if (!Number.isFinite(n)) throw new Error(`not a finite number: ${String(n)}`);
  return String(n);
}

/** Reads the stored value into `s`, as lua/prelude.ts `decode` reads a fixed window's (`value` in scope). */
const READ_STATE = `-- The state, as lua/prelude.ts decodes a fixed window's: 'f[!<blockedUntil> ]<start> <count>'; anything
-- else reads as untouched.
local s = nil
if value then
  -- The common value first: two whole numbers, which the loop below would read the same.
  local x, y = match(value, '^f(%d+) (%d+)$')
  if x then
    s = { 0, tonumber(x), tonumber(y) }
  elseif byte(value, 1) == 102 then
    local body, n = sub(value, 2), 0
    s = {}
    if byte(body, 1) == 33 then
      body = sub(body, 2)
    else
      n = 1
      s[1] = 0
    end
    for word in gmatch(body, '%S+') do
      local w = tonumber(word)
      if w == nil then
        n = 0
        break
      end
      n = n + 1
      s[n] = w
    end
    if n ~= 3 then s = nil end
  end
end
`;

/**
 * The single-call script of a fixed window, as lua/meter-fast.ts is the meter's: one `limit` or `check`
 * under one fixed-window policy that neither counts denied calls nor has a penalty box (the commonest
 * fixed window), sent when no other call waits to share a script call. The full script defines every
 * kind's functions and parses every call's policies on each call, which cost Redis several times this
 * decision; this defines nothing. The window and its count are the fixed window's Lua port's
 * (`windowAtLua`, lua/fixed-window.ts); the verdict and the state written are `evaluateFixedWindow`'s
 * (model/fixed-window.ts) under `decide` (model/decide.ts), whose denial changes nothing for such a
 * policy: blocked (a box a policy of the same name left), a cost beyond the limit, or a count that the
 * cost would take beyond it.
 *
 * Two forms, as the meter's: **shared** (`shape` undefined), the policy's limit, window and alignment in
 * ARGV; **baked**, those numbers in the script's text, and the commonest call (a `limit` of cost 1 on
 * Redis's clock) sends no ARGV at all.
 *
 * KEYS[1]  the storage key
 * ARGV     see `WINDOW_CALL_WIRE.argv` (wire.ts): the clock ('' = Redis TIME), grace ms, op (0 check,
 *          1 limit), cost; the shared form then the limit, the window (µs) and the alignment, which must be
 *          one the fixed window declares (a Redis error otherwise). The baked form takes the first four or none.
 * Clock    the call's nowUs when given, else Redis TIME (integer µs); expiry is always on Redis's clock.
 * Returns  `WINDOW_CALL_WIRE.reply` (the meter's): `<verdict 1/0> <seconds> <µs> <the state read>`.
 * Writes   an admitted call's `f<start> <count>` (the state layout of lua/prelude.ts), `SET … PXAT` at the
 *          window's end, rounded up; nothing otherwise.
 */
export function windowFastScript(shape?: WindowShape): string {
  const policy =
    shape === undefined
      ? `local limit = tonumber(argv[${A.limit}])
local window = tonumber(argv[${A.window}])
local aligned = tonumber(argv[${A.aligned}])`
      : `local limit, window, aligned = ${literal(shape.limit)}, ${literal(shape.a)}, ${literal(shape.c)}`;
  const header =
    shape === undefined
      ? '-- floodgate: one call under one fixed-window policy (see floodgate/model fixed-window.ts, decide.ts).'
      : `-- floodgate: one call under the fixed window of ${literal(shape.limit)} per ${literal(shape.a)} µs, c = ${literal(shape.c)} (see floodgate/model fixed-window.ts, decide.ts).`;
  const commonest =
    shape === undefined
      ? ''
      : `if argv[1] == nil then
  local t1 = redis.call('TIME')
  seconds, micros = t1[1], t1[2]
  now = seconds * 1000000 + micros
  redis_now = now
  cost, writes = 1, true
else
`;
  return `${header}
local fmod, ceil, floor, format, byte, sub, match, gmatch = math.fmod, math.ceil, math.floor, string.format, string.byte, string.sub, string.match, string.gmatch
local argv = ARGV
local value = redis.call('GET', KEYS[1])
${policy}
${windowFlagGuard('aligned')}
-- The time decided at, as the reply gives it: Redis TIME's seconds and µs, or 0 and the call's µs.
local seconds, micros = '0', argv[${A.nowUs}]
local redis_now, now, cost, writes, extra = nil, 0, 0, false, 0
${commonest}if micros == '' then
  local t1 = redis.call('TIME')
  seconds, micros = t1[1], t1[2]
  redis_now = seconds * 1000000 + micros
  now = redis_now
else
  now = tonumber(micros)
  extra = tonumber(argv[${A.graceMs}]) * 1000
end
cost = tonumber(argv[${A.cost}])
writes = argv[${A.op}] == '1' and cost ~= 0
${shape === undefined ? '' : 'end\n'}${READ_STATE}${windowAtLua('aligned')}
local after = count + cost
-- Admitted: not over the limit (exceeds-capacity), not blocked, and the count after within the limit.
local allowed = cost <= limit and not (s and s[1] > now) and after <= limit
if writes and allowed then
  if redis_now == nil then
    local t2 = redis.call('TIME')
    redis_now = tonumber(t2[1]) * 1000000 + tonumber(t2[2])
  end
  -- The state written, untouched at the window's end, its numbers as lua/prelude.ts \`num\` prints them:
  -- whole ones with format('%d'), others with all their digits.
  local at, counted
  if start == floor(start) and start < 9007199254740992 and start > -9007199254740992 then
    at = format('%d', start)
  else
    at = format('%.17g', start)
  end
  if after == floor(after) and after < 9007199254740992 then
    counted = format('%d', after)
  else
    counted = format('%.17g', after)
  end
  local reset = start + window - now
  if reset < 1 then reset = 1 end
  redis.call('SET', KEYS[1], 'f' .. at .. ' ' .. counted, 'PXAT', format('%d', ceil((redis_now + reset + extra) / 1000)))
end
if allowed then return '1 ' .. seconds .. ' ' .. micros .. ' ' .. (value or '') end
return '0 ' .. seconds .. ' ' .. micros .. ' ' .. (value or '')
`;
}

/** The shared single-call fixed-window script: the policy's numbers in ARGV. */
export const WINDOW_FAST_SCRIPT = windowFastScript();
