import { MAX_COST } from '../../../model/cost.js';
import { emptyStateLength, KINDS } from '../../../model/kinds.js';
import { WINDOW_CALL_WIRE } from '../wire.js';
import { windowAtLua } from './fixed-window.js';
import { flagGuards } from './flags.js';
import { stateWordsLua } from './prelude.js';
import { singleCallScript } from './single-call.js';
import { countsAtLua, estimateLua } from './sliding-window.js';
import { INTERVALS_UNTIL_LUA, REFILL_LUA } from './token-interval.js';

const A = WINDOW_CALL_WIRE.argv;

/**
 * The kinds with single-call and batch scripts here: the counting windows (fixed, sliding) and the token
 * bucket refilled at intervals (a window of refills), whose states are a few numbers.
 */
export type WindowKind = 'fixed-window' | 'sliding-window' | 'token-interval';

/** A window policy's numbers, written into its own single-call script (`windowFastScript`). */
export interface WindowShape {
  readonly limit: number;
  /** Compiled `a`: the window (µs), or the interval bucket's refill. */
  readonly a: number;
  /** Compiled `b`: the fixed window's denied calls counted (1 = countDenied), the bucket's interval (µs); 0 else. */
  readonly b: number;
  /** Compiled `c`: the fixed window's alignment (0 clock, 1 a key's first request); 0 else. */
  readonly c: number;
}

/** What a kind's single-call script decides with: its numbers and its transition (its state's size is its descriptor's). */
interface WindowPort {
  /** The Lua local its compiled `a` is read into. */
  readonly a: 'window' | 'refill';
  /** The Lua locals its compiled `b` and `c` are read into, when it reads them (flags among them guarded). */
  readonly b?: string;
  readonly c?: string;
  /** Lua defined once before its calls' transitions (functions). */
  readonly functions?: string;
  /**
   * Lua over the state `s` (a table, or nil), `now`, `cost`, `limit` and its numbers: declares `allowed`,
   * and what `written`, `reset` and `denied` name.
   */
  readonly decide: string;
  /** Lua expressions of the state's numbers an admitted call writes, after `blockedUntil` (0). */
  readonly written: readonly string[];
  /** µs from `now` until that state is untouched. */
  readonly reset: string;
  /** Lua that sets `next_value` and `reset` for a committed denial that writes, if the kind has one. */
  readonly denied?: string;
}

/**
 * The verdict and the state written are the model's (`evaluateFixedWindow`, `evaluateSlidingWindow`,
 * `evaluateTokenInterval`) under `decide` (model/decide.ts) for a policy without a penalty box: not over
 * the limit (exceeds-capacity), not blocked (a box a policy of the same name left), and within the limit
 * after the call. A denial
 * changes nothing, but a fixed window's that counts denied calls: `settleDenied` counts a committed denial
 * of cost > 0 that is not blocked, or that is over the limit (counted even in a box), as
 * `countFixedWindowHit` does (the count plus the cost, at most MAX_COST, a live box kept). The windows,
 * counts and refills are the kinds' Lua ports' own (`windowAtLua`, `countsAtLua`, `estimateLua`,
 * `REFILL_LUA`, `INTERVALS_UNTIL_LUA`).
 */
const PORTS: Record<WindowKind, WindowPort> = {
  'fixed-window': {
    a: 'window',
    b: 'counts',
    c: 'aligned',
    decide: `${windowAtLua('aligned')}
local after = count + cost
local boxed = 0
if s and s[1] > now then boxed = s[1] end
local allowed = cost <= limit and boxed == 0 and after <= limit`,
    written: ['start', 'after'],
    // The model's untouched time: a window with nothing counted (a forged count) is untouched now.
    reset: '(after > 0 and (start + window - now)) or 0',
    denied: `elseif writes and counts == 1 and (boxed == 0 or cost > limit) then
  -- countDenied: the window counts the call, a live box kept; untouched at the later of their ends.
  local counted = after
  if counted > ${MAX_COST} then counted = ${MAX_COST} end
${printed('w1', 'start')}
${printed('w2', 'counted')}
  next_value = 'f' .. w1 .. ' ' .. w2
  reset = 0
  if counted > 0 then reset = start + window - now end
  if boxed > 0 then
${printed('b', 'boxed').replaceAll('\n', '\n  ').replace(/^/, '  ')}
    next_value = 'f!' .. b .. ' ' .. w1 .. ' ' .. w2
    if boxed - now > reset then reset = boxed - now end
  end`,
  },
  'sliding-window': {
    a: 'window',
    decide: `${countsAtLua('')}
local elapsed = now - start
local after = count + cost
local allowed = cost <= limit and not (s and s[1] > now)
  and ${estimateLua('previous', 'count', 'window', 'elapsed')} + cost <= limit`,
    written: ['start', 'after', 'previous'],
    reset: '(after > 0 and (start + 2 * window - now)) or (previous > 0 and (start + window - now)) or 0',
  },
  'token-interval': {
    a: 'refill',
    b: 'interval',
    functions: INTERVALS_UNTIL_LUA,
    decide: `local dust = limit * 1e-12
${REFILL_LUA}
local after = used + cost
local allowed = cost <= limit and not (s and s[1] > now) and after <= limit`,
    written: ['after', 'anchor'],
    reset: 'anchor + intervals_until(after, 0, 0, refill, dust) * interval - now',
  },
};

