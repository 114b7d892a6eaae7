import { admittedLua, deniedLua } from './outcome.js';
import { type LuaPort, lazyEvaluate } from './port.js';

/**
 * `intervalsUntil` and its test (model/token-bucket.ts) as two local functions: `fits_after`, the
 * evaluation's test after m >= 1 refills; `intervals_until`, the fewest such m. Shared by the port and the
 * single-call and batch scripts (lua/window-fast.ts, lua/meter-batch.ts); `max` and `ceil` in scope.
 */
export const INTERVALS_UNTIL_LUA = `-- The evaluation's test after m >= 1 refills of a state holding used.
local function fits_after(used, m, cost, target, refill, dust)
  local left = used - m * refill
  if left <= dust then left = 0 end
  return left + cost <= target
end

-- The fewest whole intervals m >= 1 after a state holding used for which cost fits target.
local function intervals_until(used, cost, target, refill, dust)
  local m = max(1, ceil((used + cost - target) / refill))
  local k = 0
  while k < 4 and m > 1 and fits_after(used, m - 1, cost, target, refill, dust) do
    m = m - 1
    k = k + 1
  end
  k = 0
  while k < 4 and not fits_after(used, m, cost, target, refill, dust) do
    m = m + 1
    k = k + 1
  end
  return m
end`;

/**
 * The refill of `evaluateTokenInterval`: from the state `s` (or nil) at `now`, `used` and `anchor` after
 * the whole intervals since the anchor (`refill`, `interval`, `dust` in scope). Shared as above.
 */
export const REFILL_LUA = `local used, anchor = 0, now
if s and s[2] > 0 then
  used = s[2]
  anchor = s[3]
  local intervals = floor((now - anchor) / interval)
  if intervals > 0 then
    used = used - intervals * refill
    anchor = anchor + intervals * interval
    if used <= dust then
      used = 0
      anchor = now
    end
  end
end`;

/** `lua` with every line after the first that is not empty indented by `indent`. */
function indented(lua: string, indent: string): string {
  return lua
    .split('\n')
    .map((line, i) => (i === 0 || line === '' ? line : indent + line))
    .join('\n');
}

/**
 * Lua port of `evaluateTokenInterval` and `intervalsUntil` (model/token-bucket.ts): a token bucket refilled
 * by `a` tokens at each interval boundary (`b` µs). State `{blockedUntil, used, anchor}`; `used` may be
 * fractional (fractional costs), `anchor` is integer µs. What a refill leaves at or below
 * `capacity * 1e-12` is an empty bucket (TOKEN_DUST), and waits are whole intervals after the stored
 * anchor, found with the evaluation's own test. Same signature and output as the meter's port.
 */
const SOURCE = `
local function load_token_interval()
  ${indented(INTERVALS_UNTIL_LUA, '  ')}

  token_interval = function(c, s, now, cost, _, out)
    local capacity, refill, interval = c.limit, c.a, c.b
    local dust = capacity * 1e-12
    ${indented(REFILL_LUA, '    ')}
    local after = used + cost
    out.delay = 0
    if after <= capacity then
      ${admittedLua('capacity - after', 'capacity')}
      if cost > 0 then
        out.reset = anchor + intervals_until(after, 0, 0, refill, dust) * interval - now
        out.nxt = { 0, after, anchor }
      else
        if used > 0 then
          out.reset = s[3] + intervals_until(s[2], 0, 0, refill, dust) * interval - now
        else
          out.reset = 0
        end
        out.nxt = false
      end
    else
      ${deniedLua(
        'capacity - used',
        'capacity',
        's[3] + intervals_until(s[2], cost, capacity, refill, dust) * interval - now',
        'out.reset = s[3] + intervals_until(s[2], 0, 0, refill, dust) * interval - now',
      )}
    end
  end
end
`;

export const TOKEN_INTERVAL_PORT: LuaPort = {
  source: SOURCE,
  locals: ['token_interval'],
  evaluate: lazyEvaluate('token_interval'),
  refund: `
local used, anchor = s[2], s[3]
if used <= 0 or anchor > leased_at then return nil end
if floor((now - anchor) / c.b) ~= floor((leased_at - anchor) / c.b) then return nil end
return { s[1], max(0, used - unused), anchor }`,
};
