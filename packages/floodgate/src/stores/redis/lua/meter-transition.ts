/**
 * The meter's transition, written once for both meter scripts (lua/meter-fast.ts, one call alone, and
 * lua/meter-batch.ts, many calls): the model's `decide` for one call under one meter policy
 * (`evaluatePolicy` + `evaluateMeter` + `settleDenied`, model/decide.ts and model/meter.ts), reduced to
 * what the server must know: the verdict, the next state and that state's expiry. The report
 * (remaining, retry-after, reset, delay) is the client's: it runs the model on the state this script read
 * and replied, and checks the verdict against its own (see redis-store.ts, `settleMeters`).
 *
 * In scope: `value` (the stored string, or false/nil), `now` (µs), `charge` (the cost's charge in µs,
 * `meterCharge`), `tau`, `slack` (the call's max delay, 0 in queue mode), `block` (µs), `writes`
 * (a committed call of nonzero cost), `format`, `byte`, `match`. Declares `allowed`, `next_value` (the
 * string to store, nil when nothing changes) and `reset` (µs until the written state is untouched: its
 * TAT, or the later of its block's end and its TAT; never a denial's report, which can end earlier).
 * `tatString(expr)` gives the statements that set `next_value` to a new TAT, which the batch script
 * caches.
 */
export function meterTransition(tatString: (expr: string) => string): string {
  return `
-- The state: a bare TAT, or '!<blockedUntil> <tat>' (lua/prelude.ts); anything else reads as untouched.
local blocked, tat = 0, nil
if value then
  -- A TAT first: a state in a penalty box starts with '!', which tonumber never takes.
  tat = tonumber(value)
  if tat == nil and byte(value, 1) == 33 then
    local b, s = match(value, '^!(%S+) (%S+)$')
    if b then
      blocked = tonumber(b)
      tat = tonumber(s)
      if blocked == nil or tat == nil then blocked, tat = 0, nil end
    end
  end
end
local base = tat or now
if now > base then base = now end
-- Neither a cost beyond the tolerance (exceeds-capacity) nor a penalty box in force (blocked).
local open = charge <= tau and blocked <= now
local owed = base + charge - now
local allowed = open and owed - tau <= slack
local next_value, reset = nil, 0
if writes and open then
  if allowed then
    ${tatString('base + charge')}
    reset = owed
  elseif block > 0 then
    -- settleDenied: the penalty box keeps the state as it stood, blocked until now + blockUs.
    next_value = '!' .. format('%d', now + block) .. ' ' .. format('%d', tat or 0)
    reset = base - now
    if block > reset then reset = block end
  end
end
`;
}
