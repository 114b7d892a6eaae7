import { METER_BATCH_WIRE, WINDOW_BATCH_WIRE } from '../wire.js';
import { meterFlagGuard } from './flags.js';
import { meterTransition } from './meter-transition.js';
import { type WindowKind, windowFlagGuards, windowFunctions, windowLocals, windowTransition } from './window-fast.js';

const A = METER_BATCH_WIRE.argv;
const P = METER_BATCH_WIRE.policy;
const W = WINDOW_BATCH_WIRE.policy;
const R = METER_BATCH_WIRE.run;

/** What differs between the batch scripts of the meter and of the windows: the policies' numbers and the transition. */
interface BatchKind {
  readonly header: string;
  /** The script's first locals. */
  readonly locals: string;
  /** Declares the tables of the policies' numbers. */
  readonly tables: string;
  /** Reads policy `i`'s numbers at `at` into them. */
  readonly policy: string;
  /** After a run's head: the run's policy's numbers as locals, from `p`. */
  readonly run: string;
  /** Once `now` and `cost` are known: what every call of the run shares. */
  readonly perRun: string;
  /** One call's transition (`value`, `now`, `cost`, `writes` in scope): `allowed`, `next_value`, `reset`. */
  readonly transition: string;
  /** After it: what the reply gives for the call's state, when it is not the value read. */
  readonly replied: string;
}

const METER_KIND: BatchKind = {
  header: '-- floodgate: calls under one meter policy each (see floodgate/model meter.ts, decide.ts).',
  locals:
    'local tonumber, ceil, format, byte, match, call = tonumber, math.ceil, string.format, string.byte, string.match, redis.call',
  tables: 'local blocks, ts, taus, queues = {}, {}, {}, {}',
  policy: `  blocks[i] = tonumber(argv[at + ${P.blockUs}])
  ts[i] = tonumber(argv[at + ${P.t}])
  taus[i] = tonumber(argv[at + ${P.tau}])
  local queue = tonumber(argv[at + ${P.queue}])
  ${meterFlagGuard('queue')}
  queues[i] = queue == 1
  at = at + ${P.size}`,
  run: `  local block, tau = blocks[p], taus[p]
  if queues[p] then slack = 0 end`,
  perRun: `  local charge = cost * ts[p]
  charge = ceil(charge - charge * 1e-15)`,
  transition: meterTransition(
    (expr) => `local tat_new = ${expr}
    if tat_new ~= last_tat then
      last_tat = tat_new
      last_tat_s = format('%d', tat_new)
    end
    next_value = last_tat_s`,
  ),
  replied: '',
};

function windowKind(kind: WindowKind): BatchKind {
  const { a, b, c } = windowLocals(kind);
  const numbers = [
    ['limits', 'limit', W.limit],
    ['as', a, W.a],
    ...(c === undefined ? [] : [['cs', c, W.c]]),
    ...(b === undefined ? [] : [['bs', b, W.b]]),
  ] as [string, string, number][];
  return {
    header: `-- floodgate: calls under one ${kind} policy each (see floodgate/model, decide.ts).`,
    locals:
      'local tonumber, ceil, floor, fmod, max, format, byte, sub, match, gmatch, call = tonumber, math.ceil, math.floor, math.fmod, math.max, string.format, string.byte, string.sub, string.match, string.gmatch, redis.call',
    tables: `local ${numbers.map(([table]) => table).join(', ')} = ${numbers.map(() => '{}').join(', ')}
${windowFunctions(kind)}`,
    policy: `${numbers.map(([, local, slot]) => `  local ${local} = tonumber(argv[at + ${slot}])`).join('\n')}
  ${windowFlagGuards(kind)}
${numbers.map(([table, local]) => `  ${table}[i] = ${local}`).join('\n')}
  at = at + ${W.size}`,
    run: `  local ${numbers.map(([, local]) => local).join(', ')} = ${numbers.map(([table]) => `${table}[p]`).join(', ')}`,
    perRun: '',
    transition: windowTransition(kind),
    // The state as the window's transition read it (see lua/window-fast.ts \`readState\`).
    replied: '    if read ~= value then values[k] = read end\n',
  };
}

/** The batch script's links and its states, read once (`at` after the policies, `argv`, `keys` in scope). */
const BATCH_READS = `-- The links, read as the calls reach them: link is the next one, linked the call it starts from (0, which
-- no call is, when there are none).
local link, links_end, linked, target = at, at + tonumber(argv[${A.links}]), 0, 0
if link < links_end then
  local x = tonumber(argv[link], 16)
  target = x % 16384
  linked = (x - target) / 16384
end
at = links_end
local n = #keys
-- The states as MGET read them, which is also the reply: an entry changes only for a call whose key an
-- earlier call in this script call decided on (the state it left), or that failed; the Redis time goes
-- after them, then the calls denied.
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
local denied = n + 1
local redis_now = nil
`;

