import { errorMonitor } from 'node:events';
import { invalid } from '../../errors.js';

/**
 * What the Redis store needs of a client: run a script by its SHA, or by its source, on the node that
 * holds the keys. Build one with {@link fromIoredis} or {@link fromNodeRedis}, or implement it for
 * another driver.
 */
export interface RedisScriptClient {
  /** True for a Redis Cluster client: batched calls are then grouped per hash slot. */
  readonly cluster: boolean;
  /** `EVALSHA sha numkeys …keys …args`, routed by the first key; rejects with a `NOSCRIPT` error when the node lacks the script. */
  evalsha(sha: string, keys: readonly string[], args: readonly string[]): Promise<unknown>;
  /** `EVAL script numkeys …keys …args`, routed by the first key (also caches the script on that node). */
  eval(script: string, keys: readonly string[], args: readonly string[]): Promise<unknown>;
  /**
   * Why the server cannot be reached now, in plain words (`connection refused to 127.0.0.1:6379`), or
   * undefined while the client is connected: store errors and timeouts say it instead of the client's
   * own words (ioredis' "Stream isn't writeable…"). Optional.
   */
  unreachable?(): string | undefined;
}

/** What the adapters read of a client to say why it is not connected. */
interface Observed {
  on?(event: symbol, listener: (error: unknown) => void): unknown;
}

/** The last error a client emitted. */
interface ConnectionErrors {
  last: { code?: unknown; address?: unknown; port?: unknown } | undefined;
}

const watches = new WeakMap<object, ConnectionErrors>();

/**
 * Watches a client's connection errors (through `errorMonitor`, which neither handles nor hides them)
 * and returns what to say of the last one while `connected()` is false.
 */
function connectionWatch(client: Observed, connected: () => boolean, address: () => string): () => string | undefined {
  // One watch per client, however many stores adapt it (and from its first adaptation on).
  let watch = watches.get(client);
  if (watch === undefined) {
    const errors: ConnectionErrors = { last: undefined };
    watch = errors;
    watches.set(client, errors);
    if (typeof client.on === 'function') {
      client.on(errorMonitor, (error) => {
        if (typeof error === 'object' && error !== null) errors.last = error as ConnectionErrors['last'];
      });
    }
  }
  const seen = watch;
  return () => {
    if (connected()) return undefined;
    const last = seen.last;
    const where =
      typeof last?.address === 'string' && typeof last.port === 'number' ? `${last.address}:${last.port}` : address();
    switch (last?.code) {
      case 'ECONNREFUSED':
        return `connection refused to ${where}`;
      case undefined:
        return `not connected to ${where}`;
      default:
        return `cannot connect to ${where} (${String(last?.code)})`;
    }
  };
}

/**
 * A failed call's error, led by why the server cannot be reached when the client says it cannot
 * (`connection refused to 127.0.0.1:6379 (Stream isn't writeable…)`), the client's own error kept as
 * `cause`; any other error as it is.
 */
export function explainUnreachable(client: RedisScriptClient, error: unknown): unknown {
  const why = client.unreachable?.();
  if (why === undefined || !(error instanceof Error) || isNoScriptError(error)) return error;
  return new Error(`${why} (${error.message})`, { cause: error });
}

/** The part of an ioredis `Redis` or `Cluster` client the store uses. */
export interface IoredisClient {
  readonly isCluster: boolean;
  evalsha(...args: [sha1: string, numkeys: number, ...args: string[]]): Promise<unknown>;
  eval(...args: [script: string, numkeys: number, ...args: string[]]): Promise<unknown>;
}

/** The part of a node-redis (v4 or later) client or cluster client the store uses. */
export interface NodeRedisClient {
  evalSha(sha1: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
}

/**
 * Adapts an ioredis client, single node (`new Redis()`) or cluster (`new Redis.Cluster([...])`).
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * const store = redisStore({ client: fromIoredis(new Redis()) });
 * ```
 */
export function fromIoredis(client: IoredisClient): RedisScriptClient {
  if (typeof client !== 'object' || client === null || typeof client.evalsha !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'fromIoredis(client)', client, 'an ioredis Redis or Cluster client');
  }
  const io = client as IoredisClient & Observed & { status?: unknown; options?: { host?: unknown; port?: unknown } };
  const unreachable = connectionWatch(
    io,
    () => io.status === undefined || io.status === 'ready',
    () =>
      client.isCluster
        ? 'the cluster'
        : `${String(io.options?.host ?? 'localhost')}:${String(io.options?.port ?? 6379)}`,
  );
  return {
    cluster: client.isCluster === true,
    evalsha: (sha, keys, args) => client.evalsha(sha, keys.length, ...keys, ...args),
    eval: (script, keys, args) => client.eval(script, keys.length, ...keys, ...args),
    unreachable,
  };
}

