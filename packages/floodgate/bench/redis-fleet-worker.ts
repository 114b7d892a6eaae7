// One app server of the fleet benchmark (redis-fleet.ts): closed loops of decisions against one Redis,
// counted between the parent's 'start' and 'stop'.
import { writeFileSync } from 'node:fs';
import { createLimiter, gcra } from 'floodgate';
import { fromIoredis, redisStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { replayFile } from './redis-replay.js';

export type Contender = 'floodgate' | 'rate-limiter-flexible';

const [port, contender, inFlight, keys, limit, periodMs, recordTo] = process.argv.slice(2);
const client = new Redis({ host: '127.0.0.1', port: Number(port) });
// With a file name: the bytes this client writes between 'start' and 'stop' (ioredis writes each command
// whole, in one write), kept for redis-replay.ts.
let recording = false;
const recorded: Buffer[] = [];
if (recordTo !== undefined) {
  client.once('ready', () => {
    const stream = client.stream;
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = ((chunk: string | Buffer, ...rest: unknown[]) => {
      if (recording) recorded.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk));
      return write(chunk, ...rest);
    }) as typeof stream.write;
  });
}
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
  if (message === 'start') {
    counted = done;
    recording = true;
  } else {
    const decided = done - counted;
    recording = false;
    stop = true;
    if (recordTo !== undefined) writeFileSync(recordTo, replayFile(Buffer.concat(recorded)));
    void Promise.all(loops).then(() => {
      client.disconnect();
      process.send?.(decided, () => process.exit(0));
    });
  }
});
process.send?.('ready');
