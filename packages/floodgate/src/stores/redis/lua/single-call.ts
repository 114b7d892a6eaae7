import { METER_CALL_WIRE } from '../wire.js';

const A = METER_CALL_WIRE.argv;

/** What a single-call script puts in the frame `singleCallScript` gives every one of them. */
export interface SingleCallParts {
  /** The first line: what the script decides. */
  readonly header: string;
  /** The script's first locals (`local … = math.…, string.…`). */
  readonly locals: string;
  /** Reads or declares the policy's numbers, and guards its flags (`argv` in scope). */
  readonly policy: string;
  /** Declares what the call's numbers set beside `cost` and `writes` (the meter: `charge`, `slack`). */
  readonly declarations: string;
  /**
   * Baked scripts only: what the call with no ARGV (a `limit` of cost 1 on Redis's clock, no delay) sets
   * beside `now`, `redis_now`, `seconds`, `micros`, e.g. `cost, writes = 1, true`. Undefined for a shared script.
   */
  readonly commonest: string | undefined;
  /** Once `cost` and `writes` are read from ARGV: the rest of the call's numbers. */
  readonly call: string;
  /** The decision (`value`, `now`, `cost`, `writes` and the policy's numbers in scope): sets `allowed`, `next_value`, `reset`. */
  readonly transition: string;
  /** The state read as the reply gives it (a Lua expression). */
  readonly replied: string;
}

/**
 * The frame of every single-call script (lua/meter-fast.ts, lua/window-fast.ts): the key's value, the
 * clock (the call's `nowUs`, else Redis TIME), the call's numbers from ARGV (the slots of
 * `METER_CALL_WIRE.argv` and `WINDOW_CALL_WIRE.argv`, which share their first four), the kind's
 * transition, the write with its expiry and the one-string reply `<verdict> <seconds> <µs> <state>`.
 */
export function singleCallScript(p: SingleCallParts): string {
  const commonest =
    p.commonest === undefined
      ? ''
      : `if argv[1] == nil then
  local t1 = redis.call('TIME')
  seconds, micros = t1[1], t1[2]
  now = seconds * 1000000 + micros
  redis_now = now
  ${p.commonest}
else
`;
  return `${p.header}
${p.locals}
local argv = ARGV
local value = redis.call('GET', KEYS[1])
${p.policy}
-- The time decided at, as the reply gives it: Redis TIME's seconds and µs, or 0 and the call's µs.
local seconds, micros = '0', argv[${A.nowUs}]
local redis_now, now, cost, writes, extra = nil, 0, 0, false, 0
${p.declarations}${commonest}if micros == '' then
  local t1 = redis.call('TIME')
  seconds, micros = t1[1], t1[2]
  redis_now = seconds * 1000000 + micros
  now = redis_now
else
  now = tonumber(micros)
  extra = tonumber(argv[${A.graceMs}]) * 1000
end
cost = tonumber(argv[${A.cost}])
writes = argv[${A.op}] == '1' and cost ~= 0
${p.call}${p.commonest === undefined ? '' : 'end\n'}${p.transition}
if next_value then
  if redis_now == nil then
    local t2 = redis.call('TIME')
    redis_now = tonumber(t2[1]) * 1000000 + tonumber(t2[2])
  end
  if reset < 1 then reset = 1 end
  -- Whole numbers as strings made with format('%d'): redis.call turns a number into a string with
  -- %.17g, which costs Redis more and prints a whole number the same.
  redis.call('SET', KEYS[1], next_value, 'PXAT', format('%d', ceil((redis_now + reset + extra) / 1000)))
end
-- One string, not a table: Redis reads a table reply's fields one by one (err, ok, double…), which
-- costs it more than the rest of the reply.
if allowed then return '1 ' .. seconds .. ' ' .. micros .. ' ' .. ${p.replied} end
return '0 ' .. seconds .. ' ' .. micros .. ' ' .. ${p.replied}
`;
}
