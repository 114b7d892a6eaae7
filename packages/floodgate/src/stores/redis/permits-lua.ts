import { createHash } from 'node:crypto';

/**
 * The permit scripts: a port of the permit model (floodgate's src/permits/model.ts), one script per
 * operation. All of one key's state is in one Redis Cluster slot (the keys share their `{…}` hash tag):
 *
 * - KEYS[1] `<base>:l`: sorted set, member = lease id, score = expiry in µs (a lease is live while now < expiry);
 * - KEYS[2] `<base>:c`: hash, lease id → cost;
 * - KEYS[3] `<base>:f`: the last fence;
 * - KEYS[4] `<base>:q`: sorted set, the waiters: member = waiter id (the lease id it is granted), score = ticket;
 * - KEYS[5] `<base>:x`: sorted set, the same waiters by the µs their place expires;
 * - KEYS[6] `<base>:w`: hash, waiter id → cost;
 * - KEYS[7] `<base>:n`: the channel a wake is published on (model: Wake), in the same slot: the reply's
 *   `wake` ticket, with PUBLISH, or SPUBLISH (sharded pub/sub, Redis ≥ 7) when the last ARGV says so.
 *
 * Clock: ARGV[1] is the caller's time in µs, or '' for Redis `TIME` (then every client agrees whatever
 * its own clock says). Numbers are written with `%.17g` (`tostring` keeps only 14 digits; an epoch µs has 16).
 * Expiry: every write sets all three keys to expire once the clock passed both the last lease expiry and
 * the fence, plus ARGV grace ms, so an idle key cleans itself and a later fence still exceeds every earlier one.
 */
const PRELUDE = `
local format, ceil, max = string.format, math.ceil, math.max
local function num(x) return format('%.17g', x) end
local function clock(arg)
  local now = tonumber(arg)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- model: sweepLeases (leases, then waiters); true when it dropped any. In chunks: unpack is bounded by the Lua stack.
local function sweep(now)
  local swept = false
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', num(now))
  local n = #expired
  if n > 0 then
    swept = true
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now))
    for i = 1, n, 1000 do
      redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + 999, n)))
    end
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', num(now))
  n = #gone
  if n > 0 then
    swept = true
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', num(now))
    for i = 1, n, 1000 do
      local last = math.min(i + 999, n)
      redis.call('ZREM', KEYS[4], unpack(gone, i, last))
      redis.call('HDEL', KEYS[6], unpack(gone, i, last))
    end
  end
  return swept
end
-- model: costAhead. The cost queued ahead of id (all of it when id is not queued), no further than cap.
local function cost_ahead(id, cap)
  local sum, from = 0, 0
  while true do
    local ids = redis.call('ZRANGE', KEYS[4], from, from + 99)
    if #ids == 0 then return sum end
    local costs = redis.call('HMGET', KEYS[6], unpack(ids))
    for j = 1, #ids do
      if ids[j] == id or sum > cap then return sum end
      sum = sum + tonumber(costs[j])
    end
    from = from + 100
  end
end
local function in_flight()
  local sum = 0
  for _, cost in ipairs(redis.call('HVALS', KEYS[2])) do sum = sum + tonumber(cost) end
  return sum
end
local function last_expiry()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then return tonumber(last[2]) end
  return 0
end
-- model: resetAfterUs
local function reset_after(now)
  local last = last_expiry()
  if last == 0 then return 0 end
  return last - now
end
-- model: fittingTicket. The last ticket of the longest head of the queue that fits beside the leases.
local function fitting_ticket(limit)
  local sum, ticket, from = in_flight(), 0, 0
  while true do
    local queued = redis.call('ZRANGE', KEYS[4], from, from + 99, 'WITHSCORES')
    if #queued == 0 then return ticket end
    local ids = {}
    for j = 1, #queued, 2 do ids[#ids + 1] = queued[j] end
    local costs = redis.call('HMGET', KEYS[6], unpack(ids))
    for j = 1, #ids do
      sum = sum + tonumber(costs[j])
      if sum > limit then return ticket end
      ticket = tonumber(queued[2 * j])
    end
    from = from + 100
  end
end
-- model: wakeOf. Publishes the ticket on the key's channel when there is one to tell.
local function wake(limit, freed, publish)
  if not freed or redis.call('ZCARD', KEYS[4]) == 0 then return 0 end
  local ticket = fitting_ticket(limit)
  if ticket > 0 then redis.call(publish, KEYS[7], num(ticket)) end
  return ticket
end
-- Keeps the lease keys until the clock passed the last expiry and the fence, the queue keys until
-- the last waiter's place expired (plus grace ms).
local function keep(now, grace)
  local place = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
  if place[2] then
    local qms = ceil((tonumber(place[2]) - now) / 1000)
    if qms < 0 then qms = 0 end
    qms = qms + grace
    redis.call('PEXPIRE', KEYS[4], qms)
    redis.call('PEXPIRE', KEYS[5], qms)
    redis.call('PEXPIRE', KEYS[6], qms)
  else
    redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
  end
  local fence = tonumber(redis.call('GET', KEYS[3]) or '0')
  local last = last_expiry()
  if last == 0 then redis.call('DEL', KEYS[1], KEYS[2]) end
  if fence == 0 then return end
  local ms = ceil((max(last, fence) - now) / 1000)
  if ms < 0 then ms = 0 end
  ms = ms + grace
  if last > 0 then
    redis.call('PEXPIRE', KEYS[1], ms)
    redis.call('PEXPIRE', KEYS[2], ms)
  end
  redis.call('PEXPIRE', KEYS[3], ms)
end
-- model: grant. A lease for id, and the next fence.
local function grant(now, lease, id, cost)
  local expires = now + lease
  redis.call('ZADD', KEYS[1], num(expires), id)
  redis.call('HSET', KEYS[2], id, num(cost))
  local fence = max(tonumber(redis.call('GET', KEYS[3]) or '0') + 1, now)
  redis.call('SET', KEYS[3], num(fence))
  return fence, expires
end
`;

