import { dispatch, type LuaPorts } from './port.js';

/**
 * Lua port of `refundPolicy` (model/refund.ts): the state of one policy after `unused` units of a lease
 * (a committed call of cost `leased`, decided at `leased_at` µs) are given back; nil when nothing
 * changes; each kind's branch is its port's `refund`. Same operations in the same order as the model, `%` as
 * `fmod`. States are 1-based here: the
 * model's `s[i]` is `s[i + 1]`.
 */
export function refundLua(ports: LuaPorts): string {
  return `
local function refund_policy(c, s, now, leased_at, leased, unused)
  if s == nil or not (unused > 0) or unused > leased then return nil end
  local kind = c.kind
${dispatch(ports, 'kind', (port) => port.refund)}
end
`;
}
