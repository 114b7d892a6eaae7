import type { KindDescriptor } from '../../../model/descriptor.js';
import { KINDS } from '../../../model/kinds.js';
import { dispatch, type LuaPorts } from './port.js';

/**
 * Guards generated from the kinds' declared variants (`flags` in each kind's descriptor): a compiled
 * `a`, `b` or `c` that selects a variant must be one of the values the kind declares, or the script
 * raises a Redis error before it decides anything. Without them a new flag value (a third alignment, a
 * new queue mode) would silently run another variant's code, since each port tests only the values it
 * knows (`c.c == 1`, else …).
 */

type Param = 'a' | 'b' | 'c';

/**
 * The Lua statements that raise unless each flag of `kind`, read by `read(param)` (a Lua number), is a
 * declared value. A script that does not receive a flag the kind declares does not build.
 */
export function flagGuards(kind: KindDescriptor, read: (param: Param) => string | undefined): string {
  return (Object.keys(kind.flags) as Param[])
    .map((param) => {
      const values = kind.flags[param] ?? [];
      const x = read(param);
      if (x === undefined) throw new Error(`a script of kind ${kind.name} does not read its flag ${param}`);
      const test = values.length === 0 ? 'true' : values.map((v) => `${x} ~= ${v}`).join(' and ');
      return `if ${test} then error('floodgate: policy kind ${kind.name} has no variant ${param} = ' .. tostring(${x})) end`;
    })
    .join('\n');
}

/**
 * A Lua function `check_flags(c)` over the compiled policy `c` (`c.kind`, `c.a`, `c.b`, `c.c`): the
 * guards of its kind, and the error for a kind number without a port. The full script runs it once per
 * policy per script call, as it reads the policies.
 */
export function checkFlagsLua(ports: LuaPorts): string {
  return `
local function check_flags(c)
  local kind = c.kind
${dispatch(ports, 'kind', (_, k) => `${flagGuards(k, (p) => `c.${p}`)}\nreturn`)}
end
`;
}

/** The meter's guards, for the meter scripts, which receive only its `c` (queue mode) as the number `c`. */
export function meterFlagGuard(c: string): string {
  return flagGuards(KINDS.meter, (param) => (param === 'c' ? c : undefined));
}