/**
 * Acquire (model: acquirePermit). ARGV: nowUs|'', leaseUs, limit, cost, leaseId, graceMs, publish.
 * Returns { granted 1|0, inFlight, fence, expiresAtUs, nowUs, retryAfterUs, resetAfterUs, wake }.
 */
export const PERMIT_ACQUIRE_SCRIPT: string = `-- floodgate: acquire a concurrency permit
${PRELUDE}
local now = clock(ARGV[1])
local lease, limit, cost, id, grace = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local publish = ARGV[7]
local freed = sweep(now)
local flight = in_flight()
-- A call that does not wait goes behind every waiter: it passes only if they all fit as well.
local queued = cost_ahead(false, limit - flight - cost)
if flight + queued + cost <= limit then
  local told = wake(limit, freed, publish)
  local fence, expires = grant(now, lease, id, cost)
  keep(now, grace)
  return { 1, flight + cost, fence, expires, now, 0, reset_after(now), told }
end
-- Leases in the order they run out: the first expiry after which the rest leaves room for this cost.
local retry = 0
local left = flight
local leases = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #leases, 2 do
  left = left - tonumber(redis.call('HGET', KEYS[2], leases[i]) or '0')
  if left + queued + cost <= limit then
    retry = tonumber(leases[i + 1]) - now
    break
  end
end
local told = wake(limit, freed, publish)
keep(now, grace)
return { 0, flight, 0, 0, now, retry, reset_after(now), told }
`;

/**
 * Wait (model: waitPermit). ARGV: nowUs|'', leaseUs, limit, cost, waiterId, graceMs, maxQueue, waiterUs,
 * publish. Returns { granted 1|0, inFlight, fence, expiresAtUs, nowUs, retryAfterUs, resetAfterUs, wake,
 * queued 1|0, full 1|0, ticket, ahead }.
 */
