/**
 * Lua port of `refundPolicy` (model/refund.ts): the state of one policy after `unused` units of a lease
 * (a committed call of cost `leased`, decided at `leased_at` µs) are given back; nil when nothing
 * changes. Same operations in the same order as the model, `%` as `fmod`. States are 1-based here: the
 * model's `s[i]` is `s[i + 1]`.
 */
export const REFUND_LUA = `
local function refund_policy(c, s, now, leased_at, leased, unused)
  if s == nil or not (unused > 0) or unused > leased then return nil end
  local kind = c.kind
  if kind == KIND_METER then
    local charged = meter_charge(leased, c.a)
    local ahead = leased_at + charged - now
    local back = charged - meter_charge(leased - unused, c.a)
    if ahead < back then back = ahead end
    if back <= 0 then return nil end
    return { s[1], s[2] - back }
  elseif kind == KIND_TOKEN_INTERVAL then
    local used, anchor = s[2], s[3]
    if used <= 0 or anchor > leased_at then return nil end
    if floor((now - anchor) / c.b) ~= floor((leased_at - anchor) / c.b) then return nil end
    return { s[1], max(0, used - unused), anchor }
  elseif kind == KIND_FIXED_WINDOW then
    local window, start, count = c.a, s[2], s[3]
    local lease_window = start
    if c.c == 0 then lease_window = leased_at - fmod(leased_at, window) end
    if start ~= lease_window or leased_at < start or leased_at >= start + window then return nil end
    if now >= start + window or count <= 0 then return nil end
    return { s[1], start, max(0, count - unused) }
  elseif kind == KIND_SLIDING_WINDOW then
    local window = c.a
    local lease_window = leased_at - fmod(leased_at, window)
    if s[2] == lease_window then return { s[1], lease_window, max(0, s[3] - unused), s[4] } end
    if s[2] == lease_window + window then return { s[1], s[2], s[3], max(0, s[4] - unused) } end
    return nil
  elseif kind == KIND_SLIDING_LOG then
    local n = #s
    for i = 2, n, 2 do
      if s[i] == leased_at then
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
    return nil
  end
  return nil
end
`;
