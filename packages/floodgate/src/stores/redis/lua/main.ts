/**
 * The script's entry: decides a batch of calls in order, each one exactly as the model's `decide` would
 * (a batch is simply several decisions run back to back inside one atomic script call).
 *
 * KEYS: for each call, the storage keys of its policies in policy order
 *   (`<prefix>:{<encoded key>}:<policy name>`; one call's keys share a hash tag, so one cluster slot).
 * ARGV:
 *   [1]          grace, ms added to the expiry of keys written on the caller's clock (see below)
 *   [2]          P, the number of distinct policies in the batch
 *   [3 … 2+6P]   per policy: kind, limit, blockUs, a, b, c (the compiled policy of model/compile.ts)
 *   then per call: op (0 check, 1 limit, 2 reset), nowUs ('' = Redis TIME), cost, maxDelayUs,
 *                  n (its number of policies), then n policy numbers (1-based, into the list above)
 * Clock: a call's `nowUs` when given, else Redis `TIME` as integer µs (seconds·10⁶ + µs), read once per
 *   script call, so app servers with skewed clocks agree.
 * Returns a flat array of integers; per call: a reset gives `1`; a decision gives `allowed` (1/0), then
 *   per policy `reason` (0 ok, 1 limit, 2 blocked, 3 exceeds-capacity), `remaining`, `retryAfterUs`
 *   (-1 = never), `resetAfterUs`, `delayUs`. Every one of these is a whole number, so Redis's integer
 *   replies (which truncate) carry them exactly.
 * Writes: each changed state with `SET … PX`, the expiry being the moment the key is untouched again
 *   (`resetAfterUs`, rounded up to whole ms); a reset deletes the keys. No other key is touched.
 *   Expiry runs on Redis's clock: when a call brings its own clock, which may run slower than Redis's
 *   (a paused or manual clock), the key gets `grace` ms more, since a state that outlives its untouched
 *   time decides exactly like an absent one, while one that expires early would hand out a fresh quota.
 */
export const MAIN_LUA = `
local argv = ARGV
local grace = tonumber(argv[1])
local policies = {}
local p = tonumber(argv[2])
local at = 3
for i = 1, p do
  policies[i] = {
    kind = tonumber(argv[at]), limit = tonumber(argv[at + 1]), block = tonumber(argv[at + 2]),
    a = tonumber(argv[at + 3]), b = tonumber(argv[at + 4]), c = tonumber(argv[at + 5]),
  }
  at = at + 6
end

local server_now = nil
local function redis_now()
  if server_now == nil then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_now
end

local reply, r = {}, 0
local outs, chosen, states = {}, {}, {}
local k = 0
local total = #argv
while at <= total do
  local op = argv[at]
  local n = tonumber(argv[at + 4])
  if op == '2' then
    for j = 1, n do redis.call('DEL', KEYS[k + j]) end
    r = r + 1
    reply[r] = 1
  else
    local now
    local extra = 0
    if argv[at + 1] == '' then
      now = redis_now()
    else
      now = tonumber(argv[at + 1])
      extra = grace
    end
    local cost = tonumber(argv[at + 2])
    local max_delay = tonumber(argv[at + 3])
    local commit = op == '1'
    for j = 1, n do
      local c = policies[tonumber(argv[at + 4 + j])]
      chosen[j] = c
      states[j] = decode(c.kind, redis.call('GET', KEYS[k + j]))
      if outs[j] == nil then outs[j] = {} end
    end
    local allowed = decide(chosen, states, n, now, cost, commit, max_delay, outs)
    r = r + 1
    if allowed then reply[r] = 1 else reply[r] = 0 end
    for j = 1, n do
      local out = outs[j]
      if commit and out.nxt ~= nil then
        local ttl = ceil(out.reset / 1000)
        if ttl < 1 then ttl = 1 end
        ttl = ttl + extra
        redis.call('SET', KEYS[k + j], encode(chosen[j].kind, out.nxt), 'PX', ttl)
      end
      local retry = out.retry
      if retry == INF then retry = -1 end
      reply[r + 1] = out.reason
      reply[r + 2] = out.remaining
      reply[r + 3] = retry
      reply[r + 4] = out.reset
      reply[r + 5] = out.delay
      r = r + 5
    end
  end
  k = k + n
  at = at + 5 + n
end
return reply
`;
