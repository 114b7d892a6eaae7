// A separate process hammering one key: started by redis-concurrency.test.ts, driven over IPC.
import { createLimiter, definePolicy, type PolicyInput } from '../../../src/index.js';
import { redisStore } from '../../../src/stores/redis/index.js';
import { connectSingle, type Driver, type DriverClient } from './clients.js';

export interface RunMessage {
  driver: Driver;
  policies: PolicyInput[];
  prefix: string;
  key: string;
  /** Calls fired at once. */
  requests: number;
}

export interface RunReply {
  admitted: number;
  denied: number;
  error?: string;
}

const connections = new Map<Driver, DriverClient>();

process.on('message', (message: RunMessage | 'exit') => {
  if (message === 'exit') {
    void Promise.all([...connections.values()].map((c) => c.close())).then(() => process.exit(0));
    return;
  }
  void run(message).then(
    (reply) => process.send?.(reply),
    (error: unknown) => process.send?.({ admitted: 0, denied: 0, error: String(error) } satisfies RunReply),
  );
});

async function run(message: RunMessage): Promise<RunReply> {
  let connection = connections.get(message.driver);
  if (connection === undefined) {
    connection = await connectSingle(message.driver);
    connections.set(message.driver, connection);
  }
  // No clock: every process decides on Redis time.
  const limiter = createLimiter({
    store: redisStore({ client: connection.client }),
    policies: message.policies.map((p, i) => definePolicy(p, `policies[${i}]`)),
    prefix: message.prefix,
  });
  const decisions = await Promise.all(Array.from({ length: message.requests }, () => limiter.limit(message.key)));
  const admitted = decisions.filter((d) => d.allowed).length;
  return { admitted, denied: decisions.length - admitted };
}

process.send?.('ready');