/** The guards of a window kind's flags (the numbers among `b` and `c` it declares values of), as its port reads them. */
export function windowFlagGuards(kind: WindowKind): string {
  const port = PORTS[kind];
  return flagGuards(KINDS[kind], (param) => (param === 'b' ? port.b : param === 'c' ? port.c : undefined));
}

/** The Lua locals of a window kind's policy numbers, in the order of `WindowShape`'s `limit`, `a`, `b`, `c`. */
export function windowLocals(kind: WindowKind): { a: string; b?: string; c?: string } {
  const { a, b, c } = PORTS[kind];
  return { a, ...(b === undefined ? {} : { b }), ...(c === undefined ? {} : { c }) };
}

/** Lua defined once before a window kind's transitions. */
export function windowFunctions(kind: WindowKind): string {
  return PORTS[kind].functions ?? '';
}

/** A finite number as Lua source: exactly the double the client holds (its shortest round-trip form). */
function literal(n: number): string {
  if (!Number.isFinite(n)) throw new Error(`not a finite number: ${String(n)}`);
  return String(n);
}

/**
 * Reads the stored value into `s` (`value` in scope) as lua/prelude.ts `decode` reads a state of `kind`:
 * `<tag>[!<blockedUntil> ]<number> …`, `fields` numbers after `blockedUntil`; anything else reads as
 * untouched. The commonest value (whole numbers, no box) is matched by one pattern first. Sets `read`, the
 * state as the reply gives it to the client: that common value as it is, any other state printed from
 * what was read (`<tag>!` and every number with `%.17g`: Lua's `tonumber` takes spellings that
 * JavaScript's `Number` does not, and the other way round), `''` for none.
 */
function readState(kind: WindowKind): string {
  const tag = KINDS[kind].tag;
  const fields = emptyStateLength(KINDS[kind]) - 1;
  const captures = Array.from({ length: fields }, (_, i) => `x${i + 1}`);
  const all = Array.from({ length: fields + 1 }, (_, i) => `s[${i + 1}]`);
  return `-- The state, as lua/prelude.ts decodes a ${kind}'s: '${tag}[!<blockedUntil> ]<numbers>'; anything else
-- reads as untouched.
local s, read = nil, ''
if value then
  -- The common value first: whole numbers, which the loop below would read the same.
  local ${captures.join(', ')} = match(value, '^${tag}${captures.map(() => '(%d+)').join(' ')}$')
  if x1 then
    s = { 0, ${captures.map((x) => `tonumber(${x})`).join(', ')} }
    read = value
  elseif byte(value, 1) == ${tag.charCodeAt(0)} then
    local body, n = sub(value, 2), 0
    s = {}
    ${stateWordsLua('n = 0 break', '    ')}
    if n ~= ${fields + 1} then
      s = nil
    else
      read = format('${tag}!${all.map(() => '%.17g').join(' ')}', ${all.join(', ')})
    end
  end
end
`;
}

/** Lua setting `name` to the number `x` as lua/prelude.ts `num` prints it: whole with %d, others with all their digits. */
function printed(name: string, x: string): string {
  return `  local ${name}
  if ${x} == floor(${x}) and ${x} < 9007199254740992 and ${x} > -9007199254740992 then
    ${name} = format('%d', ${x})
  else
    ${name} = format('%.17g', ${x})
  end`;
}

