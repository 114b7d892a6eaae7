import type { LuaPort } from './port.js';

/**
 * Lua port of `evaluateMeter` (model/meter.ts): GCRA, the continuous token bucket and the leaky bucket
 * (meter and queue mode), one TAT per key, everything in whole µs.
 *
 * `meter(c, s, now, cost, max_delay, out)`: `c` is the compiled policy (`limit`, `a` = T, `b` = τ,
 * `c` = 1 for queue mode), `s` the state `{blockedUntil, tat}` or nil, `now` integer µs from the clock
 * the caller chose (Redis TIME or the request's). Fills `out` like the model's `Evaluation`
 * (`retry`, `reset`, `delay` in µs; `nxt` = the state to store, false when nothing changes).
 */
const SOURCE = `
local function meter_charge(cost, t)
  local x = cost * t
  return ceil(x - x * 1e-15)
end

local function meter(c, s, now, cost, max_delay, out)
  local t, tau = c.a, c.b
  local tat = now
  if s then tat = s[2] end
  local base = max(tat, now)
  local new_tat = base + meter_charge(cost, t)
  local owed = new_tat - now
  local owed_before = base - now
  local queue = c.c == 1
  local slack = max_delay
  if queue then slack = 0 end
  if owed - tau <= slack then
    out.allowed = true
    out.reason = OK
    out.remaining = clamp_remaining((tau - owed) / t, c.limit)
    out.retry = 0
    out.reset = owed
    if queue then
      out.delay = owed_before
    elseif owed > tau then
      out.delay = owed - tau
    else
      out.delay = 0
    end
    if cost == 0 then out.nxt = false else out.nxt = { 0, new_tat } end
  else
    out.allowed = false
    out.reason = LIMIT
    out.remaining = clamp_remaining((tau - owed_before) / t, c.limit)
    out.retry = owed - tau - slack
    out.reset = owed_before
    out.delay = 0
    out.nxt = false
  end
end
`;

export const METER_PORT: LuaPort = {
  source: SOURCE,
  locals: [],
  evaluate: 'return meter(c, s, now, cost, max_delay, out)',
  refund: `
local charged = meter_charge(leased, c.a)
local ahead = leased_at + charged - now
local back = charged - meter_charge(leased - unused, c.a)
if ahead < back then back = ahead end
if back <= 0 then return nil end
return { s[1], s[2] - back }`,
};