export const PERMIT_WAIT_SCRIPT: string = `-- floodgate: wait for a concurrency permit in the key's queue
${PRELUDE}
local now = clock(ARGV[1])
local lease, limit, cost, id, grace = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local max_queue, waiter, publish = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local freed = sweep(now)
local flight = in_flight()
local mine = redis.call('ZSCORE', KEYS[4], id)
local ahead = cost_ahead(id, limit - flight - cost)
local reset = reset_after(now)
if flight + ahead + cost <= limit then
  local ticket = 0
  if mine then
    ticket = tonumber(mine)
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
  end
  local fence, expires = grant(now, lease, id, cost)
  local told = wake(limit, freed, publish)
  keep(now, grace)
  return { 1, flight + cost, fence, expires, now, 0, reset_after(now), told, 0, 0, ticket, ahead }
end
local ticket
if mine then
  ticket = tonumber(mine)
  redis.call('ZADD', KEYS[5], 'XX', num(now + waiter), id)
elseif redis.call('ZCARD', KEYS[4]) >= max_queue then
  local told = wake(limit, freed, publish)
  keep(now, grace)
  return { 0, flight, 0, 0, now, 0, reset, told, 0, 1, 0, ahead }
else
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  ticket = 1
  if last[2] then ticket = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[4], num(ticket), id)
  redis.call('ZADD', KEYS[5], num(now + waiter), id)
  redis.call('HSET', KEYS[6], id, num(cost))
end
local told = wake(limit, freed, publish)
keep(now, grace)
return { 0, flight, 0, 0, now, 0, reset, told, 1, 0, ticket, ahead }
`;

/** Leave (model: leaveQueue). ARGV: nowUs|'', limit, waiterId, graceMs, publish. Returns { left 1|0, nowUs, wake }. */
export const PERMIT_LEAVE_SCRIPT: string = `-- floodgate: leave a key's queue of waiters
${PRELUDE}
local now = clock(ARGV[1])
local limit, id, grace, publish = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local swept = sweep(now)
local left = redis.call('ZREM', KEYS[4], id)
if left == 1 then
  redis.call('ZREM', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
end
local told = wake(limit, swept or left == 1, publish)
keep(now, grace)
return { left, now, told }
`;

/**
 * Refresh (model: refreshPermit). ARGV: nowUs|'', leaseUs, leaseId, graceMs, limit, publish.
 * Returns { refreshed 1|0, expiresAtUs, nowUs, wake }.
 */
export const PERMIT_REFRESH_SCRIPT: string = `-- floodgate: refresh a concurrency permit
${PRELUDE}
local now = clock(ARGV[1])
local lease, id, grace, limit, publish = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local told = wake(limit, sweep(now), publish)
local score = redis.call('ZSCORE', KEYS[1], id)
if not score then
  keep(now, grace)
  return { 0, 0, now, told }
end
local expires = max(tonumber(score), now + lease)
redis.call('ZADD', KEYS[1], 'XX', num(expires), id)
keep(now, grace)
return { 1, expires, now, told }
`;

/**
 * Release (model: releasePermit). ARGV: nowUs|'', leaseId, graceMs, limit, publish.
 * Returns { released 1|0, nowUs, wake }.
 */
export const PERMIT_RELEASE_SCRIPT: string = `-- floodgate: release a concurrency permit
${PRELUDE}
local now = clock(ARGV[1])
local id, grace, limit, publish = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local swept = sweep(now)
local released = redis.call('ZREM', KEYS[1], id)
if released == 1 then redis.call('HDEL', KEYS[2], id) end
local told = wake(limit, swept or released == 1, publish)
keep(now, grace)
return { released, now, told }
`;

function sha1(source: string): string {
  return createHash('sha1').update(source).digest('hex');
}

/** The permit scripts and their SHA-1s, by operation. */
export const PERMIT_SCRIPTS = {
  acquire: { source: PERMIT_ACQUIRE_SCRIPT, sha: sha1(PERMIT_ACQUIRE_SCRIPT) },
  refresh: { source: PERMIT_REFRESH_SCRIPT, sha: sha1(PERMIT_REFRESH_SCRIPT) },
  release: { source: PERMIT_RELEASE_SCRIPT, sha: sha1(PERMIT_RELEASE_SCRIPT) },
  wait: { source: PERMIT_WAIT_SCRIPT, sha: sha1(PERMIT_WAIT_SCRIPT) },
  leave: { source: PERMIT_LEAVE_SCRIPT, sha: sha1(PERMIT_LEAVE_SCRIPT) },
} as const;
