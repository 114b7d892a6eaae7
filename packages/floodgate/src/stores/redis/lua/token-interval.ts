/**
 * Lua port of `evaluateTokenInterval` (model/token-bucket.ts): a token bucket refilled by `a` tokens at
 * each interval boundary (`b` µs). State `{blockedUntil, used, anchor}`; `used` may be fractional
 * (fractional costs), `anchor` is integer µs. Same signature and output as the meter's port.
 */
export const TOKEN_INTERVAL_LUA = `
local function load_token_interval()
  token_interval = function(c, s, now, cost, _, out)
    local capacity, refill, interval = c.limit, c.a, c.b
    local used, anchor = 0, now
    if s and s[2] > 0 then
      used = s[2]
      anchor = s[3]
      local intervals = floor((now - anchor) / interval)
      if intervals > 0 then
        used = used - intervals * refill
        anchor = anchor + intervals * interval
        if used <= 0 then
          used = 0
          anchor = now
        end
      end
    end
    local after = used + cost
    out.delay = 0
    if after <= capacity then
      out.allowed = true
      out.reason = OK
      out.remaining = clamp_remaining(capacity - after, capacity)
      out.retry = 0
      if after > 0 then out.reset = anchor + ceil(after / refill) * interval - now else out.reset = 0 end
      if cost == 0 then out.nxt = false else out.nxt = { 0, after, anchor } end
    else
      out.allowed = false
      out.reason = LIMIT
      out.remaining = clamp_remaining(capacity - used, capacity)
      out.retry = anchor + ceil((after - capacity) / refill) * interval - now
      if used > 0 then out.reset = anchor + ceil(used / refill) * interval - now else out.reset = 0 end
      out.nxt = false
    end
  end
end
`;
