import { admittedLua, deniedLua } from './outcome.js';
import { type LuaPort, lazyEvaluate } from './port.js';

/**
 * The window `now` falls in (`start`) and what it has counted (`count`), as the model's `windowAt` finds
 * them; `window` and the state `s` (a table, or nil) are in scope, `aligned` is the policy's `c` (0 clock,
 * 1 first request). Shared by the decision, the count of a denied call and the single-call script
 * (lua/window-fast.ts).
 */
export function windowAtLua(aligned: string): string {
  return `    local start
    local count = 0
    if ${aligned} == 0 then
      start = now - fmod(now, window)
      if s and s[2] == start then count = s[3] end
    elseif s and s[3] > 0 and now < s[2] + window then
      start = s[2]
      count = s[3]
    else
      start = now
    end`;
}

const WINDOW_AT = windowAtLua('c.c');

/**
 * Lua port of `evaluateFixedWindow` and `countFixedWindowHit` (model/fixed-window.ts): at most `limit`
 * per window of `a` µs, aligned to the epoch (`c` = 0) or to a key's first charged request (`c` = 1);
 * `b` = 1 counts every call (`countDenied`). State `{blockedUntil, windowStart, count}`. The model's
 * `now % window` is `fmod` (exact), not Lua's `%`.
 */
const SOURCE = `
local function load_fixed_window()
  fixed_window = function(c, s, now, cost, _, out)
    local limit, window = c.limit, c.a
${WINDOW_AT}
    local after = count + cost
    out.delay = 0
    if after <= limit then
      ${admittedLua('limit - after', 'limit')}
      if after > 0 then out.reset = start + window - now else out.reset = 0 end
      if cost == 0 then out.nxt = false else out.nxt = { 0, start, after } end
    else
      ${deniedLua(
        'limit - count',
        'limit',
        'start + window - now',
        'if count > 0 then out.reset = start + window - now else out.reset = 0 end',
      )}
    end
  end
  -- The state once a call is counted whatever its outcome; the count stops at MAX_COST (2^53 - 1).
  fixed_window_hit = function(c, s, now, cost)
    local window = c.a
${WINDOW_AT}
    local after = count + cost
    if after > 9007199254740991 then after = 9007199254740991 end
    local blocked = 0
    if s and s[1] > now then blocked = s[1] end
    return { blocked, start, after }
  end
end
`;

export const FIXED_WINDOW_PORT: LuaPort = {
  source: SOURCE,
  locals: ['fixed_window', 'fixed_window_hit'],
  evaluate: lazyEvaluate('fixed_window'),
  refund: `
local window, start, count = c.a, s[2], s[3]
local lease_window = start
if c.c == 0 then lease_window = leased_at - fmod(leased_at, window) end
if start ~= lease_window or leased_at < start or leased_at >= start + window then return nil end
if now >= start + window or count <= 0 then return nil end
return { s[1], start, max(0, count - unused) }`,
  logDenied: { when: 'c.b == 1', state: 'fixed_window_hit(c, s, now, cost)', everyCall: true },
};
