import { redisOverrides } from 'floodgate/overrides';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore, redisStore } from 'floodgate/redis';
import { Cluster, Redis } from 'ioredis';
import { type OpenedStore, redact, StoreUrlError } from './opened.js';

/** How long the first connection may take before the service starts unready. */
const CONNECT_TIMEOUT_MS = 2000;

/**
 * Options for a rate limiter's Redis connection: a call must fail fast while Redis is away (the limiter's
 * failure policy then answers), never wait in an offline queue or retry for seconds.
 */
const CLIENT_OPTIONS = {
  lazyConnect: true,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  connectTimeout: CONNECT_TIMEOUT_MS,
  retryStrategy: (attempt: number) => Math.min(attempt * 100, 2000),
};

/** Opens `redis://`, `rediss://`, `redis+cluster://` or `rediss+cluster://` with ioredis. */
export async function openRedis(url: string, scheme: string): Promise<OpenedStore> {
  const description = redact(url);
  let client: Redis | Cluster;
  if (scheme.endsWith('+cluster')) {
    const { nodes, username, password } = parseClusterUrl(url);
    client = new Cluster(nodes, {
      lazyConnect: true,
      enableOfflineQueue: false,
      clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 2000),
      redisOptions: {
        ...CLIENT_OPTIONS,
        ...(username === undefined ? {} : { username }),
        ...(password === undefined ? {} : { password }),
        ...(scheme.startsWith('rediss') ? { tls: {} } : {}),
      },
    });
  } else {
    try {
      new URL(url);
    } catch {
      throw new StoreUrlError(`invalid Redis URL ${JSON.stringify(description)}`);
    }
    client = new Redis(url, CLIENT_OPTIONS);
  }
  // The service starts even when Redis is down: it is unready until Redis answers.
  client.on('error', () => {});
  await client.connect().catch(() => {});
  // Waiting permit acquires hear releases on a connection of their own (pub/sub; PUBLISH, which a
  // cluster broadcasts, so that any Redis version serves it); while it is down they poll.
  const subscriber: Redis | Cluster = client instanceof Cluster ? client.duplicate() : client.duplicate();
  subscriber.on('error', () => {});
  void subscriber.connect().catch(() => {});
  const store = redisStore({ client: fromIoredis(client) });
  return {
    store,
    overrides: redisOverrides({ client: fromIoredis(client) }),
    permits: redisPermitStore({ client: fromIoredis(client), subscriber: fromIoredisSubscriber(subscriber) }),
    description,
    close: async () => {
      await store.close();
      client.disconnect();
      subscriber.disconnect();
    },
  };
}

/** `redis+cluster://[user:password@]host:port,host:port` → seed nodes and credentials. */
function parseClusterUrl(url: string): {
  nodes: { host: string; port: number }[];
  username?: string;
  password?: string;
} {
  const rest = url.slice(url.indexOf('://') + 3).replace(/\/.*$/, '');
  const at = rest.lastIndexOf('@');
  const hosts = at === -1 ? rest : rest.slice(at + 1);
  let username: string | undefined;
  let password: string | undefined;
  if (at !== -1) {
    const credentials = rest.slice(0, at);
    const colon = credentials.indexOf(':');
    username = decodeURIComponent(colon === -1 ? credentials : credentials.slice(0, colon)) || undefined;
    password = colon === -1 ? undefined : decodeURIComponent(credentials.slice(colon + 1));
  }
  const nodes = hosts.split(',').map((part) => {
    const match = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(part.trim());
    if (match === null) {
      throw new StoreUrlError(
        `invalid Redis Cluster node ${JSON.stringify(part)} in ${JSON.stringify(redact(url))}: expected host:port`,
      );
    }
    return { host: (match[1] as string).replace(/^\[|\]$/g, ''), port: Number(match[2]) };
  });
  return {
    nodes,
    ...(username === undefined ? {} : { username }),
    ...(password === undefined ? {} : { password }),
  };
}
