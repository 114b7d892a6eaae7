import type { LuaPort } from './port.js';

/**
 * Lua port of `evaluateBucketedWindow` and its helpers (model/bucketed-window.ts): counts per clock-aligned
 * bucket of `b` µs, summed over the buckets of the window (`a` µs) that end with the current one. State
 * `{blockedUntil, t1, count1, t2, count2, …}`: with Lua's 1-based arrays a bucket's start sits at an even
 * index and its count right after it. Sums run newest first, as in the model; the model's `%` is `fmod`.
 */
const SOURCE = `
local function load_bucketed_window()
  -- Index of the first bucket still in the window (entries start at 2).
  local function first_bucket(s, cutoff)
    if not s then return 2 end
    local i, n = 2, #s
    while i <= n and s[i] <= cutoff do i = i + 2 end
    return i
  end

  bucketed_window = function(c, s, now, cost, _, out)
    local limit, window = c.limit, c.a
    local current = now - fmod(now, c.b)
    local first = first_bucket(s, current - window)
    local n = 0
    if s then n = #s end
    -- Newest first, as in the model.
    local sum = 0
    for i = n, first + 1, -2 do sum = sum + s[i] end
    local untouched = 0
    if n > first then untouched = s[n - 1] + window - now end
    out.delay = 0
    if sum + cost <= limit then
      out.allowed = true
      out.reason = OK
      out.remaining = clamp_remaining(limit - (sum + cost), limit)
      out.retry = 0
      if cost > 0 then out.reset = current + window - now else out.reset = untouched end
      if cost == 0 then
        out.nxt = false
      else
        -- The buckets still in the window, with the cost added to the current one.
        local nxt = { 0 }
        local m = 1
        for i = first, n do
          m = m + 1
          nxt[m] = s[i]
        end
        if m > 1 and nxt[m - 1] == current then
          nxt[m] = nxt[m] + cost
        else
          nxt[m + 1] = current
          nxt[m + 2] = cost
        end
        out.nxt = nxt
      end
    else
      out.allowed = false
      out.reason = LIMIT
      out.remaining = clamp_remaining(limit - sum, limit)
      -- From the newest bucket back: the first that no longer fits beside the newer ones must leave.
      local wait = s[n - 1] + window - now
      local newer = 0
      for i = n - 1, first, -2 do
        newer = newer + s[i + 1]
        if newer + cost > limit then
          wait = s[i] + window - now
          break
        end
      end
      out.retry = wait
      out.reset = untouched
      out.nxt = false
    end
  end
end
`;

/** The bucketed window's Lua port. */
export const BUCKETED_WINDOW_PORT: LuaPort = {
  source: SOURCE,
  locals: ['bucketed_window'],
  evaluate:
    'if not bucketed_window then load_bucketed_window() end\nreturn bucketed_window(c, s, now, cost, max_delay, out)',
  refund: `
local bucket = leased_at - fmod(leased_at, c.b)
local n = #s
for i = 2, n, 2 do
  if s[i] == bucket then
    local left = s[i + 1] - unused
    local nxt = {}
    for j = 1, n do nxt[j] = s[j] end
    if left > 0 then
      nxt[i + 1] = left
    else
      table.remove(nxt, i)
      table.remove(nxt, i)
    end
    return nxt
  end
end
return nil`,
};
