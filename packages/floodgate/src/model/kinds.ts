import { FloodgateError } from '../errors.js';
import { BUCKETED_WINDOW } from './bucketed-window.js';
import type { CompiledNumbers, KindDescriptor, StateReading } from './descriptor.js';
import { FIXED_WINDOW_KIND } from './fixed-window.js';
import { METER, meterCharge } from './meter.js';
import { SLIDING_LOG_KIND } from './sliding-log.js';
import { SLIDING_WINDOW_KIND } from './sliding-window.js';
import { TOKEN_INTERVAL } from './token-bucket.js';
import type { State } from './types.js';

/**
 * Every kind stores run, in the order of their ids (1, 2, 3… without gaps: the Lua port indexes its
 * state tags by id). This list is the one place a kind is registered: its number, its state layout and
 * its Redis tag follow from its descriptor, and each store's table of ports (`LUA_PORTS`, `SQL_PORTS`)
 * must have an entry for it, or the build fails.
 */
export const KIND_LIST = [
  METER,
  TOKEN_INTERVAL,
  FIXED_WINDOW_KIND,
  SLIDING_WINDOW_KIND,
  SLIDING_LOG_KIND,
  BUCKETED_WINDOW,
] as const;

/** A kind's number, as stores receive it. */
export type Kind = (typeof KIND_LIST)[number]['id'];
/** A kind's name: `meter`, `token-interval`, … */
export type KindName = (typeof KIND_LIST)[number]['name'];

/** The kinds by name. */
export const KINDS = Object.freeze(Object.fromEntries(KIND_LIST.map((k) => [k.name, k]))) as {
  readonly [N in KindName]: Extract<(typeof KIND_LIST)[number], { name: N }>;
};

/** The meter's id, which the stores' single-meter fast paths and reservations check. */
export const KIND_METER = METER.id;

const BY_ID: readonly (KindDescriptor | undefined)[] = [undefined, ...KIND_LIST];

/** The descriptor of a policy's kind; throws `ERR_INVALID_POLICY` for a number no kind has. */
export function kindOf(c: { readonly kind: number; readonly name?: string }): KindDescriptor {
  const k = BY_ID[c.kind];
  if (k === undefined) throw unknownKind(c);
  return k;
}

/** Whether some kind of this model has the number `kind`. */
export function hasKind(kind: number): boolean {
  return BY_ID[kind] !== undefined;
}

function unknownKind(c: { readonly kind: number; readonly name?: string }): FloodgateError {
  return new FloodgateError(
    'ERR_INVALID_POLICY',
    `policy ${JSON.stringify(c.name ?? '?')} has kind ${String(c.kind)}, which no algorithm of this model implements`,
    { option: 'policies' },
  );
}

/** The port constant of a kind: `KIND_TOKEN_INTERVAL`. */
export function kindConstant(k: { readonly name: string }): string {
  return `KIND_${k.name.toUpperCase().replaceAll('-', '_')}`;
}

/** The length of a state with no history: the penalty slot plus the kind's fields, all zero (1 for a list of pairs). */
export function emptyStateLength(k: KindDescriptor): number {
  return 'fields' in k.layout ? 1 + k.layout.fields.length : 1;
}

/**
 * The most numbers a key's state under this policy holds: the penalty slot plus the kind's fields, or plus
 * two per pair of a list at its longest (`maxPairs`). What a store reads, computes on and writes back for
 * one decision grows with it (a full 1,000-entry sliding log holds 2,003), so the Redis store weighs the
 * calls of one script call by it.
 */
export function maxStateLength(c: CompiledNumbers & { readonly kind: number; readonly name?: string }): number {
  const k = kindOf(c);
  return 'fields' in k.layout ? 1 + k.layout.fields.length : 1 + 2 * Math.ceil(k.layout.maxPairs(c));
}

/**
 * True when `cost` can never fit the policy, whatever its state: a meter's charge above its tolerance,
 * another kind's cost above its limit. Such a call is `exceeds-capacity` and changes nothing.
 */
export function exceedsCapacity(c: CompiledNumbers, cost: number, k: KindDescriptor = kindOf(c)): boolean {
  return k.capacity === 'charge' ? meterCharge(cost, c.a) > c.b : cost > c.limit;
}

/**
 * What a policy holds for a key at `nowUs`, read as the evaluation reads it (refills, dust, windows
 * rolling over, events leaving the log): for status pages and the web simulator. Pure.
 */
export function readState(c: CompiledNumbers, s: State | undefined, nowUs: number): StateReading {
  return kindOf(c).read(c, s, nowUs);
}
