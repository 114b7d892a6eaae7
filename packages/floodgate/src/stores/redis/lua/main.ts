import { DECIDE_WIRE } from '../wire.js';

const A = DECIDE_WIRE.argv;
const P = DECIDE_WIRE.policy;
const R = DECIDE_WIRE.run;

/**
 * The script's entry: decides a batch of calls in order, each one exactly as the model's `decide` would
 * (a batch is simply several decisions run back to back inside one atomic script call).
 *
 * The layout's numbers are `DECIDE_WIRE` (wire.ts).
 *
 * KEYS: for each call, the storage keys of its policies in policy order
 *   (`<prefix>:{<encoded key>}:<policy name>`; one call's keys share a hash tag, so one cluster slot).
 * ARGV:
 *   [1]          grace, ms added to the expiry of keys written on the caller's clock (see below)
 *   [2]          P, the number of distinct policies in the batch
 *   [3 … 2+6P]   per policy: kind, limit, blockUs, a, b, c (the compiled policy of model/compile.ts)
 *   then runs of calls that differ only by key: m (calls in the run), op (0 check, 1 limit, 2 reset,
 *                  3 cancel, 4 refund, 5 settle), nowUs ('' = Redis TIME), cost, maxDelayUs, n (policies per call),
 *                  then n policy numbers (1-based, into the list above). Under load most calls of a batch
 *                  form one run, so a decision costs Redis little more than its keys. A cancel is a run of
 *                  one call and carries n more numbers: the reservation's TATs (model/reservation.ts). A
 *                  refund is a run of one whose cost is the unused units, and carries two more numbers:
 *                  the lease's time (µs) and cost (model/refund.ts). A settle is laid out as a refund:
 *                  its cost is the actual cost, its two numbers the call's time (µs) and estimate
 *                  (model/settle.ts).
 * Clock: a call's `nowUs` when given, else Redis `TIME` as integer µs (seconds·10⁶ + µs), read once per
 *   script call, so app servers with skewed clocks agree.
 * Returns a flat array of integers; per call: a reset, a refund or a settle gives `1`; a cancel gives 1 when every policy gave
 *   the whole cost back, else 0; a decision gives `allowed` (1/0), the µs it was decided at, then
 *   per policy `reason` (0 ok, 1 limit, 2 blocked, 3 exceeds-capacity), `remaining`, `retryAfterUs`
 *   (-1 = never), `resetAfterUs`, `delayUs`. Every one of these is a whole number, so Redis's integer
 *   replies (which truncate) carry them exactly. A call whose GET or SET failed (a key of another type
 *   under its name, `OOM`) gives instead `-1` and the error's message, and the next call goes on: one
 *   bad key fails its own call, not the batch. (A call that failed on a SET may have written the
 *   states of its policies before that one.)
 * Writes: each changed state with `SET … PXAT`, the expiry being the moment the key is untouched again
 *   (Redis time + `resetAfterUs`, rounded up to whole ms; PXAT rather than PX, which Redis would rewrite
 *   into PXAT for its replicas at a cost per write); a reset deletes the keys. No other key is touched.
 *   Expiry runs on Redis's clock: when a call brings its own clock, which may run slower than Redis's
 *   (a paused or manual clock), the key gets `grace` ms more, since a state that outlives its untouched
 *   time decides exactly like an absent one, while one that expires early would hand out a fresh quota.
 */
