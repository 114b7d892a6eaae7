import { describeValue, FloodgateError, invalid } from '../errors.js';
import { encodeKey } from '../keys.js';
import { definePolicy, type Policy, type PolicyInput } from '../model/policy.js';

/** What an override applies to: one limited key, every key of a tenant, or every key of a plan. */
export type OverrideScope = 'key' | 'tenant' | 'plan';

/** The scopes, most specific first: a key's override wins over its tenant's, which wins over its plan's. */
export const OVERRIDE_SCOPES: readonly OverrideScope[] = ['key', 'tenant', 'plan'];

/** The target of an override: `{ scope: 'tenant', id: 'acme' }`. */
export interface OverrideTarget {
  scope: OverrideScope;
  /** The key, tenant or plan: any string of 1 to {@link MAX_OVERRIDE_ID_LENGTH} characters, kept as data. */
  id: string;
}

/** What an override sets: the policies of its target, and optionally when it ends by itself. */
export interface OverrideInput {
  /**
   * Policies of the target (policy objects or plain data). Each replaces the base policy of the same
   * name, else the one base policy of the same state layout; any other is added. See docs/overrides.md.
   */
  policies: Policy | PolicyInput | readonly (Policy | PolicyInput)[];
  /** When the override ends by itself, ms since the epoch on the overrides' clock. Unset: never. */
  expiresAt?: number;
  /** A note for operators (who asked, a ticket): at most {@link MAX_OVERRIDE_NOTE_LENGTH} characters. */
  note?: string;
}

/** A stored override, as `get` and `list` return it: plain data. */
export interface StoredOverride {
  scope: OverrideScope;
  id: string;
  policies: Policy[];
  /** ms since the epoch; absent when the override never ends by itself. */
  expiresAt?: number;
  note?: string;
  /** When it was last set, ms since the epoch on the overrides' clock. */
  updatedAt: number;
}

/** Longest key, tenant or plan an override may target, in characters. */
export const MAX_OVERRIDE_ID_LENGTH = 1024;
/** Most policies one override may carry. */
export const MAX_OVERRIDE_POLICIES = 16;
/** Longest note, in characters. */
export const MAX_OVERRIDE_NOTE_LENGTH = 256;
/** Most overrides one `list` page returns. */
export const MAX_OVERRIDE_PAGE = 1000;
/** Latest `expiresAt` accepted: the year 9999 or so, far inside a double's exact integers. */
const MAX_EXPIRES_AT = 253_402_300_799_999;

/** Checks a target and returns a fresh copy (never the caller's object). */
export function validateTarget(target: unknown, path = 'target'): OverrideTarget {
  if (typeof target !== 'object' || target === null || Array.isArray(target)) {
    throw invalid('ERR_INVALID_OPTION', path, target, "an object { scope: 'key' | 'tenant' | 'plan', id }");
  }
  const { scope, id } = target as Record<string, unknown>;
  if (typeof scope !== 'string' || !(OVERRIDE_SCOPES as readonly string[]).includes(scope)) {
    throw invalid('ERR_INVALID_OPTION', `${path}.scope`, scope, "'key', 'tenant' or 'plan'");
  }
  return { scope: scope as OverrideScope, id: validateOverrideId(id, `${path}.id`) };
}

/** Checks a key, tenant or plan as an override id: a string of 1 to 1024 characters. */
export function validateOverrideId(id: unknown, path: string): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_OVERRIDE_ID_LENGTH) {
    throw new FloodgateError(
      'ERR_INVALID_KEY',
      `${path} must be a string of 1 to ${MAX_OVERRIDE_ID_LENGTH} characters, got ${describeValue(id)}`,
      { option: path },
    );
  }
  return id;
}

/**
 * The id a record is stored under: `<scope>:<encoded id>`. The encoding is the stores' key encoding
 * (injective; ids past 200 encoded characters become a digest), so any id is data, never syntax.
 */
