import { createHash } from 'node:crypto';

/**
 * The permit scripts: a port of the permit model (floodgate's src/permits/model.ts), one script per
 * operation. All of one key's state is in one Redis Cluster slot (the keys share their `{…}` hash tag):
 *
 * - KEYS[1] `<base>:l`: sorted set, member = lease id, score = expiry in µs (a lease is live while now < expiry);
 * - KEYS[2] `<base>:c`: hash, lease id → cost;
 * - KEYS[3] `<base>:f`: the last fence.
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
-- model: sweepLeases. HDEL in chunks: unpack is bounded by the Lua stack.
local function sweep(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', num(now))
  local n = #expired
  if n == 0 then return end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now))
  for i = 1, n, 1000 do
    redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + 999, n)))
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
-- Keeps the three keys until the clock passed the last expiry and the fence (plus grace ms).
local function keep(now, grace)
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
`;

/**
 * Acquire (model: acquirePermit). ARGV: nowUs|'', leaseUs, limit, cost, leaseId, graceMs.
 * Returns { granted 1|0, inFlight, fence, expiresAtUs, nowUs, retryAfterUs, resetAfterUs }.
 */
export const PERMIT_ACQUIRE_SCRIPT: string = `-- floodgate: acquire a concurrency permit
${PRELUDE}
local now = clock(ARGV[1])
local lease, limit, cost, id, grace = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
sweep(now)
local flight = in_flight()
if flight + cost <= limit then
  local expires = now + lease
  redis.call('ZADD', KEYS[1], num(expires), id)
  redis.call('HSET', KEYS[2], id, num(cost))
  local fence = max(tonumber(redis.call('GET', KEYS[3]) or '0') + 1, now)
  redis.call('SET', KEYS[3], num(fence))
  keep(now, grace)
  return { 1, flight + cost, fence, expires, now, 0, last_expiry() - now }
end
-- Leases in the order they run out: the first expiry after which the rest leaves room for this cost.
local retry = 0
local left = flight
local leases = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #leases, 2 do
  left = left - tonumber(redis.call('HGET', KEYS[2], leases[i]) or '0')
  if left + cost <= limit then
    retry = tonumber(leases[i + 1]) - now
    break
  end
end
keep(now, grace)
return { 0, flight, 0, 0, now, retry, last_expiry() - now }
`;

/** Refresh (model: refreshPermit). ARGV: nowUs|'', leaseUs, leaseId, graceMs. Returns { refreshed 1|0, expiresAtUs, nowUs }. */
export const PERMIT_REFRESH_SCRIPT: string = `-- floodgate: refresh a concurrency permit
${PRELUDE}
local now = clock(ARGV[1])
local lease, id, grace = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
sweep(now)
local score = redis.call('ZSCORE', KEYS[1], id)
if not score then
  keep(now, grace)
  return { 0, 0, now }
end
local expires = max(tonumber(score), now + lease)
redis.call('ZADD', KEYS[1], 'XX', num(expires), id)
keep(now, grace)
return { 1, expires, now }
`;

/** Release (model: releasePermit). ARGV: nowUs|'', leaseId, graceMs. Returns { released 1|0, nowUs }. */
export const PERMIT_RELEASE_SCRIPT: string = `-- floodgate: release a concurrency permit
${PRELUDE}
local now = clock(ARGV[1])
local id, grace = ARGV[2], tonumber(ARGV[3])
sweep(now)
local released = redis.call('ZREM', KEYS[1], id)
if released == 1 then redis.call('HDEL', KEYS[2], id) end
keep(now, grace)
return { released, now }
`;

function sha1(source: string): string {
  return createHash('sha1').update(source).digest('hex');
}

/** The permit scripts and their SHA-1s, by operation. */
export const PERMIT_SCRIPTS = {
  acquire: { source: PERMIT_ACQUIRE_SCRIPT, sha: sha1(PERMIT_ACQUIRE_SCRIPT) },
  refresh: { source: PERMIT_REFRESH_SCRIPT, sha: sha1(PERMIT_REFRESH_SCRIPT) },
  release: { source: PERMIT_RELEASE_SCRIPT, sha: sha1(PERMIT_RELEASE_SCRIPT) },
} as const;