/**
 * A window call's transition, for the single-call script and the batch script (lua/meter-batch.ts): in
 * scope `value` (the stored string, or false/nil), `now`, `cost`, `writes` (a committed call of nonzero
 * cost), `limit`, `window` and, for a fixed window, `aligned` and `counts`, and the locals `floor`,
 * `format`, `fmod`, `byte`, `sub`, `match`, `gmatch`. Declares `allowed`, `next_value` (the string to
 * store, nil when nothing changes), `reset` (µs from `now` until that state is untouched) and `read` (the
 * state read, as the reply gives it: see `readState`).
 */
export function windowTransition(kind: WindowKind): string {
  const port = PORTS[kind];
  const names = port.written.map((_, i) => `w${i + 1}`);
  return `${readState(kind)}${port.decide}
local next_value, reset = nil, 0
if writes and allowed then
  -- The state written, as lua/prelude.ts \`encode\` writes it.
${port.written.map((x, i) => printed(names[i] as string, x)).join('\n')}
  next_value = '${KINDS[kind].tag}' .. ${names.join(" .. ' ' .. ")}
  reset = ${port.reset}
${port.denied === undefined ? '' : `${port.denied}\n`}end
`;
}

/**
 * The single-call script of a counting window (a fixed window, a sliding window), as lua/meter-fast.ts is
 * the meter's: one `limit` or `check` under one such policy without a penalty box (a fixed window that
 * counts denied calls included), sent when no other call waits to share a script call.
 * The full script defines every kind's functions and parses every call's policies on each call, which cost
 * Redis several times this decision; this defines nothing.
 *
 * Two forms, as the meter's: **shared** (`shape` undefined), the policy's numbers in ARGV; **baked**, those
 * numbers in the script's text, and the commonest call (a `limit` of cost 1 on Redis's clock) sends no
 * ARGV at all.
 *
 * KEYS[1]  the storage key
 * ARGV     see `WINDOW_CALL_WIRE.argv` (wire.ts): the clock ('' = Redis TIME), grace ms, op (0 check,
 *          1 limit), cost; the shared form then the limit, the window (µs) and, for a fixed window, its
 *          alignment, which must be one the kind declares (a Redis error otherwise). The baked form takes
 *          the first four or none.
 * Clock    the call's nowUs when given, else Redis TIME (integer µs); expiry is always on Redis's clock.
 * Returns  `WINDOW_CALL_WIRE.reply` (the meter's): `<verdict 1/0> <seconds> <µs> <the state read>`, that
 *          state as `readState` gives it.
 * Writes   an admitted call's state (`f<start> <count>`, `s<start> <count> <previous>`: lua/prelude.ts),
 *          `SET … PXAT` when it is untouched, rounded up; nothing otherwise.
 */
export function windowFastScript(kind: WindowKind, shape?: WindowShape): string {
  const port = PORTS[kind];
  const read = (slot: number, name: string | undefined) =>
    name === undefined ? '' : `\nlocal ${name} = tonumber(argv[${slot}])`;
  const bake = (n: number, name: string | undefined) => (name === undefined ? '' : `\nlocal ${name} = ${literal(n)}`);
  const policy =
    shape === undefined
      ? `local limit = tonumber(argv[${A.limit}])${read(A.a, port.a)}${read(A.c, port.c)}${read(A.b, port.b)}`
      : `local limit = ${literal(shape.limit)}${bake(shape.a, port.a)}${bake(shape.c, port.c)}${bake(shape.b, port.b)}`;
  const header =
    shape === undefined
      ? `-- floodgate: one call under one ${kind} policy (see floodgate/model, decide.ts).`
      : `-- floodgate: one call under the ${kind} of limit ${literal(shape.limit)}, a = ${literal(shape.a)}, b = ${literal(shape.b)}, c = ${literal(shape.c)} (see floodgate/model, decide.ts).`;
  return singleCallScript({
    header,
    locals:
      'local fmod, ceil, floor, max, format, byte, sub, match, gmatch = math.fmod, math.ceil, math.floor, math.max, string.format, string.byte, string.sub, string.match, string.gmatch',
    policy: `${policy}\n${windowFlagGuards(kind)}${port.functions === undefined ? '' : `\n${port.functions}`}`,
    declarations: '',
    commonest: shape === undefined ? undefined : 'cost, writes = 1, true',
    call: '',
    transition: windowTransition(kind),
    replied: 'read',
  });
}

/** The shared single-call scripts: the policy's numbers in ARGV. */
export const WINDOW_FAST_SCRIPTS: Readonly<Record<WindowKind, string>> = {
  'fixed-window': windowFastScript('fixed-window'),
  'sliding-window': windowFastScript('sliding-window'),
  'token-interval': windowFastScript('token-interval'),
};
