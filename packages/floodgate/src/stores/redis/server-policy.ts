import { emitFloodgateWarning } from '../../http/warnings.js';
import type { RedisScriptClient } from './clients.js';

/**
 * The server's memory settings, read through the one command a script client can send: `EVAL` of a script
 * that returns `INFO memory`. (`CONFIG GET maxmemory-policy` is refused inside scripts, "not allowed from
 * script", and many managed Redis services disable or rename `CONFIG` anyway; `INFO` reports the same
 * two settings, `maxmemory` and `maxmemory_policy`.)
 */
export const SERVER_POLICY_SCRIPT = "return redis.call('INFO', 'memory')";

/** The key the check's `EVAL` names: on a cluster it routes the check to that key's node. */
const ROUTING_KEY = 'floodgate:server-policy';

/** A Redis server's eviction settings. */
export interface ServerPolicy {
  /** `maxmemory`, bytes; 0: no limit, nothing is ever evicted. */
  readonly maxmemory: number;
  /** `maxmemory-policy`: `noeviction`, `allkeys-lru`, `volatile-ttl`, … */
  readonly policy: string;
}

/** Reads `maxmemory` and `maxmemory_policy` from the text of `INFO memory`; undefined when either is missing. */
export function parseMemoryInfo(info: unknown): ServerPolicy | undefined {
  const text = typeof info === 'string' ? info : info instanceof Uint8Array ? new TextDecoder().decode(info) : '';
  const maxmemory = /^maxmemory:(\d+)\s*$/m.exec(text)?.[1];
  const policy = /^maxmemory_policy:([a-z-]+)\s*$/m.exec(text)?.[1];
  if (maxmemory === undefined || policy === undefined) return undefined;
  return { maxmemory: Number(maxmemory), policy };
}

/**
 * Why a server's settings can lose limiter state, or undefined when they keep every key. Redis evicts only
 * when `maxmemory` is set and reached; then `allkeys-*` may evict any key, and `volatile-*` any key with a
 * TTL, which is every limiter key. An evicted key is a fresh key: its client's limit starts over (the
 * store admits more than the policies allow). Under `noeviction` a full Redis refuses writes instead
 * (`OOM command not allowed`), which the limiter reports as a store error and its `failure` policy handles.
 */
export function evictionRisk(settings: ServerPolicy): string | undefined {
  if (settings.maxmemory === 0 || settings.policy === 'noeviction') return undefined;
  return `Redis runs with maxmemory ${settings.maxmemory} and maxmemory-policy ${settings.policy}: once it is full it evicts ${settings.policy.startsWith('volatile-') ? 'keys with a TTL, which every limiter key has' : 'any key'}, and a client whose key is evicted starts its limits over (more calls admitted than the policies allow). Set maxmemory-policy noeviction (a full Redis then refuses writes, and the limiter's failure policy decides), or give the limiter a Redis of its own with room for every key (docs/stores.md, "Redis memory and eviction")`;
}

/** What {@link checkServerPolicy} found: the settings, why they could not be read, or that Redis did not answer. */
export type ServerPolicyCheck =
  | { readonly settings: ServerPolicy; readonly risk: string | undefined }
  | { readonly unreadable: string }
  | { readonly retry: string };

/**
 * Replies that say nothing of the settings, only that Redis is busy now (loading, a busy script, full
 * under `noeviction`: a script that may write is refused, read-only or not), or a cluster in motion.
 */
const TRANSIENT = /^(BUSY|LOADING|OOM|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|MOVED|ASK|READONLY)\b/;

/**
 * Reads the server's eviction settings and warns (a process warning of type `FloodgateWarning`) when they
 * can evict limiter keys (`FLOODGATE_REDIS_EVICTION`), or when Redis answers but they cannot be read
 * (`FLOODGATE_REDIS_POLICY_UNKNOWN`: `INFO` renamed, disabled or denied by an ACL). When Redis does not
 * answer (no connection) or is busy, it says nothing and asks to be run again (`retry`). It warns rather
 * than refuses: a store that refused every call would hand every decision to the limiter's `failure`
 * policy, and `failure: 'open'` would then admit everything, worse than the eviction it warns of.
 * Never rejects.
 */
export async function checkServerPolicy(client: RedisScriptClient): Promise<ServerPolicyCheck> {
  let check: ServerPolicyCheck;
  try {
    const settings = parseMemoryInfo(await client.eval(SERVER_POLICY_SCRIPT, [ROUTING_KEY], []));
    check =
      settings === undefined
        ? { unreadable: 'INFO memory did not report maxmemory and maxmemory_policy' }
        : { settings, risk: evictionRisk(settings) };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    // A Redis error reply starts with its code in capitals (ERR, NOPERM…); a client's own errors do not.
    check = /^[A-Z]+ /.test(message) && !TRANSIENT.test(message) ? { unreadable: message } : { retry: message };
  }
  if ('unreadable' in check) {
    emitFloodgateWarning(
      'FLOODGATE_REDIS_POLICY_UNKNOWN',
      `could not read the Redis server's maxmemory-policy (${check.unreadable.slice(0, 200)}): if it can evict keys (allkeys-*, or volatile-* with maxmemory set), a client whose key is evicted starts its limits over; noeviction keeps them exact (docs/stores.md, "Redis memory and eviction")`,
    );
  } else if ('risk' in check && check.risk !== undefined) {
    emitFloodgateWarning('FLOODGATE_REDIS_EVICTION', check.risk);
  }
  return check;
}

/**
 * Runs {@link checkServerPolicy} once per store, at its first decision (never delaying it), and again at
 * a later decision while Redis has not answered it.
 */
export class ServerPolicyWatch {
  /** The latest check; undefined before the first decision. */
  result: Promise<ServerPolicyCheck> | undefined;
  private done = false;
  private running = false;

  /** Called by every decision: starts a check unless one has answered or is running. */
  onDecide(client: RedisScriptClient): void {
    if (this.done || this.running) return;
    this.running = true;
    this.result = checkServerPolicy(client).then((check) => {
      this.running = false;
      this.done = !('retry' in check);
      return check;
    });
  }
}