/**
 * The batch script for the commonest load: many calls in flight, each a `limit` or a `check` under a
 * single meter policy (GCRA, token bucket with continuous refill, leaky bucket in either mode). What Redis
 * spends on such a decision is mostly crossing from Lua into its commands and building the reply, so this
 * script reads every key with one MGET, writes only what changes, and replies with each call's state as
 * it read it: the client runs the model (`decide`, model/decide.ts) on that state and gets the report,
 * and checks it against the verdicts this script gives. The decision is the meter's transition
 * (lua/meter-transition.ts), the same Lua as the single-call script's.
 *
 * KEYS     one storage key per call, in call order (a key may repeat: a later call sees the earlier write)
 * ARGV     `METER_BATCH.argv` (wire.ts): grace ms (as in lua/main.ts), P, the number of distinct policies,
 *          L, the number of links; then per policy blockUs, T (a), τ (b), the queue flag (c, one the meter
 *          declares, or a Redis error); then the links in increasing order, each j × 16384 + k in
 *          hexadecimal, where call j's key next occurs at call k (1-based call numbers, at most 10,000:
 *          one string a link, read by tonumber(s, 16), which is strtoul, where base 10 is strtod, several
 *          times dearer); then runs of calls that differ only by key: m (calls in the run), nowUs ('' =
 *          Redis TIME), op (0 check, 1 limit), cost, maxDelayUs, policy number
 * Repeats  the client, which builds the batch, links each call to the next call on the same key. Once a
 *          linked call j is decided, the state the key then holds goes into call k's slot of the reply,
 *          where MGET put the key's state before the batch: call k reads and replies it like any other
 *          state, and calls on keys that do not repeat cost one comparison (cheaper than a table of the
 *          states written, looked up by key on every call)
 * Clock    a call's nowUs when given, else Redis TIME (integer µs), read once per script call; expiry is
 *          always on Redis's clock
 * Returns  per call the state it was decided on: the stored string, nil when the key held nothing, or `E`
 *          when the key holds another type (the call fails as WRONGTYPE and changes nothing); then the
 *          Redis time the calls without a clock were decided at (0 when none); then the numbers of the
 *          calls denied, in increasing order (under load, few are)
 * Writes   the new TAT as a plain integer (`SET … PXAT` at the untouched time, rounded up), or, once
 *          denied under `blockMs`, `!<blockedUntil> <tat>`; the state layout of lua/prelude.ts. A key that
 *          MGET found empty is written with NX: MGET answers nil for a key of another type too, and NX
 *          refuses to overwrite it, which is how such a key is told apart without another command.
 *
 * The windows' batch scripts (`WINDOW_BATCH_SCRIPTS`) are this script with a window's numbers per policy
 * (`WINDOW_BATCH_WIRE.policy`: limit, window, alignment, denied calls counted) and the window's transition
 * (lua/window-fast.ts), which writes `f…` and `s…` states as lua/prelude.ts encodes them; they reply an
 * uncommon state as the transition read it (`readState`), the common one as stored.
 *
 * Where Redis spends a decision here: docs/stores.md, "Throughput: batching and pipelining".
 */
function batchScript(k: BatchKind): string {
  return `${k.header}
${k.locals}
local argv, keys = ARGV, KEYS
local grace = tonumber(argv[${A.graceMs}]) * 1000
${k.tables}
local at = ${A.first}
for i = 1, tonumber(argv[${A.policies}]) do
${k.policy}
end
${BATCH_READS}-- Numbers handed to redis.call are turned into strings with a float format (%.17g), which costs more
-- than the SET itself; format('%d') is cheaper, and calls decided at the same time on fresh keys write
-- the same TAT and expiry, so the last string of each is kept.
local last_tat, last_tat_s, last_at, last_at_s = nil, nil, nil, nil
local k = 0
local count = #argv
while at <= count do
  local m = tonumber(argv[at + ${R.calls}])
  local given = argv[at + ${R.nowUs}]
  local commit = argv[at + ${R.op}] == '1'
  local cost = tonumber(argv[at + ${R.cost}])
  local slack = tonumber(argv[at + ${R.maxDelayUs}])
  local p = tonumber(argv[at + ${R.policy}])
  at = at + ${R.size}
${k.run}
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
${k.perRun}
  local writes = commit and cost ~= 0
  for _ = 1, m do
    k = k + 1
    local key = keys[k]
    local value = values[k]
    local fresh = not value
${k.transition
  .split('\n')
  .map((line) => (line === '' ? line : `    ${line}`))
  .join('\n')}
${k.replied}    if not allowed then
      denied = denied + 1
      values[denied] = k
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
}

/** The batch script of the meter. */
export const METER_BATCH_SCRIPT = batchScript(METER_KIND);

/** The batch scripts of the windows whose calls take lua/window-fast.ts alone (same layout, a window's numbers per policy). */
export const WINDOW_BATCH_SCRIPTS: Readonly<Record<WindowKind, string>> = {
  'fixed-window': batchScript(windowKind('fixed-window')),
  'sliding-window': batchScript(windowKind('sliding-window')),
  'token-interval': batchScript(windowKind('token-interval')),
};
