/**
 * Lua port of `evaluatePolicy`, `settleDenied` and `decide` (model/decide.ts): the penalty box, costs
 * that can never fit, and several policies decided all-or-nothing. A denial consumes nothing; only the
 * denial memories survive (a logged attempt or a counted call under `countDenied`, the penalty box of
 * `blockMs`), and not even those when the cost exceeds what some policy can ever admit, but the count of a
 * fixed window that counts every call.
 */
export const DECIDE_LUA = `
local function evaluate(c, s, now, cost, max_delay, out)
  local kind = c.kind
  if kind == KIND_METER then return meter(c, s, now, cost, max_delay, out) end
  if kind == KIND_TOKEN_INTERVAL then
    if not token_interval then load_token_interval() end
    return token_interval(c, s, now, cost, max_delay, out)
  end
  if kind == KIND_FIXED_WINDOW then
    if not fixed_window then load_fixed_window() end
    return fixed_window(c, s, now, cost, max_delay, out)
  end
  if kind == KIND_SLIDING_WINDOW then
    if not sliding_window then load_sliding_window() end
    return sliding_window(c, s, now, cost, max_delay, out)
  end
  if not sliding_log then load_sliding_log() end
  return sliding_log(c, s, now, cost, max_delay, out)
end

local function evaluate_policy(c, s, now, cost, max_delay, out)
  local impossible
  if c.kind == KIND_METER then impossible = meter_charge(cost, c.a) > c.b else impossible = cost > c.limit end
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

-- A fixed window with countDenied counts every committed call (model: countsEveryCall).
local function counts_every_call(c)
  return c.kind == KIND_FIXED_WINDOW and c.b == 1
end

local function settle_denied(c, s, now, cost, commit, out)
  local allowed_here = out.allowed
  if allowed_here then report_as_allowed(c, s, now, out) end
  out.nxt = false
  if not commit or cost == 0 or out.reason == BLOCKED then return end
  local every_call = counts_every_call(c)
  if out.reason == EXCEEDS and not every_call then return end
  local nxt = s
  if every_call or (c.kind == KIND_SLIDING_LOG and c.c == 1) then
    if every_call then
      nxt = fixed_window_hit(c, s, now, cost)
    else
      nxt = log_denied_attempt(c, s, now, cost)
    end
    evaluate_policy(c, nxt, now, cost, 0, out)
    if allowed_here then
      -- Did not deny, but the counted attempt may leave no room: its wait for the same cost counts.
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
end

local function decide(policies, states, n, now, cost, commit, max_delay, outs)
  local allowed = true
  local impossible = false
  for i = 1, n do
    local out = outs[i]
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
