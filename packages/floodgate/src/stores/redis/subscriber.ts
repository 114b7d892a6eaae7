import { invalid } from '../../errors.js';
import { checkOptionsObject, hasMethods } from '../kit/options.js';

/**
 * What the Redis permit store needs of a subscriber connection, to hear the wakes of the keys it waits
 * on: a client in subscriber mode (a connection of its own: a subscribed connection runs nothing else).
 * Build one with {@link fromIoredisSubscriber} or {@link fromNodeRedisSubscriber}.
 */
export interface RedisSubscriber {
  /**
   * True: sharded pub/sub (`SSUBSCRIBE`, and the scripts `SPUBLISH`; Redis ≥ 7), which keeps each
   * message on the shard of its key in Redis Cluster. False: `SUBSCRIBE` and `PUBLISH`, which a cluster
   * broadcasts to every node.
   */
  readonly sharded: boolean;
  /** Subscribes to `channel`, every message of it to `listener`; resolves once the server confirmed. */
  subscribe(channel: string, listener: (message: string) => void): Promise<void>;
  /** Ends the subscription to `channel`. */
  unsubscribe(channel: string): Promise<void>;
}

/** Options of the subscriber adapters. */
export interface RedisSubscriberOptions {
  /** Sharded pub/sub (`SSUBSCRIBE` / `SPUBLISH`, Redis ≥ 7): the choice for Redis Cluster. @default false */
  sharded?: boolean;
}

/**
 * What an adapter is given, checked: `client` must have `subscribe` (else the adapter refuses it as not
 * `expected`); returns the `sharded` option.
 */
function subscriberOptions(
  client: unknown,
  adapter: string,
  expected: string,
  options: RedisSubscriberOptions | undefined,
): boolean {
  if (!hasMethods(client, 'subscribe')) throw invalid('ERR_INVALID_OPTION', `${adapter}(client)`, client, expected);
  if (options === undefined) return false;
  checkOptionsObject(options, 'subscriber options');
  const sharded = options.sharded ?? false;
  if (typeof sharded !== 'boolean') throw invalid('ERR_INVALID_OPTION', 'sharded', sharded, 'a boolean');
  return sharded;
}

/** The part of an ioredis client the subscriber uses. */
export interface IoredisSubscriberClient {
  subscribe(...channels: string[]): Promise<unknown>;
  unsubscribe(...channels: string[]): Promise<unknown>;
  on(event: 'message' | 'smessage', listener: (channel: string, message: string) => void): unknown;
}

/**
 * Adapts an ioredis client as the permit store's subscriber. Give it a connection of its own
 * (`redis.duplicate()`): once subscribed, it serves nothing else.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * const redis = new Redis();
 * const store = redisPermitStore({ client: fromIoredis(redis), subscriber: fromIoredisSubscriber(redis.duplicate()) });
 * ```
 */
export function fromIoredisSubscriber(
  client: IoredisSubscriberClient,
  options?: RedisSubscriberOptions,
): RedisSubscriber {
  const sharded = subscriberOptions(client, 'fromIoredisSubscriber', 'an ioredis client', options);
  const listeners = new Map<string, (message: string) => void>();
  const sharding = client as unknown as {
    ssubscribe(...channels: string[]): Promise<unknown>;
    sunsubscribe(...channels: string[]): Promise<unknown>;
  };
  client.on(sharded ? 'smessage' : 'message', (channel, message) => listeners.get(channel)?.(message));
  return {
    sharded,
    async subscribe(channel, listener) {
      listeners.set(channel, listener);
      await (sharded ? sharding.ssubscribe(channel) : client.subscribe(channel));
    },
    async unsubscribe(channel) {
      listeners.delete(channel);
      await (sharded ? sharding.sunsubscribe(channel) : client.unsubscribe(channel));
    },
  };
}

/** The part of a node-redis (v4 or later) client the subscriber uses. */
export interface NodeRedisSubscriberClient {
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  unsubscribe(channel: string): Promise<unknown>;
  sSubscribe?(channel: string, listener: (message: string) => void): Promise<unknown>;
  sUnsubscribe?(channel: string): Promise<unknown>;
}

/**
 * Adapts a node-redis client (v4 or later, connected) as the permit store's subscriber: give it a
 * connection of its own (`client.duplicate()`, then `connect()`).
 *
 * @example
 * ```ts
 * import { createClient } from 'redis';
 * const client = await createClient().connect();
 * const subscriber = await client.duplicate().connect();
 * const store = redisPermitStore({ client: fromNodeRedis(client), subscriber: fromNodeRedisSubscriber(subscriber) });
 * ```
 */
export function fromNodeRedisSubscriber(
  client: NodeRedisSubscriberClient,
  options?: RedisSubscriberOptions,
): RedisSubscriber {
  const sharded = subscriberOptions(client, 'fromNodeRedisSubscriber', 'a node-redis client', options);
  const { sSubscribe, sUnsubscribe } = client;
  if (sharded && (typeof sSubscribe !== 'function' || typeof sUnsubscribe !== 'function')) {
    throw invalid('ERR_INVALID_OPTION', 'sharded', sharded, 'false for a client without sSubscribe');
  }
  return {
    sharded,
    async subscribe(channel, listener) {
      await (sharded
        ? (sSubscribe as NonNullable<typeof sSubscribe>).call(client, channel, listener)
        : client.subscribe(channel, listener));
    },
    async unsubscribe(channel) {
      await (sharded
        ? (sUnsubscribe as NonNullable<typeof sUnsubscribe>).call(client, channel)
        : client.unsubscribe(channel));
    },
  };
}
