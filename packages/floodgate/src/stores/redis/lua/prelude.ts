import { emptyStateLength, KIND_LIST, kindConstant } from '../../../model/kinds.js';
import { LIST_LOCALS } from './list.js';
import { dispatch, inKindOrder, type LuaPorts } from './port.js';

/**
 * Lua shared by every algorithm: locals, the reason codes, the kinds' numbers, `clampRemaining` and the
 * state codec, generated from the kinds' descriptors (model/kinds.ts) and the ports' lazy locals.
 *
 * Numbers: Lua 5.1 numbers are IEEE doubles like JavaScript's, so the same operations in the same order
 * give the same bits. Two traps are avoided on purpose: `tostring` and `..` print only 14 significant
 * digits (an epoch µs has 16), so numbers are written with `%.17g`, which round-trips every double; and
 * `a % b` is `a - floor(a/b)*b` in Lua 5.1, so the model's `%` is ported as `math.fmod`.
 *
 * Cost: Redis runs the whole script chunk on every call, so it avoids table constructors and defines the
 * less common algorithms lazily.
 *
 * State codec (the model's `State`, index 0 = end of a penalty block, stored as one string per key):
 * `<tag>[!<blockedUntil> ]<field> <field> …` with each kind's tag (its descriptor's `tag`: '' for the meter,
 * 'i' token bucket interval, 'f' fixed window, …). A meter key that is not blocked is one
 * plain integer (its TAT), which Redis keeps as an integer object: as small as a bare `SET key <n>`.
 * A value that does not parse for the policy's algorithm (the name was reused for another one) reads as
 * an untouched key, and the next write replaces it.
 */
/**
 * Reads a state's numbers from `body` (its value after the kind's tag) into the table `s`, counting them
 * in `n` (both in scope, `n` = 0): a leading `!` starts with `blockedUntil`, else it is 0; each word is read
 * with `tonumber`, and `onBad` runs at the first that is not a number. Shared by `decode` and the window
 * scripts (lua/window-fast.ts); `indent` starts each line after the first.
 */
export function stateWordsLua(onBad: string, indent: string): string {
  return [
    'if byte(body, 1) == 33 then',
    '  body = sub(body, 2)',
    'else',
    '  n = 1',
    '  s[1] = 0',
    'end',
    "for word in gmatch(body, '%S+') do",
    '  local x = tonumber(word)',
    `  if x == nil then ${onBad} end`,
    '  n = n + 1',
    '  s[n] = x',
    'end',
  ].join(`\n${indent}`);
}

export function preludeLua(ports: LuaPorts): string {
  const pairs = KIND_LIST.filter((k) => 'pairs' in k.layout).map((k) => `kind == ${kindConstant(k)}`);
  return `
local floor, ceil, max, fmod = math.floor, math.ceil, math.max, math.fmod
local tonumber, format, sub, byte, gmatch, concat = tonumber, string.format, string.sub, string.byte, string.gmatch, table.concat
local INF = math.huge
local OK, LIMIT, BLOCKED, EXCEEDS = 0, 1, 2, 3
local ${KIND_LIST.map(kindConstant).join(', ')} = ${KIND_LIST.map((k) => k.id).join(', ')}
-- The state tag of each kind is its character in TAGS (the meter has none).
local TAGS = '${KIND_LIST.map((k) => k.tag || '-').join('')}'
-- The algorithms other than the meter are defined on first use: Redis runs this whole chunk on every
-- call, and each function defined is an allocation, so a call pays only for what it uses.
local ${[...LIST_LOCALS, ...inKindOrder(ports).flatMap(({ port }) => port.locals)].join(', ')}

-- Length of a state with no history (model: emptyStateLength); a list of pairs starts at 1 and varies.
local function empty_length(kind)
${dispatch(ports, 'kind', (_, k) => `return ${emptyStateLength(k)}`)}
end

-- model/types.ts clampRemaining
local function clamp_remaining(value, limit)
  local floored = floor(value)
  if floored < 0 then return 0 end
  if floored > limit then return floor(limit) end
  return floored
end

-- Whole numbers print as integers (faster than %.17g, and every µs time and TAT is one); others with
-- %.17g, which round-trips every double.
local function num(x)
  if x == floor(x) and x < 9007199254740992 and x > -9007199254740992 then return format('%d', x) end
  return format('%.17g', x)
end

-- Reads a stored value into the model's state layout (Lua index = model index + 1); nil when absent or
-- written by another algorithm.
local function decode(kind, value)
  if not value then return nil end
  local body = value
  if kind == KIND_METER then
    if byte(value, 1) ~= 33 then
      local tat = tonumber(value)
      if tat == nil then return nil end
      return { 0, tat }
    end
  else
    if byte(value, 1) ~= byte(TAGS, kind) then return nil end
    body = sub(value, 2)
  end
  local s, n = {}, 0
  ${stateWordsLua('return nil', '  ')}
  if ${pairs.join(' or ')} then
    if n % 2 ~= 1 then return nil end
  elseif n ~= empty_length(kind) then
    return nil
  end
  return s
end

-- A value to SET. A meter that is not blocked is its TAT as a Lua number, which Redis itself prints
-- with all its digits (a whole number below 2^53 prints as an integer).
local function encode(kind, s)
  if kind == KIND_METER and s[1] == 0 then return s[2] end
  local n = #s
  local parts = {}
  local first = 2
  if s[1] ~= 0 then first = 1 end
  for i = first, n do parts[#parts + 1] = num(s[i]) end
  local value = concat(parts, ' ')
  if s[1] ~= 0 then value = '!' .. value end
  if kind == KIND_METER then return value end
  return sub(TAGS, kind, kind) .. value
end
`;
}
