import { createHash } from 'node:crypto';
import { invalid } from '../errors.js';
import { validatePrefix } from '../keys.js';
import { checkOptionsObject, hasMethods } from '../stores/kit/options.js';
import { isNoScriptError, type RedisScriptClient } from '../stores/redis/clients.js';
import { type OverrideBackend, prefixEnd } from './backend.js';

/** Options of {@link redisOverrides}. */
export interface RedisOverridesOptions {
  /** An adapted client: `fromIoredis(client)` or `fromNodeRedis(client)`. */
  client: RedisScriptClient;
  /** Namespace of the override keys. @default 'floodgate' */
  prefix?: string;
}

/*
 * The overrides' own key space: four keys in one hash slot (`{<prefix>:overrides}`), so each script
 * below is atomic in a cluster too. The decision scripts never read them.
 *   KEYS[1] records  hash    id → record (JSON)
 *   KEYS[2] index    zset    id, score 0: ids in byte order, paged with ZRANGEBYLEX (no SCAN, no KEYS)
 *   KEYS[3] expiry   zset    id, score = expiresAt ms (only records that expire), for pruning
 *   KEYS[4] version  string  INCR on every change; each change is also PUBLISHed on ARGV[1]
 */
const SCRIPTS = {
  write: `
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
if ARGV[4] == '' then redis.call('ZREM', KEYS[3], ARGV[2]) else redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2]) end
redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1`,
  remove: `
local n = redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
if n > 0 then
  redis.call('INCR', KEYS[4])
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return n`,
  // ARGV[2] min, ARGV[3] max (ZRANGEBYLEX bounds), ARGV[4] limit. Returns id, record, id, record, …
  page: `
local ids = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[1], id) or ''
end
return out`,
  read: `
local out = {}
for i = 2, #ARGV do out[i - 1] = redis.call('HGET', KEYS[1], ARGV[i]) end
return out`,
  version: `return redis.call('GET', KEYS[4]) or '0'`,
  // ARGV[2] now ms, ARGV[3] limit.
  prune: `
local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for i, id in ipairs(ids) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
if #ids > 0 then
  redis.call('INCR', KEYS[4])
  redis.call('PUBLISH', ARGV[1], '*')
end
return #ids`,
} as const;

type ScriptName = keyof typeof SCRIPTS;
const SHAS = Object.fromEntries(
  Object.entries(SCRIPTS).map(([name, source]) => [name, createHash('sha1').update(source).digest('hex')]),
) as Record<ScriptName, string>;

/** The channel a Redis override store publishes each change on: `<prefix>:overrides`. */
export function redisOverridesChannel(prefix = 'floodgate'): string {
  return `${validatePrefix(prefix)}:overrides`;
}

/**
 * Overrides in Redis (single node or cluster), in their own four keys. Changes are published on
 * {@link redisOverridesChannel}, for caches that subscribe; caches also poll the version.
 *
 * @example
 * ```ts
 * const overrides = createOverrides({ backend: redisOverrides({ client: fromIoredis(redis) }) });
 * ```
 */
export function redisOverrides(options: RedisOverridesOptions): OverrideBackend {
  checkOptionsObject(options, 'redisOverrides(options)', 'an options object');
  const client = options.client;
  if (!hasMethods(client, 'evalsha')) {
    throw invalid('ERR_INVALID_OPTION', 'client', client, 'an adapted client (fromIoredis or fromNodeRedis)');
  }
  const prefix = validatePrefix(options.prefix ?? 'floodgate');
  const tag = `{${prefix}:overrides}`;
  const keys = [`${tag}:records`, `${tag}:index`, `${tag}:expiry`, `${tag}:version`];
  const channel = redisOverridesChannel(prefix);
  const run = async (name: ScriptName, args: readonly string[]): Promise<unknown> => {
    const argv = [channel, ...args];
    try {
      return await client.evalsha(SHAS[name], keys, argv);
    } catch (error) {
      if (!isNoScriptError(error)) throw error;
      return client.eval(SCRIPTS[name], keys, argv);
    }
  };
  return {
    name: 'redis',
    async read(ids) {
      const reply = (await run('read', ids)) as unknown[];
      return ids.map((_, i) => (typeof reply[i] === 'string' ? (reply[i] as string) : undefined));
    },
    async write(id, record, expiresAtMs) {
      await run('write', [id, record, expiresAtMs === undefined ? '' : String(expiresAtMs)]);
    },
    async remove(id) {
      return Number(await run('remove', [id])) > 0;
    },
    async page(after, limit, startsWith) {
      const min = after !== '' && after >= startsWith ? `(${after}` : startsWith === '' ? '-' : `[${startsWith}`;
      const max = startsWith === '' ? '+' : `(${prefixEnd(startsWith)}`;
      const flat = (await run('page', [min, max, String(limit)])) as string[];
      const rows: { id: string; record: string }[] = [];
      for (let i = 0; i + 1 < flat.length; i += 2) {
        if (flat[i + 1] !== '') rows.push({ id: flat[i] as string, record: flat[i + 1] as string });
      }
      return rows;
    },
    async version() {
      return String(await run('version', []));
    },
    async prune(nowMs, limit) {
      return Number(await run('prune', [String(nowMs), String(limit)]));
    },
  };
}
