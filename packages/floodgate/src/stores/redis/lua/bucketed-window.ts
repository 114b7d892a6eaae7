import { admittedLua, deniedLua } from './outcome.js';
import { type LuaPort, lazyEvaluate } from './port.js';

/**
 * Lua port of `evaluateBucketedWindow` and its helpers (model/bucketed-window.ts): counts per clock-aligned
 * bucket of `b` µs, summed over the buckets of the window (`a` µs) that end with the current one. State
 * `{blockedUntil, t1, count1, t2, count2, …}`: with Lua's 1-based arrays a bucket's start sits at an even
 * index and its count right after it; the list code is the sliding log's (lua/list.ts). The model's `%` is `fmod`.
 */
const SOURCE = `
local function load_bucketed_window()
  if not list_first then load_list() end

  bucketed_window = function(c, s, now, cost, _, out)
    local limit, window = c.limit, c.a
    local current = now - fmod(now, c.b)
    local first = list_first(s, current - window)
    local n = 0
    if s then n = #s end
    local sum = list_sum(s, first)
    local untouched = 0
    if n > first then untouched = s[n - 1] + window - now end
    out.delay = 0
    if sum + cost <= limit then
      ${admittedLua('limit - (sum + cost)', 'limit')}
      if cost > 0 then out.reset = current + window - now else out.reset = untouched end
      if cost == 0 then
        out.nxt = false
      else
        -- The buckets still in the window, with the cost added to the current one.
        out.nxt = list_append(s, first, current, cost)
      end
    else
      -- From the newest bucket back: the first that no longer fits beside the newer ones must leave.
      ${deniedLua('limit - sum', 'limit', 'list_wait(s, first, cost, limit, window, now)', 'out.reset = untouched')}
    end
  end
end
`;

/** The bucketed window's Lua port. */
export const BUCKETED_WINDOW_PORT: LuaPort = {
  source: SOURCE,
  locals: ['bucketed_window'],
  evaluate: lazyEvaluate('bucketed_window'),
  refund: `
if not list_take then load_list() end
return list_take(s, leased_at - fmod(leased_at, c.b), unused)`,
};
