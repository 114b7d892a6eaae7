import { describeValue, FloodgateError } from '../../errors.js';
import type { AcquireReply, LeaveReply, RefreshReply, ReleaseReply, WaitReply } from '../../permits/model.js';
import type * as Port from '../../permits/store.js';
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
export interface RedisPermitStore extends Port.PermitStore {
  readonly name: 'redis';
  acquire(key: string, args: Port.PermitAcquireArgs): Promise<AcquireReply>;
  refresh(key: string, args: Port.PermitRefreshArgs): Promise<RefreshReply>;
  release(key: string, args: Port.PermitReleaseArgs): Promise<ReleaseReply>;
  wait(key: string, args: Port.PermitWaitArgs): Promise<WaitReply>;
  leave(key: string, args: Port.PermitLeaveArgs): Promise<LeaveReply>;
  watch?(key: string, listener: (ticket: number) => void): Promise<Port.PermitUnwatch>;
  watching?(key: string, listener: (ticket: number) => void): Port.PermitUnwatch | undefined;
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
    return numbers(reply);
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
    ...(subscriber === undefined ? {} : channelWatch(subscriber)),
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

/** How long a key's channel stays subscribed after its last waiter in this process, ms. */
const SUBSCRIPTION_LINGER_MS = 2000;

/**
 * The store's `watch` and `watching`: one subscription per key channel while this process has listeners
 * on it, shared by them; the channel is unsubscribed {@link SUBSCRIPTION_LINGER_MS} after the last one
 * left, unless another came meanwhile.
 */
function channelWatch(subscriber: RedisSubscriber): {
  watch(key: string, listener: (ticket: number) => void): Promise<Port.PermitUnwatch>;
  watching(key: string, listener: (ticket: number) => void): Port.PermitUnwatch | undefined;
} {
  interface Channel {
    readonly listeners: Set<(ticket: number) => void>;
    ready: Promise<void>;
    /** True once the server confirmed the subscription. */
    live: boolean;
    /** Set while the channel has no listener: it is unsubscribed when this fires. */
    linger: ReturnType<typeof setTimeout> | undefined;
  }
  const channels = new Map<string, Channel>();
  // An unsubscribe still on its way, per channel: a new subscription waits for it (else the late
  // unsubscribe would end the new one).
  const leaving = new Map<string, Promise<void>>();
  /** Adds `listener` to the channel; the function that takes it out. */
  const join = (name: string, joined: Channel, listener: (ticket: number) => void): Port.PermitUnwatch => {
    const entry = (ticket: number) => listener(ticket);
    if (joined.linger !== undefined) clearTimeout(joined.linger);
    joined.linger = undefined;
    joined.listeners.add(entry);
    const leave = () => {
      joined.linger = undefined;
      if (joined.listeners.size > 0 || channels.get(name) !== joined) return;
      channels.delete(name);
      // Unsubscribing can fail (a closed connection): the channel is gone from this process either way.
      const gone = joined.ready
        .then(() => subscriber.unsubscribe(name))
        .catch(() => {})
        .finally(() => {
          if (leaving.get(name) === gone) leaving.delete(name);
        });
      leaving.set(name, gone);
    };
    return () => {
      joined.listeners.delete(entry);
      if (joined.listeners.size > 0 || channels.get(name) !== joined || joined.linger !== undefined) return;
      // A key waited on once is often waited on again soon: the subscription lingers a while, sparing
      // an UNSUBSCRIBE and a SUBSCRIBE (and its round trip) per wait on a busy key.
      joined.linger = setTimeout(leave, SUBSCRIPTION_LINGER_MS);
      joined.linger.unref?.();
    };
  };
  return {
    async watch(key, listener) {
      const name = `${key}:n`;
      let channel = channels.get(name);
      if (channel === undefined) {
        const created: Channel = { listeners: new Set(), ready: Promise.resolve(), live: false, linger: undefined };
        channel = created;
        channels.set(name, created);
        created.ready = (leaving.get(name) ?? Promise.resolve())
          .then(() =>
            subscriber.subscribe(name, (message) => {
              const ticket = Number(message);
              if (!Number.isSafeInteger(ticket)) return;
              for (const each of [...created.listeners]) each(ticket);
            }),
          )
          .then(
            () => {
              created.live = true;
            },
            (error: unknown) => {
              if (channels.get(name) === created) channels.delete(name);
              throw error;
            },
          );
      }
      const joined = channel;
      const unwatch = join(name, joined, listener);
      try {
        await joined.ready;
      } catch (error) {
        unwatch();
        throw error;
      }
      return unwatch;
    },
    watching(key, listener) {
      const name = `${key}:n`;
      const channel = channels.get(name);
      return channel?.live === true ? join(name, channel, listener) : undefined;
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
