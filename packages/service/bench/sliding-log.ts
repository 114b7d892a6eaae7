// A "5 per hour" sliding log through `floodgate serve` on Redis, flooded with tiny costs: N calls to
// `POST /v1/decide` with `cost: 1e-7` for one descriptor, one after another. Reports the calls admitted,
// the time, the Lua time Redis spent (INFO commandstats, EVALSHA), and what the key holds afterwards
// (STRLEN and MEMORY USAGE).
//
//   npm run build && node --import tsx packages/service/bench/sliding-log.ts
//
// Redis is a server of the benchmark's own on a spare port. BENCH_CALLS (default 5000) sets N,
// BENCH_COUNT_DENIED=1 logs denied attempts too.
import { Redis } from 'ioredis';
import { HOST, startRedisServer } from '../../floodgate/bench/redis-server.js';
import { startService } from '../src/service.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 5000);
const COUNT_DENIED = process.env.BENCH_COUNT_DENIED === '1';

const server = await startRedisServer(6600, 6700);
const client = new Redis({ host: HOST, port: server.port });
const service = await startService({
  config: `
prefix: bench
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: sliding-log, name: login, limit: 5, windowMs: 3600000, countDenied: ${COUNT_DENIED} }
`,
  store: `redis://${HOST}:${server.port}`,
  httpPort: 0,
  grpcPort: false,
  logger: 'silent',
});
try {
  const body = JSON.stringify({
    domain: 'api',
    cost: 1e-7,
    descriptors: [{ entries: [{ key: 'user', value: 'mallory' }] }],
  });
  const url = `http://${HOST}:${service.httpPort}/v1/decide`;
  const post = async () => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    return (await response.json()) as { code: string };
  };
  await post();
  await client.config('RESETSTAT');
  let admitted = 1;
  const started = performance.now();
  for (let i = 1; i < CALLS; i++) if ((await post()).code === 'OK') admitted++;
  const elapsed = performance.now() - started;
  const stats = await client.info('commandstats');
  const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
  const [key] = await client.keys('bench:*');
  const value = (await client.get(key as string)) as string;
  const usage = await client.call('MEMORY', 'USAGE', key as string);
  console.log(
    `service on Redis, sliding log 5 per hour${COUNT_DENIED ? ', countDenied' : ''}: ${CALLS} calls of cost 1e-7, ${admitted} admitted in ${elapsed.toFixed(0)} ms; ` +
      `Lua ${evalsha ? `${(Number(evalsha[2]) / 1e6).toFixed(2)} s, ${evalsha[3]} µs per EVALSHA` : '?'}; ` +
      `key ${key}: ${value.length} bytes (STRLEN), MEMORY USAGE ${String(usage)}`,
  );
} finally {
  await service.close();
  client.disconnect();
  await server.stop();
}
