/**
 * List code shared by the two kinds whose state is a list of `(time, amount)` pairs oldest first: the
 * sliding log (events and their costs) and the bucketed window (bucket starts and their counts). State
 * `{blockedUntil, t1, amount1, t2, amount2, …}`: with Lua's 1-based arrays a pair's time sits at an even
 * index and its amount right after it. Sums run newest first, as in the model, so fractional amounts round
 * identically. Defined on first use, by either kind's loader (`if not list_first then load_list() end`).
 */
export const LIST_LUA: string = `
local function load_list()
  -- Index of the first pair whose time is after cutoff (pairs start at 2).
  list_first = function(s, cutoff)
    if not s then return 2 end
    local i, n = 2, #s
    while i <= n and s[i] <= cutoff do i = i + 2 end
    return i
  end

  -- The amounts from the pair at first on, summed newest first.
  list_sum = function(s, first)
    local sum = 0
    if not s then return 0 end
    for i = #s, first + 1, -2 do sum = sum + s[i] end
    return sum
  end

  -- A new list: the pairs from first on, then (at, amount), merged into the newest pair when it is at the same time.
  list_append = function(s, first, at, amount)
    local nxt = { 0 }
    local m = 1
    if s then
      for i = first, #s do
        m = m + 1
        nxt[m] = s[i]
      end
    end
    if m > 1 and nxt[m - 1] == at then
      nxt[m] = nxt[m] + amount
    else
      nxt[m + 1] = at
      nxt[m + 2] = amount
    end
    return nxt
  end

  -- From the newest pair back, summed newest first: µs until the first pair that no longer fits beside
  -- the newer ones for cost has left the window (the oldest live pair's when all of them fit).
  list_wait = function(s, first, cost, limit, window, now)
    local n = #s
    local newer = 0
    for i = n - 1, first, -2 do
      newer = newer + s[i + 1]
      if newer + cost > limit then return s[i] + window - now end
    end
    return s[n - 1] + window - now
  end

  -- A lease given back (model/refund.ts): the pair at time at loses unused, and goes once it is spent;
  -- nil when no pair is at that time.
  list_take = function(s, at, unused)
    local n = #s
    for i = 2, n, 2 do
      if s[i] == at then
        local left = s[i + 1] - unused
        local nxt = {}
        for j = 1, n do nxt[j] = s[j] end
        if left > 0 then
          nxt[i + 1] = left
        else
          table.remove(nxt, i)
          table.remove(nxt, i)
        end
        return nxt
      end
    end
    return nil
  end
end
`;

/** The locals {@link LIST_LUA} assigns, declared in the prelude. */
export const LIST_LOCALS = ['list_first', 'list_sum', 'list_append', 'list_wait', 'list_take'] as const;
