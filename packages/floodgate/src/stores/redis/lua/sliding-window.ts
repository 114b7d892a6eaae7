import { admittedLua, deniedLua } from './outcome.js';
import { type LuaPort, lazyEvaluate } from './port.js';

/**
 * Lua port of `evaluateSlidingWindow` and its `estimateAt` / `retryAfter` (model/sliding-window.ts):
 * the current clock-aligned window's count plus the previous one's weighted by overlap. State
 * `{blockedUntil, windowStart, count, previousCount}`. The weighted estimate is a double: it is computed
 * in exactly the model's order of operations so both give the same bits.
 */
/** The model's `estimateAt` (its order of operations, so that both give the same bits), over Lua expressions. */
export function estimateLua(previous: string, count: string, window: string, elapsed: string): string {
  return `(${previous} * (${window} - ${elapsed})) / ${window} + ${count}`;
}

/**
 * The model's `countsAt`: the clock-aligned window `now` falls in (`start`), its count and the previous
 * window's (`count`, `previous`), from the state `s` (a table, or nil); `window` in scope. Shared by the
 * port and the single-call script (lua/window-fast.ts).
 */
export function countsAtLua(indent: string): string {
  return [
    'local start = now - fmod(now, window)',
    'local count, previous = 0, 0',
    'if s then',
    '  if s[2] == start then',
    '    count = s[3]',
    '    previous = s[4]',
    '  elseif s[2] == start - window then',
    '    previous = s[3]',
    '  end',
    'end',
  ].join(`\n${indent}`);
}

const SOURCE = `
local function load_sliding_window()
  local function estimate_at(previous, count, window, elapsed)
    return ${estimateLua('previous', 'count', 'window', 'elapsed')}
  end

  local function sliding_retry(previous, count, window, elapsed, limit, cost)
    if count + cost <= limit then
      local at = ceil(window - ((limit - count - cost) * window) / previous)
      local k = 0
      while k < 4 and at < window and estimate_at(previous, count, window, at) + cost > limit do
        at = at + 1
        k = k + 1
      end
      if at < window then return at - elapsed end
    end
    local at = 0
    if count > 0 then at = max(0, ceil(window - ((limit - cost) * window) / count)) end
    local k = 0
    while k < 4 and at < window and estimate_at(count, 0, window, at) + cost > limit do
      at = at + 1
      k = k + 1
    end
    return window - elapsed + at
  end

  sliding_window = function(c, s, now, cost, _, out)
    local limit, window = c.limit, c.a
    ${countsAtLua('    ')}
    local elapsed = now - start
    local estimate = estimate_at(previous, count, window, elapsed)
    out.delay = 0
    local reset = 0
    if count > 0 then reset = start + 2 * window - now elseif previous > 0 then reset = start + window - now end
    if estimate + cost <= limit then
      local after = count + cost
      ${admittedLua('limit - (estimate + cost)', 'limit')}
      if after > 0 then out.reset = start + 2 * window - now else out.reset = reset end
      if cost == 0 then out.nxt = false else out.nxt = { 0, start, after, previous } end
    else
      ${deniedLua(
        'limit - estimate',
        'limit',
        'sliding_retry(previous, count, window, elapsed, limit, cost)',
        'out.reset = reset',
      )}
    end
  end
end
`;

export const SLIDING_WINDOW_PORT: LuaPort = {
  source: SOURCE,
  locals: ['sliding_window'],
  evaluate: lazyEvaluate('sliding_window'),
  refund: `
local window = c.a
local lease_window = leased_at - fmod(leased_at, window)
if s[2] == lease_window then return { s[1], lease_window, max(0, s[3] - unused), s[4] } end
if s[2] == lease_window + window then return { s[1], s[2], s[3], max(0, s[4] - unused) } end
return nil`,
};
