import { admittedLua, deniedLua } from './outcome.js';
import { type LuaPort, lazyEvaluate } from './port.js';

/**
 * Lua port of `evaluateSlidingLog`, `logDeniedAttempt` and their helpers (model/sliding-log.ts): the log
 * of charged events, `(time, cost)` pairs oldest first, at most `ceil(limit) + 1` of them (`coalesce`), on
 * the list code it shares with the bucketed window (lua/list.ts). State `{blockedUntil, t1, cost1, t2, cost2, …}`:
 * with Lua's 1-based arrays an entry's time sits at an even index and its cost right after it. Sums run
 * newest first, as in the model, so fractional costs round identically.
 */
const SOURCE = `
local function load_sliding_log()
  if not list_first then load_list() end
  local first_live, log_append = list_first, list_append

  -- model coalesce(): merges adjacent entries in place until at most ceil(limit) + 1 are left; each time
  -- the pair that moves the least cost-time forward (oldest on ties) becomes (later time, summed cost).
  local function log_coalesce(log, limit)
    local max_length = 2 * (ceil(limit) + 1) + 1
    local n = #log
    while n > max_length do
      local at, least = 2, INF
      for i = 2, n - 3, 2 do
        local moved = log[i + 1] * (log[i + 2] - log[i])
        if moved < least then
          least = moved
          at = i
        end
      end
      log[at + 2] = max(log[at], log[at + 2])
      log[at + 3] = log[at + 1] + log[at + 3]
      for j = at, n - 2 do log[j] = log[j + 2] end
      log[n - 1] = nil
      log[n] = nil
      n = n - 2
    end
    return log
  end

  -- From the newest event back, summed in the evaluation's order: the first event that no longer fits
  -- beside the newer ones must leave the window.
  local function sum_wait(s, first, sum, cost, limit, window, now)
    if sum + cost <= limit or not s then return 0 end
    return list_wait(s, first, cost, limit, window, now)
  end

  -- µs until the newest event stops mattering: it has left the window and the gap after it has passed.
  local function until_untouched(last, hold, now)
    if last >= 0 and last + hold > now then return last + hold - now end
    return 0
  end

  sliding_log = function(c, s, now, cost, _, out)
    local limit, window, min_gap = c.limit, c.a, c.b
    local first = first_live(s, now - window)
    local n = 0
    if s then n = #s end
    local sum = list_sum(s, first)
    -- The gap is measured from the newest event even when it has left the window (gap longer than window).
    local last = -1
    if n > 1 then last = s[n - 1] end
    local hold = max(min_gap, window)
    local gap_wait = 0
    if min_gap > 0 and cost > 0 and last >= 0 and now - last < min_gap then gap_wait = last + min_gap - now end
    out.delay = 0
    if sum + cost <= limit and gap_wait == 0 then
      ${admittedLua('limit - (sum + cost)', 'limit')}
      if cost > 0 then out.reset = hold else out.reset = until_untouched(last, hold, now) end
      if cost == 0 then out.nxt = false else out.nxt = log_coalesce(log_append(s, first, now, cost), limit) end
    else
      ${deniedLua(
        'limit - sum',
        'limit',
        'max(gap_wait, sum_wait(s, first, sum, cost, limit, window, now))',
        'out.reset = until_untouched(last, hold, now)',
      )}
    end
  end

  -- The state after a denied attempt is logged (countDenied): the attempt is appended, then only the
  -- shortest run of newest events whose costs exceed the limit is kept, then the log is coalesced.
  log_denied_attempt = function(c, s, now, cost)
    local appended = log_append(s, first_live(s, now - c.a), now, cost)
    local n = #appended
    local sum = 0
    -- keep_from is the model's (0-based) index; appended[keep_from + 1] is its entry here.
    local keep_from = n
    while keep_from > 1 and sum <= c.limit do
      keep_from = keep_from - 2
      sum = sum + appended[keep_from + 2]
    end
    if keep_from <= 1 then return log_coalesce(appended, c.limit) end
    local kept = { appended[1] }
    for i = keep_from + 1, n do kept[#kept + 1] = appended[i] end
    return log_coalesce(kept, c.limit)
  end
end
`;

export const SLIDING_LOG_PORT: LuaPort = {
  source: SOURCE,
  locals: ['sliding_log', 'log_denied_attempt'],
  evaluate: lazyEvaluate('sliding_log'),
  refund: `
if not list_take then load_list() end
return list_take(s, leased_at, unused)`,
  logDenied: { when: 'c.c == 1', state: 'log_denied_attempt(c, s, now, cost)' },
};
