import { encodeKey, storageKey } from '../../keys.js';
import type { CompiledPolicy } from '../../model/compile.js';

/**
 * The id of a policy's state among a user key's states: `<name>:<kind>`. The kind is part of it, so two
 * limiters that give one name to different algorithms never read each other's state layout.
 */
export function policyId(c: CompiledPolicy): string {
  return `${c.name}:${c.kind}`;
}

/**
 * The storage key of one policy's state for one user key, `<prefix>:{<encoded key>}:<name>:<kind>`: the
 * row key of the SQL stores, and the layout of any store that keeps one entry per policy.
 */
export function stateKey(prefix: string, encodedKey: string, c: CompiledPolicy): string {
  return storageKey(prefix, encodedKey, policyId(c));
}

/** The storage keys of a call's states, in policy order (the user key encoded once). */
export function stateKeys(prefix: string, key: string, policies: readonly CompiledPolicy[]): string[] {
  const encoded = encodeKey(key);
  return policies.map((c) => stateKey(prefix, encoded, c));
}

/**
 * The key of the one record that holds every policy's state of a user key, `<prefix>:{<encoded key>}`
 * (the compare-and-swap layout: one write commits a whole call). It is also the prefix of that user key's
 * {@link stateKey}s, so both layouts keep a user key's states together (one Redis Cluster slot, one range
 * of an ordered index).
 */
export function recordKey(prefix: string, key: string): string {
  return `${prefix}:{${encodeKey(key)}}`;
}
