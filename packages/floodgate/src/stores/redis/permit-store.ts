import { describeValue, FloodgateError } from '../../errors.js';
import type { AcquireReply, RefreshReply, ReleaseReply } from '../../permits/model.js';
import type { PermitAcquireArgs, PermitRefreshArgs, PermitReleaseArgs, PermitStore } from '../../permits/store.js';
import { checkOptionsObject, hasMethods, wholeOption } from '../kit/options.js';
import { isNoScriptError, type RedisScriptClient } from './clients.js';
import { PERMIT_SCRIPTS } from './permits-lua.js';

/** Options of {@link redisPermitStore}. */
export interface RedisPermitStoreOptions {
  /** The client, through an adapter: `fromIoredis(client)` or `fromNodeRedis(client)`. */
  client: RedisScriptClient;
  /**
   * How long a key outlives the moment its last lease ran out and the clock passed its last fence, ms.
   * Covers a caller's `clock` that lags Redis's (which expires keys). @default 5000
   */
  expiryGraceMs?: number;
}

/** The Redis and Redis Cluster permit store. */
export interface RedisPermitStore extends PermitStore {
  readonly name: 'redis';
  acquire(key: string, args: PermitAcquireArgs): Promise<AcquireReply>;
  refresh(key: string, args: PermitRefreshArgs): Promise<RefreshReply>;
  release(key: string, args: PermitReleaseArgs): Promise<ReleaseReply>;
}

type Script = (typeof PERMIT_SCRIPTS)[keyof typeof PERMIT_SCRIPTS];

/**
 * Concurrency permits on Redis or Redis Cluster: each operation is one Lua script on one key's three
 * keys (in one slot), leases expiring on Redis `TIME` unless the caller gives its own clock.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { concurrency, createPermits } from 'floodgate';
 * import { fromIoredis, redisPermitStore } from 'floodgate/redis';
 *
 * const permits = createPermits({
 *   store: redisPermitStore({ client: fromIoredis(new Redis()) }),
 *   policy: concurrency({ limit: 20, leaseMs: 30_000 }),
 * });
 * ```
 */
export function redisPermitStore(options: RedisPermitStoreOptions): RedisPermitStore {
  checkOptionsObject(options, 'redisPermitStore options');
  const client = options.client;
  if (!hasMethods(client, 'evalsha', 'eval')) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `client must be wrapped by an adapter: fromIoredis(client) or fromNodeRedis(client), got ${describeValue(client)}`,
      { option: 'client' },
    );
  }
  const graceMs = wholeOption(
    'expiryGraceMs',
    options.expiryGraceMs ?? 5000,
    1,
    2 ** 40,
    'a whole number of milliseconds ≥ 1',
  );
  const grace = String(graceMs);

  const run = async (script: Script, base: string, args: string[]): Promise<number[]> => {
    const keys = [`${base}:l`, `${base}:c`, `${base}:f`];
    let reply: unknown;
    try {
      reply = await client.evalsha(script.sha, keys, args);
    } catch (error) {
      if (!isNoScriptError(error)) throw error;
      reply = await client.eval(script.source, keys, args);
    }
    return numbers(reply);
  };
  const now = (nowUs: number | undefined) => (nowUs === undefined ? '' : String(nowUs));

  return {
    name: 'redis',
    async acquire(key, a) {
      const r = await run(PERMIT_SCRIPTS.acquire, key, [
        now(a.nowUs),
        String(a.leaseUs),
        String(a.limit),
        String(a.cost),
        a.leaseId,
        grace,
      ]);
      return {
        granted: r[0] === 1,
        inFlight: at(r, 1),
        fence: at(r, 2),
        expiresAtUs: at(r, 3),
        nowUs: at(r, 4),
        retryAfterUs: at(r, 5),
        resetAfterUs: at(r, 6),
      };
    },
    async refresh(key, a) {
      const r = await run(PERMIT_SCRIPTS.refresh, key, [now(a.nowUs), String(a.leaseUs), a.leaseId, grace]);
      return { refreshed: r[0] === 1, expiresAtUs: at(r, 1), nowUs: at(r, 2) };
    },
    async release(key, a) {
      const r = await run(PERMIT_SCRIPTS.release, key, [now(a.nowUs), a.leaseId, grace]);
      return { released: r[0] === 1, nowUs: at(r, 1) };
    },
  };
}

/** The script's reply: an array of integers (the drivers give numbers; some give strings or bigints). */
function numbers(reply: unknown): number[] {
  if (!Array.isArray(reply)) {
    throw new FloodgateError('ERR_STORE_PROTOCOL', `a permit script answered ${describeValue(reply)}`);
  }
  return reply.map((value) => {
    const n = Number(value);
    if (!Number.isSafeInteger(n)) {
      throw new FloodgateError('ERR_STORE_PROTOCOL', `a permit script answered ${describeValue(value)}`);
    }
    return n;
  });
}

function at(reply: readonly number[], index: number): number {
  const value = reply[index];
  if (value === undefined) throw new FloodgateError('ERR_STORE_PROTOCOL', 'a permit script answered too few fields');
  return value;
}
