// One app server of the fleet benchmark (redis-fleet.ts): closed loops of decisions against one Redis,
// counted between the parent's 'start' and 'stop'.
import { createLimiter, gcra } from 'floodgate';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';

export type Contender = 'floodgate' | 'rate-limiter-flexible';

const [port, contender, inFlight, keys, limit, periodMs] = process.argv.slice(2);
const client = new Redis({ host: '127.0.0.1', port: Number(port) });
let decide: (key: string) => Promise<unknown>;
if (contender === 'floodgate') {
  const limiter = createLimiter({
    store: redisStore({ client: fromIoredis(client) }),
    policies: [gcra({ limit: Number(limit), periodMs: Number(periodMs) })],
    prefix: 'fleet',
  });
  decide = (key) => limiter.limit(key);
} else {
  const rlf = new RateLimiterRedis({ storeClient: client, points: Number(limit), duration: Number(periodMs) / 1000 });
  decide = (key) => rlf.consume(key).catch((denied: unknown) => denied);
}

let done = 0;
let stop = false;
let counted = 0;
let seed = process.pid;
const loop = async () => {
  while (!stop) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    await decide(`user-${seed % Number(keys)}`);
    done++;
  }
};
const loops = Array.from({ length: Number(inFlight) }, loop);
process.on('message', (message: 'start' | 'stop') => {
  if (message === 'start') counted = done;
  else {
    const decided = done - counted;
    stop = true;
    void Promise.all(loops).then(() => {
      client.disconnect();
      process.send?.(decided, () => process.exit(0));
    });
  }
});
process.send?.('ready');
