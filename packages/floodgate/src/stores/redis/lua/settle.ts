import { MAX_DEBT_US } from '../../../model/settle.js';

/**
 * Lua port of `settlePolicy` (model/settle.ts): the state of one policy after a call admitted at
 * `at_us` µs with an estimate of `estimate` is settled at `actual`; nil when nothing changes. Below the
 * estimate it is the refund of the difference (`refund_policy`); above it, a meter's debt: the TAT moves
 * by the difference of the two charges, from now if the key owes nothing, to at most `MAX_DEBT_US` owed.
 * Only meters settle (the client refuses the other kinds first); another kind raises. States are 1-based
 * here: the model's `s[i]` is `s[i + 1]`.
 */
export const SETTLE_LUA: string = `
local function settle_policy(c, s, now, at_us, estimate, actual)
  if actual < estimate then return refund_policy(c, s, now, at_us, estimate, estimate - actual) end
  if not (actual > estimate) then return nil end
  if c.kind ~= KIND_METER then error('floodgate: only a meter policy settles a debt, not kind ' .. tostring(c.kind)) end
  local extra = meter_charge(actual, c.a) - meter_charge(estimate, c.a)
  if extra <= 0 then return nil end
  local blocked, tat = 0, now
  if s then blocked, tat = s[1], s[2] end
  local base = max(tat, now)
  local cap = now + ${MAX_DEBT_US}
  local nxt = base + extra
  if nxt > cap then nxt = max(base, cap) end
  return { blocked, nxt }
end
`;
