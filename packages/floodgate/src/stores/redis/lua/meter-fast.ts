/**
 * A second, minimal script for the commonest call: one call under a single meter policy (GCRA, token
 * bucket with continuous refill, leaky bucket in either mode), sent when no other call waits to share a
 * script call. Redis runs a script's whole chunk on every call, so the full script's definitions cost
 * more than this decision itself; this one defines nothing. It ports, for that one policy,
 * `evaluatePolicy` + `evaluateMeter` + `decide` + `settleDenied` (model/decide.ts, model/meter.ts) and
 * returns exactly what the full script returns for the same call.
 *
 * KEYS[1]  the storage key
 * ARGV     [1] nowUs ('' = Redis TIME), [2] grace ms (as in lua/main.ts), [3] op (0 check, 1 limit),
 *          [4] cost, [5] maxDelayUs, [6] limit, [7] blockUs, [8] T (a), [9] τ (b), [10] 1 = queue mode (c)
 * Clock    the call's nowUs when given, else Redis TIME (integer µs); expiry is always on Redis's clock.
 * Returns  { allowed (1/0), nowUs decided at, reason, remaining, retryAfterUs (-1 = never), resetAfterUs,
 *          delayUs }: the full script's reply for one call
 * Writes   the new TAT as a plain integer (`SET … PXAT` at the untouched time, rounded up), or, once
 *          denied under `blockMs`, `!<blockedUntil> <tat>`; the state layout of lua/prelude.ts.
 */
export const METER_FAST_SCRIPT = `-- floodgate: one call under one meter policy (see floodgate/model meter.ts, decide.ts).
local floor, ceil = math.floor, math.ceil
local argv = ARGV
local value = redis.call('GET', KEYS[1])
local blocked, tat = 0, nil
if value then
  if string.byte(value, 1) == 33 then
    local b, t = string.match(value, '^!(%S+) (%S+)$')
    if b then
      blocked = tonumber(b)
      tat = tonumber(t)
      if blocked == nil or tat == nil then blocked, tat = 0, nil end
    end
  else
    tat = tonumber(value)
  end
end
local has_state = tat ~= nil
local redis_now = nil
local now
local extra = 0
if argv[1] == '' then
  local t = redis.call('TIME')
  redis_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = redis_now
else
  now = tonumber(argv[1])
  extra = tonumber(argv[2]) * 1000
end
local commit = argv[3] == '1'
local cost = tonumber(argv[4])
local max_delay = tonumber(argv[5])
local limit = tonumber(argv[6])
local block = tonumber(argv[7])
local t = tonumber(argv[8])
local tau = tonumber(argv[9])
local queue = argv[10] == '1'
if not has_state then tat = now end

-- clampRemaining (model/types.ts)
local function clamp(x)
  local f = floor(x)
  if f < 0 then return 0 end
  if f > limit then return floor(limit) end
  return f
end

local base = tat
if now > base then base = now end
local owed_before = base - now
local charge = cost * t
charge = ceil(charge - charge * 1e-15)
local next_value = nil
local reset
local reply
if charge > tau then
  -- exceeds-capacity: the key as it stands (a cost-0 evaluation), nothing changes.
  reply = { 0, now, 3, clamp((tau - owed_before) / t), -1, owed_before, 0 }
else
  local new_tat = base + charge
  local owed = new_tat - now
  local slack = max_delay
  if queue then slack = 0 end
  if blocked > now then
    -- The later of the block's end and the meter's own wait for this cost.
    local wait = blocked - now
    if owed - tau > slack and owed - tau - slack > wait then wait = owed - tau - slack end
    reset = owed_before
    if wait > reset then reset = wait end
    reply = { 0, now, 2, 0, wait, reset, 0 }
  elseif owed - tau <= slack then
    local delay = 0
    if queue then delay = owed_before elseif owed > tau then delay = owed - tau end
    reset = owed
    reply = { 1, now, 0, clamp((tau - owed) / t), 0, owed, delay }
    if commit and cost ~= 0 then next_value = new_tat end
  else
    reset = owed_before
    reply = { 0, now, 1, clamp((tau - owed_before) / t), owed - tau - slack, owed_before, 0 }
    if commit and block > 0 and cost ~= 0 then
      -- settleDenied: the penalty box keeps the state as it stood, blocked until now + blockMs.
      local kept = 0
      if has_state then kept = tat end
      next_value = '!' .. string.format('%d', now + block) .. ' ' .. string.format('%d', kept)
      -- The retry passes both the block and the meter's own wait for this cost.
      local wait = reply[5]
      if block > wait then wait = block end
      if wait > reset then reset = wait end
      reply[4] = 0
      reply[5] = wait
      reply[6] = reset
    end
  end
end
if next_value then
  if redis_now == nil then
    local t2 = redis.call('TIME')
    redis_now = tonumber(t2[1]) * 1000000 + tonumber(t2[2])
  end
  if reset < 1 then reset = 1 end
  -- Whole numbers as strings made with format('%d'): redis.call turns a number into a string with
  -- %.17g, which costs Redis more (see lua/meter-batch.ts) and prints a whole number the same.
  if type(next_value) == 'number' and next_value == floor(next_value) and next_value < 9007199254740992 then
    next_value = string.format('%d', next_value)
  end
  redis.call('SET', KEYS[1], next_value, 'PXAT', string.format('%d', ceil((redis_now + reset + extra) / 1000)))
end
return reply
`;
