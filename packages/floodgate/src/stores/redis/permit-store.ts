import { describeValue, FloodgateError } from '../../errors.js';
import type { AcquireReply } from '../../permits/model.js';
import type * as Port from '../../permits/store.js';
import { channelWatch } from '../kit/channel-watch.js';
import { integerReply } from '../kit/integer-reply.js';
import { checkOptionsObject, hasMethods, wholeOption } from '../kit/options.js';
import { isNoScriptError, type RedisScriptClient } from './clients.js';
import { PERMIT_SCRIPTS } from './permits-lua.js';
import type { RedisSubscriber } from './subscriber.js';

/** Options of {@link redisPermitStore}. */
export interface RedisPermitStoreOptions {
  /** The client, through an adapter: `fromIoredis(client)` or `fromNodeRedis(client)`. */
  client: RedisScriptClient;
  /**
   * How long a key outlives the moment its last lease ran out and the clock passed its last fence, ms.
   * Covers a caller's `clock` that lags Redis's (which expires keys). @default 5000
   */
  expiryGraceMs?: number;
  /**
   * A subscriber connection (`fromIoredisSubscriber(redis.duplicate())` or `fromNodeRedisSubscriber(…)`):
   * a waiting `acquire` then hears the release that lets it in at once (pub/sub on a channel in the
   * key's slot). Without it, waiters only poll (`pollMs` of `createPermits`). The store subscribes to a
   * key's channel while this process has waiters on it.
   */
  subscriber?: RedisSubscriber;
}

/** The Redis and Redis Cluster permit store. */
export interface RedisPermitStore extends Port.NetworkPermitStore {
  readonly name: 'redis';
}

type Script = (typeof PERMIT_SCRIPTS)[keyof typeof PERMIT_SCRIPTS];

/**
 * Concurrency permits on Redis or Redis Cluster: each operation is one Lua script on one key's keys (its
 * leases and its queue of waiters, in one slot), leases expiring on Redis `TIME` unless the caller gives
 * its own clock. With a `subscriber`, a waiting `acquire` is woken by pub/sub on a channel in that slot.
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
  const subscriber = options.subscriber;
  if (subscriber !== undefined && !hasMethods(subscriber, 'subscribe', 'unsubscribe')) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      `subscriber must be wrapped by an adapter: fromIoredisSubscriber(client) or fromNodeRedisSubscriber(client), got ${describeValue(subscriber)}`,
      { option: 'subscriber' },
    );
  }
  const publish = subscriber?.sharded === true ? 'SPUBLISH' : 'PUBLISH';

  const run = async (script: Script, base: string, args: string[]): Promise<number[]> => {
    const keys = [`${base}:l`, `${base}:c`, `${base}:f`, `${base}:q`, `${base}:x`, `${base}:w`, `${base}:n`];
    let reply: unknown;
    try {
      reply = await client.evalsha(script.sha, keys, args);
    } catch (error) {
      if (!isNoScriptError(error)) throw error;
      reply = await client.eval(script.source, keys, args);
    }
    return integerReply(reply, 'a permit script');
  };
  const now = (nowUs: number | undefined) => (nowUs === undefined ? '' : String(nowUs));
  // The arguments `acquire` and `wait` start with: a claim of `cost` under `limit` for a lease.
  const claim = (a: Port.PermitAcquireArgs) => [
    now(a.nowUs),
    String(a.leaseUs),
    String(a.limit),
    String(a.cost),
    a.leaseId,
    grace,
  ];

  return {
    name: 'redis',
    async acquire(key, a) {
      const r = await run(PERMIT_SCRIPTS.acquire, key, [...claim(a), publish]);
      return acquireReply(r);
    },
    async refresh(key, a) {
      const r = await run(PERMIT_SCRIPTS.refresh, key, [
        now(a.nowUs),
        String(a.leaseUs),
        a.leaseId,
        grace,
        String(a.limit ?? 0),
        publish,
      ]);
      return { refreshed: r[0] === 1, expiresAtUs: at(r, 1), nowUs: at(r, 2), wake: at(r, 3) };
    },
    async release(key, a) {
      const r = await run(PERMIT_SCRIPTS.release, key, [now(a.nowUs), a.leaseId, grace, String(a.limit ?? 0), publish]);
      return { released: r[0] === 1, nowUs: at(r, 1), wake: at(r, 2) };
    },
    async wait(key, a) {
      const r = await run(PERMIT_SCRIPTS.wait, key, [...claim(a), String(a.maxQueue), String(a.waiterUs), publish]);
      return { ...acquireReply(r), queued: at(r, 8) === 1, full: at(r, 9) === 1, ticket: at(r, 10), ahead: at(r, 11) };
    },
    async leave(key, a) {
      const r = await run(PERMIT_SCRIPTS.leave, key, [now(a.nowUs), String(a.limit), a.leaseId, grace, publish]);
      return { left: r[0] === 1, nowUs: at(r, 1), wake: at(r, 2) };
    },
    ...(subscriber === undefined ? {} : channelWatch(subscriber, (key) => `${key}:n`)),
  };
}

function acquireReply(r: readonly number[]): AcquireReply {
  return {
    granted: r[0] === 1,
    inFlight: at(r, 1),
    fence: at(r, 2),
    expiresAtUs: at(r, 3),
    nowUs: at(r, 4),
    retryAfterUs: at(r, 5),
    resetAfterUs: at(r, 6),
    wake: at(r, 7),
  };
}

function at(reply: readonly number[], index: number): number {
  const value = reply[index];
  if (value === undefined) throw new FloodgateError('ERR_STORE_PROTOCOL', 'a permit script answered too few fields');
  return value;
}
