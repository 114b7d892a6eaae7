/**
 * Lua port of `cancelReservation` (model/reservation.ts): gives a booked call's charge back under each
 * meter policy while the call is not yet due and is still the last one booked on it (its TAT is the one
 * the call set); windows and logs keep it counted.
 *
 * `cancel_reservation(cs, states, n, now, cost, tats, outs)`: `cs` the compiled policies, `states` their
 * states (or nil), `tats` the TATs the reservation set, `now` integer µs. Fills `outs[j].nxt` (the state
 * to store, false to leave it) and `outs[j].reset` (µs until untouched, for the expiry). Returns true when
 * every policy gave the whole cost back.
 */
export const RESERVATION_LUA: string = `
local function cancel_reservation(cs, states, n, now, cost, tats, outs)
  local due = -INF
  for j = 1, n do
    local c = cs[j]
    if c.kind == KIND_METER then
      local charge = meter_charge(cost, c.a)
      local at = tats[j] - c.b
      if c.c == 1 then at = tats[j] - charge end
      if at > due then due = at end
    end
  end
  local all = true
  for j = 1, n do
    local c, s, out = cs[j], states[j], outs[j]
    out.nxt = false
    out.expire = false
    out.reset = 0
    local tat = tats[j]
    if c.kind ~= KIND_METER or now >= due or s == nil or s[2] ~= tat then
      all = false
    else
      local blocked = s[1]
      local back = tat - meter_charge(cost, c.a)
      out.nxt = { blocked, back }
      out.reset = max(0, back - now, blocked - now)
    end
  end
  return all
end
`;
