// Attack: through `floodgate serve` on Redis, a client floods a "5 per hour" sliding log with tiny costs
// (`cost: 1e-7` in the HTTP API). The log used to keep one entry per call: 240 kB after some 6,000 calls, each
// decision slower than the last. Now it keeps at most ceil(5) + 1 = 6 entries, and admits exactly what the
// exact log does: every tiny call, then 4 calls of cost 1 (4.00005 of 5).
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../../floodgate/test/stores/redis/servers.js';
import type { Service } from '../../src/service.js';
import { get, post, startTestService, waitFor } from '../helpers.js';

const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const TINY_CALLS = 500;

for (const countDenied of [false, true]) {
  describe.skipIf(!runRedis)(
    `hostile: a sliding log flooded with tiny costs through the HTTP API on Redis${countDenied ? ', countDenied' : ''}`,
    () => {
      const prefix = `svc-log-${randomBytes(6).toString('hex')}`;
      let service: Service;
      let redis: Redis;
      beforeAll(async () => {
        redis = new Redis({ host: '127.0.0.1', port: 6379 });
        service = await startTestService(
          `prefix: ${prefix}
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: sliding-log, name: login, limit: 5, windowMs: 3600000, countDenied: ${countDenied} }
`,
          { store: 'redis://127.0.0.1:6379' },
        );
        await waitFor(async () => (await get(service, '/readyz')).status === 200, 10_000);
      }, 30_000);
      afterAll(async () => {
        await service?.close();
        if (redis !== undefined) {
          const keys = await redis.keys(`${prefix}:*`);
          if (keys.length > 0) await redis.del(...keys);
          redis.disconnect();
        }
      });

      it(`${TINY_CALLS} calls of cost 1e-7 keep the key under 1 kB with at most 6 entries, and admit nothing beyond the limit`, async () => {
        const call = async (cost: number) =>
          (
            await post(service, '/v1/decide', {
              domain: 'api',
              cost,
              descriptors: [{ entries: [{ key: 'user', value: 'mallory' }] }],
            })
          ).body.code;
        let admitted = 0;
        for (let i = 0; i < TINY_CALLS; i++) if ((await call(1e-7)) === 'OK') admitted++;
        expect(admitted).toBe(TINY_CALLS);
        const keys = await redis.keys(`${prefix}:*`);
        expect(keys).toHaveLength(1);
        const key = keys[0] as string;
        const value = (await redis.get(key)) as string;
        // `l<t1> <cost1> <t2> <cost2> …`: two numbers per entry.
        expect(value.split(' ').length / 2).toBeLessThanOrEqual(6);
        expect(value.length).toBeLessThan(1024);
        expect(Number(await redis.call('MEMORY', 'USAGE', key))).toBeLessThan(1024);
        // 1e-7 × 500 = 0.00005 logged: 4 calls of cost 1 fit, the 5th and 6th do not.
        const heavy: unknown[] = [];
        for (let i = 0; i < 6; i++) heavy.push(await call(1));
        expect(heavy).toEqual(['OK', 'OK', 'OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
      });
    },
  );
}
