/**
 * The batch script for the commonest load: many calls in flight, each a `limit` or a `check` under a
 * single meter policy (GCRA, token bucket with continuous refill, leaky bucket in either mode). What Redis
 * spends on such a decision is mostly crossing from Lua into its commands and building the reply, so this
 * script reads every key with one MGET, writes only what changes, and replies with each call's state as
 * it read it: the client runs the model (`decide`, model/decide.ts) on that state and gets the evaluation
 * the full script would have sent, while this script applies the same model's verdict and next state
 * (`evaluatePolicy` + `evaluateMeter` + `settleDenied`, model/decide.ts and model/meter.ts, as
 * lua/meter-fast.ts ports them).
 *
 * KEYS     one storage key per call, in call order (a key may repeat: a later call sees the earlier write)
 * ARGV     [1] grace ms (as in lua/main.ts), [2] P, the number of distinct policies, [3] L, the number of
 *          links; then per policy blockUs, T (a), τ (b), 1 = queue mode (c); then the links in increasing
 *          order, each j × 16384 + k in hexadecimal, where call j's key next occurs at call k (1-based
 *          call numbers, at most 10,000: one string a link, read by tonumber(s, 16), which is strtoul,
 *          where base 10 is strtod, several times dearer); then runs of calls
 *          that differ only by key: m (calls in the run), nowUs ('' = Redis TIME), op (0 check, 1 limit),
 *          cost, maxDelayUs, policy number
 * Repeats  the client, which builds the batch, links each call to the next call on the same key. Once a
 *          linked call j is decided, the state the key then holds goes into call k's slot of the reply,
 *          where MGET put the key's state before the batch: call k reads and replies it like any other
 *          state, and calls on keys that do not repeat cost one comparison (a table of the states written,
 *          looked up by key on every call and filled on every write, cost 0.4k instructions a decision
 *          more in bench:redis's load)
 * Clock    a call's nowUs when given, else Redis TIME (integer µs), read once per script call; expiry is
 *          always on Redis's clock
 * Returns  per call the state it was decided on: the stored string, nil when the key held nothing, or `E`
 *          when the key holds another type (the call fails as WRONGTYPE and changes nothing); then last
 *          the Redis time the calls without a clock were decided at (0 when none)
 * Writes   the new TAT as a plain integer (`SET … PXAT` at the untouched time, rounded up), or, once
 *          denied under `blockMs`, `!<blockedUntil> <tat>`; the state layout of lua/prelude.ts. A key that
 *          MGET found empty is written with NX: MGET answers nil for a key of another type too, and NX
 *          refuses to overwrite it, which is how such a key is told apart without another command.
 *
 * Where Redis 7.0 spends a decision here, counted by callgrind (bench/redis-profile.ts, 1,000 in flight,
 * about 140 calls per script call): 21.0k instructions on a key that had expired, 25.6k on a kept one
 * (PERIOD_MS=60000, 85% of keys kept; links instead of the table of writes: from 21.4k and 26.1k). The
 * SET through redis.call is over half: the command 5.7k (its expiry, its rewrite to `PXAT` for
 * propagation, the key's lookup and write), its `OK` turned into a Lua table 1.5–2.2k, its arguments
 * turned into Redis strings 1.5k, the call's own bookkeeping 2–3k. Then the Lua: format('%d') 1.8k a
 * string, tonumber of a stored TAT 0.7k (strtod), strings interned and collected; the key's expiry in
 * serverCron about 1.8k. The TAT and the expiry go to SET as strings: a number handed to redis.call is
 * turned into a string with %.17g, which cost 3.7k, more than format('%d'); and calls decided at the same
 * time on fresh keys share one TAT and one expiry, so the last string of each is kept.
 */
