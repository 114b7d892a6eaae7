import type { KindDescriptor } from '../../../model/descriptor.js';
import { KIND_LIST, type KindName, kindConstant } from '../../../model/kinds.js';

/**
 * One kind's Lua port: the model's evaluation and refund of that kind (model/kinds.ts), with the same
 * operations in the same order, so both compute the same doubles. `LUA_PORTS` in script.ts holds one
 * per kind; the script's dispatch, state codec and constants are generated from it and from the kinds'
 * descriptors, so a kind without a port does not build, and a kind number the script does not know
 * raises.
 */
export interface LuaPort {
  /**
   * Definitions, run on every script call (Redis runs the whole chunk each time): all but the commonest
   * kind keep them in a loader that assigns `locals` on first use.
   */
  readonly source: string;
  /** Locals the source assigns lazily; declared in the prelude, so that every chunk sees them. */
  readonly locals: readonly string[];
  /**
   * Statements that evaluate a policy of the kind and return: `c` (the compiled policy: kind, limit,
   * block, a, b, c), `s` (the state, 1-based, or nil), `now`, `cost`, `max_delay`, `out` are in scope.
   */
  readonly evaluate: string;
  /**
   * Statements that give back `unused` units of a lease and return the new state, or nil when nothing
   * changes: `c`, `s` (never nil), `now`, `leased_at`, `leased`, `unused` are in scope.
   */
  readonly refund: string;
  /**
   * For a kind that counts denied calls (model: the descriptor's `countsDenied` and `logDenied`): the
   * condition on `c`, an expression of the state once the call is counted (`c`, `s`, `now`, `cost` in
   * scope), and whether every committed call counts, one whose cost some policy can never admit too.
   */
  readonly logDenied?: { readonly when: string; readonly state: string; readonly everyCall?: boolean };
}

/**
 * The `evaluate` of a port that keeps its definitions in a loader: runs `load_<fn>()` on first use (it
 * assigns `fn`, one of the port's `locals`), then returns `fn`'s evaluation.
 */
export function lazyEvaluate(fn: string): string {
  return `if not ${fn} then load_${fn}() end\nreturn ${fn}(c, s, now, cost, max_delay, out)`;
}

/** The script's table of ports: one per kind, or the build fails. */
export type LuaPorts = { readonly [N in KindName]: LuaPort };

/** The ports in the order of their kinds' ids (the meter, the commonest, first). */
export function inKindOrder(ports: LuaPorts): { kind: KindDescriptor; constant: string; port: LuaPort }[] {
  return KIND_LIST.map((k) => ({ kind: k, constant: kindConstant(k), port: ports[k.name] }));
}

/** A Lua `if … elseif … else error() end` over the kinds: `body(port)` for each, an error for any other number. */
export function dispatch(
  ports: LuaPorts,
  on: string,
  body: (port: LuaPort, kind: KindDescriptor) => string,
  indent = '  ',
): string {
  const branches = inKindOrder(ports).map(
    ({ kind, constant, port }, i) =>
      `${indent}${i === 0 ? 'if' : 'elseif'} ${on} == ${constant} then\n${body(port, kind)
        .trim()
        .split('\n')
        .map((line) => `${indent}  ${line}`)
        .join('\n')}`,
  );
  return `${branches.join('\n')}\n${indent}end\n${indent}${unknownKind(on)}`;
}

/** The statement that refuses a kind number this script has no port for. */
export function unknownKind(on: string): string {
  return `error('floodgate: no Lua port of policy kind ' .. tostring(${on}))`;
}