export function recordId(target: OverrideTarget): string {
  return `${target.scope}:${encodeKey(target.id)}`;
}

/** Checks an override's input; `nowMs` refuses an `expiresAt` already past. */
export function validateInput(input: unknown, nowMs: number, path = 'override'): Omit<StoredOverride, 'scope' | 'id'> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw invalid('ERR_INVALID_OPTION', path, input, 'an object { policies, expiresAt?, note? }');
  }
  const o = input as Record<string, unknown>;
  for (const field of Object.keys(o)) {
    if (field !== 'policies' && field !== 'expiresAt' && field !== 'note') {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `${path}.${field} is not an option of an override (options: policies, expiresAt, note)`,
        { option: `${path}.${field}`, unknownOption: true },
      );
    }
  }
  const policies = validatePolicies(o.policies, `${path}.policies`);
  const out: Omit<StoredOverride, 'scope' | 'id'> = { policies, updatedAt: nowMs };
  if (o.expiresAt !== undefined) {
    const at = o.expiresAt;
    if (typeof at !== 'number' || !Number.isInteger(at) || at <= nowMs || at > MAX_EXPIRES_AT) {
      throw invalid(
        'ERR_INVALID_OPTION',
        `${path}.expiresAt`,
        at,
        `an integer time in ms since the epoch, later than now (${nowMs})`,
      );
    }
    out.expiresAt = at;
  }
  if (o.note !== undefined) {
    if (typeof o.note !== 'string' || o.note.length > MAX_OVERRIDE_NOTE_LENGTH) {
      throw invalid(
        'ERR_INVALID_OPTION',
        `${path}.note`,
        o.note,
        `a string of at most ${MAX_OVERRIDE_NOTE_LENGTH} characters`,
      );
    }
    out.note = o.note;
  }
  return out;
}

function validatePolicies(value: unknown, path: string): Policy[] {
  const list = Array.isArray(value) ? (value as unknown[]) : [value];
  if (list.length === 0 || list.length > MAX_OVERRIDE_POLICIES) {
    throw invalid('ERR_INVALID_POLICY', path, value, `1 to ${MAX_OVERRIDE_POLICIES} policies`);
  }
  const policies = list.map((p, i) => definePolicy(p, Array.isArray(value) ? `${path}[${i}]` : path));
  const names = new Set<string>();
  for (const [i, p] of policies.entries()) {
    if (names.has(p.name)) {
      throw new FloodgateError('ERR_INVALID_POLICY', `${path}[${i}].name ${JSON.stringify(p.name)} is used twice`, {
        option: `${path}[${i}].name`,
      });
    }
    names.add(p.name);
  }
  return policies;
}

/** The stored text of a record: JSON of plain data (policies as their fields). */
export function encodeRecord(target: OverrideTarget, body: Omit<StoredOverride, 'scope' | 'id'>): string {
  return JSON.stringify({ scope: target.scope, id: target.id, ...body });
}

/**
 * Reads a stored record back, validating it as input again (a record written by hand or by another
 * version is refused as `ERR_STORE_PROTOCOL`, never trusted). `undefined` when it has expired.
 */
export function decodeRecord(text: string, nowMs: number): StoredOverride | undefined {
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(text) as Record<string, unknown>;
    const target = validateTarget({ scope: data.scope, id: data.id }, 'record');
    if (typeof data.expiresAt === 'number' && data.expiresAt <= nowMs) return undefined;
    const policies = validatePolicies(data.policies, 'record.policies');
    const updatedAt = typeof data.updatedAt === 'number' ? data.updatedAt : 0;
    const out: StoredOverride = { ...target, policies, updatedAt };
    if (typeof data.expiresAt === 'number') out.expiresAt = data.expiresAt;
    if (typeof data.note === 'string') out.note = data.note;
    return out;
  } catch (error) {
    throw new FloodgateError('ERR_STORE_PROTOCOL', 'a stored override could not be read', { cause: error });
  }
}