export const METER_BATCH_SCRIPT = `-- floodgate: calls under one meter policy each (see floodgate/model meter.ts, decide.ts).
local tonumber, ceil, format, byte, match, call = tonumber, math.ceil, string.format, string.byte, string.match, redis.call
local argv, keys = ARGV, KEYS
local grace = tonumber(argv[1]) * 1000
local blocks, ts, taus, queues = {}, {}, {}, {}
local at = 4
for i = 1, tonumber(argv[2]) do
  blocks[i] = tonumber(argv[at])
  ts[i] = tonumber(argv[at + 1])
  taus[i] = tonumber(argv[at + 2])
  queues[i] = argv[at + 3] == '1'
  at = at + 4
end
-- The links, read as the calls reach them: link is the next one, linked the call it starts from (0, which
-- no call is, when there are none).
local link, links_end, linked, target = at, at + tonumber(argv[3]), 0, 0
if link < links_end then
  local x = tonumber(argv[link], 16)
  target = x % 16384
  linked = (x - target) / 16384
end
at = links_end
local n = #keys
-- The states as MGET read them, which is also the reply: an entry changes only for a call whose key an
-- earlier call in this script call decided on (the state it left), or that failed; the Redis time goes last.
local values
if n <= 1000 then
  values = call('MGET', unpack(keys))
else
  values = {}
  for i = 1, n, 1000 do
    local last = i + 999
    if last > n then last = n end
    local part = call('MGET', unpack(keys, i, last))
    for j = 1, #part do values[i + j - 1] = part[j] end
  end
end
values[n + 1] = 0
local redis_now = nil
-- Numbers handed to redis.call are turned into strings with a float format (%.17g), which costs more
-- than the SET itself; format('%d') is cheaper, and calls decided at the same time on fresh keys write
-- the same TAT and expiry, so the last string of each is kept.
local last_tat, last_tat_s, last_at, last_at_s = nil, nil, nil, nil
local k = 0
local count = #argv
while at <= count do
  local m = tonumber(argv[at])
  local given = argv[at + 1]
  local commit = argv[at + 2] == '1'
  local cost = tonumber(argv[at + 3])
  local slack = tonumber(argv[at + 4])
  local p = tonumber(argv[at + 5])
  at = at + 6
  local block, t, tau = blocks[p], ts[p], taus[p]
  if queues[p] then slack = 0 end
  local now, extra = 0, 0
  if given == '' then
    if redis_now == nil then
      local time = call('TIME')
      redis_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = redis_now
    values[n + 1] = redis_now
  else
    now = tonumber(given)
    extra = grace
  end
  local charge = cost * t
  charge = ceil(charge - charge * 1e-15)
  local writes = commit and cost ~= 0
  for _ = 1, m do
    k = k + 1
    local key = keys[k]
    local value = values[k]
    local fresh = not value
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
    local kept = tat or 0
    local base = tat or now
    if now > base then base = now end
    local next_value, reset = nil, 0
    if writes and charge <= tau and blocked <= now then
      local owed = base + charge - now
      if owed - tau <= slack then
        local tat_new = base + charge
        if tat_new ~= last_tat then
          last_tat = tat_new
          last_tat_s = format('%d', tat_new)
        end
        next_value = last_tat_s
        reset = owed
      elseif block > 0 then
        -- settleDenied: the penalty box keeps the state as it stood, blocked until now + blockMs; the key
        -- lives until the later of the block's end, the meter's own wait and the meter's drain.
        next_value = '!' .. format('%d', now + block) .. ' ' .. format('%d', kept)
        reset = owed - tau - slack
        if block > reset then reset = block end
        if base - now > reset then reset = base - now end
      end
    end
    if next_value then
      if redis_now == nil then
        local time = call('TIME')
        redis_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
      end
      if reset < 1 then reset = 1 end
      local at_ms = ceil((redis_now + reset + extra) / 1000)
      if at_ms ~= last_at then
        last_at = at_ms
        last_at_s = format('%d', at_ms)
      end
      if fresh and not call('SET', key, next_value, 'PXAT', last_at_s, 'NX') then
        values[k] = 'E'
      else
        if not fresh then call('SET', key, next_value, 'PXAT', last_at_s) end
        value = next_value
      end
    elseif fresh and call('EXISTS', key) == 1 then
      values[k] = 'E'
    end
    if k == linked then
      -- The key's next call decides on the state this one left: what it wrote, else what it read (false
      -- when MGET found no string there and this call wrote none, or failed). Once the links run out,
      -- linked stays at k, which no later call is.
      values[target] = value
      link = link + 1
      if link < links_end then
        local x = tonumber(argv[link], 16)
        target = x % 16384
        linked = (x - target) / 16384
      end
    end
  end
end
return values
`;