/** Where a node-redis client connects, from its options. */
function nodeRedisAddress(client: unknown): string {
  const options = (
    client as { options?: { url?: unknown; socket?: { host?: unknown; port?: unknown; path?: unknown } } }
  ).options;
  if (typeof options?.url === 'string') {
    try {
      const url = new URL(options.url);
      return `${url.hostname}:${url.port === '' ? 6379 : url.port}`;
    } catch {}
  }
  const socket = options?.socket;
  if (typeof socket?.path === 'string') return socket.path;
  return `${String(socket?.host ?? 'localhost')}:${String(socket?.port ?? 6379)}`;
}

/**
 * Adapts a node-redis client (`createClient()`) or cluster client (`createCluster()`), v4 or later
 * (a v4 client created with `legacyMode: true` too: the store then calls its promise API, `client.v4`).
 * Connect it yourself (`await client.connect()`); the store never opens or closes your client.
 *
 * @example
 * ```ts
 * import { createClient } from 'redis';
 * const client = await createClient().connect();
 * const store = redisStore({ client: fromNodeRedis(client) });
 * ```
 */
export function fromNodeRedis(client: NodeRedisClient): RedisScriptClient {
  if (typeof client !== 'object' || client === null || typeof client.evalSha !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'fromNodeRedis(client)', client, 'a node-redis client or cluster client');
  }
  // A cluster client is the one that maps slots to nodes.
  const cluster = typeof (client as { getSlotMaster?: unknown }).getSlotMaster === 'function';
  // node-redis 4 in `legacyMode` takes callbacks on the client itself; its promise API is `client.v4`
  // (reading `v4` of a client not in legacy mode throws, hence the look at its options first).
  const legacy = (client as { options?: { legacyMode?: unknown } }).options?.legacyMode === true;
  const target = legacy ? (client as unknown as { v4: NodeRedisClient }).v4 : client;
  if (typeof target !== 'object' || target === null || typeof target.evalSha !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'fromNodeRedis(client)', client, 'a node-redis client or cluster client');
  }
  const ready = (client as { isReady?: unknown }).isReady;
  const unreachable = connectionWatch(
    client as Observed,
    () => cluster || typeof ready !== 'boolean' || (client as unknown as { isReady: boolean }).isReady,
    () => nodeRedisAddress(client),
  );
  const routed = cluster ? keyRoutedSend(client) : undefined;
  if (routed !== undefined) {
    return {
      cluster,
      evalsha: (sha, keys, args) => routed(keys[0], ['EVALSHA', sha, String(keys.length), ...keys, ...args]),
      eval: (script, keys, args) => routed(keys[0], ['EVAL', script, String(keys.length), ...keys, ...args]),
      unreachable,
    };
  }
  return {
    cluster,
    evalsha: (sha, keys, args) => target.evalSha(sha, { keys: [...keys], arguments: [...args] }),
    eval: (script, keys, args) => target.eval(script, { keys: [...keys], arguments: [...args] }),
    unreachable,
  };
}

/**
 * For a node-redis 4 cluster client, a raw send routed by the given key. Its `eval` and `evalSha` route
 * by a first key they never find (they read it from the script's argument instead of the options:
 * redis/node-redis#2811), so each call goes to a random node and follows `MOVED` redirections, failing
 * once they run out. Its `sendCommand(firstKey, isReadonly, args)` routes by the key given. Later majors
 * route `evalSha` by its first key; their clients (recognised by the absence of v4's `commandsExecutor`)
 * keep using it.
 */
function keyRoutedSend(
  client: NodeRedisClient,
): ((key: string | undefined, args: string[]) => Promise<unknown>) | undefined {
  const v4 = client as unknown as {
    commandsExecutor?: unknown;
    sendCommand?: (firstKey: string | undefined, isReadonly: boolean, args: string[]) => Promise<unknown>;
  };
  if (typeof v4.commandsExecutor !== 'function' || typeof v4.sendCommand !== 'function') return undefined;
  const send = v4.sendCommand.bind(client);
  return (key, args) => send(key, false, args);
}

/** True for the error a node answers when it does not hold the script (after SCRIPT FLUSH, a restart, a failover). */
export function isNoScriptError(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}
