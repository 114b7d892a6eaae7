import { KIND_LIST, kindConstant } from '../../../model/kinds.js';
import { dispatch, inKindOrder, type LuaPorts } from './port.js';

/**
 * Lua port of `evaluatePolicy`, `settleDenied` and `decide` (model/decide.ts): the dispatch to each
 * kind's port (a kind number without one raises), the penalty box, costs that can never fit, and several
 * policies decided all-or-nothing. A denial consumes nothing; only the denial memories survive (a call
 * counted under `countDenied`, the penalty box of `blockMs`), and not even those when the cost exceeds
 * what some policy can ever admit, but the count of a policy that counts every call.
 */
export function decideLua(ports: LuaPorts): string {
  const charged = KIND_LIST.filter((k) => k.capacity === 'charge').map((k) => `c.kind == ${kindConstant(k)}`);
  // A kind that counts denied calls counts the call here (model: `logDenied` in its descriptor).
  const counting = inKindOrder(ports)
    .flatMap(({ constant, port }) =>
      port.logDenied === undefined
        ? []
        : [
            `  if c.kind == ${constant} and ${port.logDenied.when} then`,
            `    nxt = ${port.logDenied.state}`,
            '    counted = true',
            '  end',
          ],
    )
    .join('\n');
  // Kinds that count every committed call, a cost some policy can never admit too (model: 'every-call').
  const everyCall = inKindOrder(ports).flatMap(({ constant, port }) =>
    port.logDenied?.everyCall === true ? [`(c.kind == ${constant} and ${port.logDenied.when})`] : [],
  );
  return `
local function evaluate(c, s, now, cost, max_delay, out)
  local kind = c.kind
${dispatch(ports, 'kind', (port) => port.evaluate)}
end

local function evaluate_policy(c, s, now, cost, max_delay, out)
  local impossible
  if ${charged.join(' or ') || 'false'} then impossible = meter_charge(cost, c.a) > c.b else impossible = cost > c.limit end
  if impossible then
    -- Can never fit: report the key as it stands and change nothing.
    evaluate(c, s, now, 0, 0, out)
    out.allowed = false
    out.reason = EXCEEDS
    out.retry = INF
    out.delay = 0
    out.nxt = false
    return
  end
  local blocked_until = 0
  if s then blocked_until = s[1] end
  if blocked_until > now then
    -- The later of the block's end and the policy's own wait for this cost; the key as it stands.
    evaluate(c, s, now, cost, max_delay, out)
    local own = 0
    if not out.allowed then own = out.retry end
    evaluate(c, s, now, 0, 0, out)
    local wait = max(blocked_until - now, own)
    out.allowed = false
    out.reason = BLOCKED
    out.remaining = 0
    out.retry = wait
    out.reset = max(out.reset, wait)
    out.delay = 0
    out.nxt = false
    return
  end
  evaluate(c, s, now, cost, max_delay, out)
end

local function report_as_allowed(c, s, now, out)
  evaluate_policy(c, s, now, 0, 0, out)
  out.allowed = true
  out.reason = OK
  out.retry = 0
  out.delay = 0
end

-- A policy that counts every committed call (model: countsDenied(c) == 'every-call').
local function counts_every_call(c)
  return ${everyCall.join(' or ') || 'false'}
end

-- µs until the state s is untouched: its own reset, as a cost-0 evaluation reports it (scratch: probe).
local probe = nil
local function untouched_after(c, s, now)
  if probe == nil then probe = { allowed = true, reason = OK, remaining = 0, retry = 0, reset = 0, delay = 0, nxt = false } end
  evaluate_policy(c, s, now, 0, 0, probe)
  return probe.reset
end

local function settle_denied(c, s, now, cost, commit, out)
  local allowed_here = out.allowed
  if allowed_here then report_as_allowed(c, s, now, out) end
  out.nxt = false
  if not commit or cost == 0 or out.reason == BLOCKED then return end
  if out.reason == EXCEEDS and not counts_every_call(c) then return end
  local nxt = s
  local counted = false
${counting}
  if counted then
    evaluate_policy(c, nxt, now, cost, 0, out)
    if allowed_here then
      -- Did not deny, but the logged attempt may leave no room: its wait for the same cost counts.
      local wait = 0
      if not out.allowed then wait = out.retry end
      report_as_allowed(c, nxt, now, out)
      out.retry = wait
      out.reset = max(out.reset, wait)
    end
    out.nxt = nxt
  end
  if c.block > 0 and out.reason == LIMIT then
    local blocked = {}
    if nxt == nil then
      for i = 1, empty_length(c.kind) do blocked[i] = 0 end
    else
      for i = 1, #nxt do blocked[i] = nxt[i] end
    end
    blocked[1] = now + c.block
    out.nxt = blocked
    out.remaining = 0
    -- The retry passes both the block and the policy's own wait for this cost.
    out.retry = max(c.block, out.retry)
    out.reset = max(out.reset, out.retry)
  end
  -- The key expires with the state written, never with this denial's report, which may end earlier.
  if out.nxt then out.expire = untouched_after(c, out.nxt, now) end
end

local function decide(policies, states, n, now, cost, commit, max_delay, outs)
  local allowed = true
  local impossible = false
  for i = 1, n do
    local out = outs[i]
    out.expire = false
    evaluate_policy(policies[i], states[i], now, cost, max_delay, out)
    if not out.allowed then
      allowed = false
      if out.reason == EXCEEDS then impossible = true end
    end
  end
  if not allowed then
    -- A cost one policy can never admit changes nothing under any policy, but a count of every call.
    local keep = commit and not impossible
    for i = 1, n do
      settle_denied(policies[i], states[i], now, cost, keep or (commit and counts_every_call(policies[i])), outs[i])
    end
  elseif not commit then
    for i = 1, n do outs[i].nxt = false end
  end
  return allowed
end
`;
}