export const MAIN_LUA = `
local argv = ARGV
local grace = tonumber(argv[${A.graceMs}])
local policies = {}
local p = tonumber(argv[${A.policies}])
local at = ${A.first}
for i = 1, p do
  policies[i] = {
    kind = tonumber(argv[at + ${P.kind}]), limit = tonumber(argv[at + ${P.limit}]), block = tonumber(argv[at + ${P.blockUs}]),
    a = tonumber(argv[at + ${P.a}]), b = tonumber(argv[at + ${P.b}]), c = tonumber(argv[at + ${P.c}]),
  }
  -- A kind without a port, or a variant its kind does not declare, raises before anything is decided.
  check_flags(policies[i])
  at = at + ${P.size}
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
-- A command's reply, or nil and the error's message (redis.pcall: the script goes on).
local function try(...)
  local v = redis.pcall(...)
  if type(v) == 'table' and v.err then return nil, v.err end
  return v
end
-- One call's failure, in its place in the reply.
local function fail(err)
  reply[r + 1] = -1
  reply[r + 2] = err
  r = r + 2
end
local outs, chosen, states = {}, {}, {}
local k = 0
-- Reads the states of the call's n policies (KEYS after k); nil, or the error's message.
local function read_states(n)
  for j = 1, n do
    local value, err = try('GET', KEYS[k + j])
    if err then return err end
    states[j] = decode(chosen[j].kind, value)
  end
  return nil
end
-- Writes the states the call changed, each expiring when it is untouched again (rounded up to whole ms):
-- the written state's own reset (out.expire, set by settle_denied for a denial's state, whose report may
-- end earlier), else the admission's, which is its new state's.
local function write_states(n, extra)
  for j = 1, n do
    local out = outs[j]
    if out.nxt then
      local reset = out.expire or out.reset
      if reset < 1 then reset = 1 end
      local _, err = try('SET', KEYS[k + j], encode(chosen[j].kind, out.nxt), 'PXAT', ceil((redis_now() + reset + extra) / 1000))
      if err then return err end
    end
  end
  return nil
end
local total = #argv
while at <= total do
  local m = tonumber(argv[at + ${R.calls}])
  local op = argv[at + ${R.op}]
  local n = tonumber(argv[at + ${R.n}])
  for j = 1, n do
    chosen[j] = policies[tonumber(argv[at + ${R.n} + j])]
    if outs[j] == nil then
      outs[j] = { allowed = true, reason = OK, remaining = 0, retry = 0, reset = 0, delay = 0, nxt = false, expire = false }
    end
  end
  if op == '2' then
    for _ = 1, m do
      for j = 1, n do redis.call('DEL', KEYS[k + j]) end
      r = r + 1
      reply[r] = 1
      k = k + n
    end
  elseif op == '3' then
    local now, extra = redis_now(), 0
    if argv[at + ${R.nowUs}] ~= '' then
      now, extra = tonumber(argv[at + ${R.nowUs}]), grace * 1000
    end
    local tats, all = {}, false
    for j = 1, n do tats[j] = tonumber(argv[at + ${R.n} + n + j]) end
    local err = read_states(n)
    if not err then
      all = cancel_reservation(chosen, states, n, now, tonumber(argv[at + ${R.cost}]), tats, outs)
      err = write_states(n, extra)
    end
    if err then
      fail(err)
    else
      r = r + 1
      if all then reply[r] = 1 else reply[r] = 0 end
    end
    k = k + n
    at = at + n
  elseif op == '4' or op == '5' then
    local now, extra = redis_now(), 0
    if argv[at + ${R.nowUs}] ~= '' then
      now, extra = tonumber(argv[at + ${R.nowUs}]), grace * 1000
    end
    -- A refund's unused units, or a settle's actual cost.
    local amount = tonumber(argv[at + ${R.cost}])
    local leased_at, leased = tonumber(argv[at + ${R.size} + n]), tonumber(argv[at + ${R.size} + 1 + n])
    local err, value = nil, nil
    for j = 1, n do
      local c = chosen[j]
      value, err = try('GET', KEYS[k + j])
      if err then break end
      local nxt
      if op == '4' then
        nxt = refund_policy(c, decode(c.kind, value), now, leased_at, leased, amount)
      else
        -- A debt may land on a key that holds nothing any more: decode gives nil, the debt counts from now.
        nxt = settle_policy(c, decode(c.kind, value), now, leased_at, leased, amount)
      end
      if nxt then
        -- The expiry of the new state: when it is untouched again, as a cost-0 evaluation reports it.
        local out = outs[j]
        evaluate_policy(c, nxt, now, 0, 0, out)
        local reset = out.reset
        if reset < 1 then reset = 1 end
        value, err = try('SET', KEYS[k + j], encode(c.kind, nxt), 'PXAT', ceil((redis_now() + reset + extra) / 1000))
        if err then break end
      end
    end
    if err then
      fail(err)
    else
      r = r + 1
      reply[r] = 1
    end
    k = k + n
    at = at + 2
  else
    local now
    local extra = 0
    if argv[at + ${R.nowUs}] == '' then
      now = redis_now()
    else
      now = tonumber(argv[at + ${R.nowUs}])
      extra = grace * 1000
    end
    local cost = tonumber(argv[at + ${R.cost}])
    local max_delay = tonumber(argv[at + ${R.maxDelayUs}])
    local commit = op == '1'
    for _ = 1, m do
      local allowed = false
      local err = read_states(n)
      if not err then
        allowed = decide(chosen, states, n, now, cost, commit, max_delay, outs)
        if commit then err = write_states(n, extra) end
      end
      if err then
        fail(err)
      else
        r = r + 1
        if allowed then reply[r] = 1 else reply[r] = 0 end
        r = r + 1
        reply[r] = now
        for j = 1, n do
          local out = outs[j]
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
    end
  end
  at = at + ${R.size} + n
end
return reply
`;
