// A separate process deciding limits with a rate and a concurrency policy on Redis, on the one-call path
// (the store's own permits): started by redis-one-call.test.ts. Never releases a permit. Prints how many
// calls were admitted, refused by the concurrency policy and denied by the rate policy, as JSON.
import { Redis } from 'ioredis';
import { concurrency, createLimiter, gcra } from '../../../src/index.js';
import { fromIoredis, redisStore } from '../../../src/stores/redis/index.js';
import { REDIS_HOST, REDIS_PORT } from './servers.js';

const [prefix, key, rate, inFlight, calls, lanes] = process.argv.slice(2);
const redis = new Redis({ host: REDIS_HOST, port: REDIS_PORT });
const limiter = createLimiter({
  policies: [
    gcra({ limit: Number(rate), periodMs: 86_400_000, name: 'rate' }),
    concurrency({ limit: Number(inFlight), leaseMs: 600_000, name: 'inflight' }),
  ],
  store: redisStore({ client: fromIoredis(redis) }),
  prefix: prefix as string,
  timeoutMs: 30_000,
});
const counts = { admitted: 0, inflight: 0, rate: 0 };
let next = 0;
const lane = async () => {
  while (next++ < Number(calls)) {
    const d = await limiter.limit(key as string);
    if (d.allowed) counts.admitted++;
    else counts[d.policy as 'inflight' | 'rate']++;
  }
};
await Promise.all(Array.from({ length: Number(lanes) }, lane));
process.stdout.write(JSON.stringify(counts));
await redis.quit();
