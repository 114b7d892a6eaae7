// Concurrency permits on Redis: floodgate against redis-semaphore (its Semaphore over ioredis) and
// Bottleneck (its ioredis datastore), in one run on one redis-server of the benchmark's own.
//
//   npm run bench:permits
//
// 1. Handoff: from a holder's release to the next waiter's grant, ms, p50 and p99 over BENCH_ROUNDS
//    handoffs on one key of limit 1. Holder and waiter are two clients of their own (two "processes"
//    of a fleet, on separate connections), taking turns. Before each release the benchmark waits a
//    random 0–10 ms, so a poller's phase is random: redis-semaphore polls every 10 ms (its default
//    `retryInterval`), floodgate waits on pub/sub (its 1 s poll never fires here), Bottleneck waits on
//    its own pub/sub messages. Beside it, the Redis time per handoff: every command the two sides sent
//    during the rounds (the waiter's polls included), per handoff.
// 2. Redis time per acquire and per release: INFO commandstats deltas over BENCH_OPS uncontended
//    acquires (BENCH_OPS / 10 keys of limit 10, 10 in flight at once), then as many releases. Only the
//    commands the library's client sent are summed (a script's time includes the commands it ran,
//    which commandstats also counts apart). Beside it, the server's CPU time (INFO cpu, user + sys) per
//    call, which also counts reading and writing the sockets.
// 3. Bytes per live lease: MEMORY USAGE summed over the library's keys with every lease of (2) live,
//    divided by the leases: floodgate's three keys per key (leases, costs, fence), redis-semaphore's
//    sorted set, Bottleneck's keys per limiter (its settings and job bookkeeping).
//
// Environment: BENCH_ROUNDS (handoffs, default 1000, after 20 not counted), BENCH_OPS (calls per phase of (2), default 1000).

import { availableParallelism, loadavg } from 'node:os';
import Bottleneck from 'bottleneck';
import { concurrency, createPermits, type Permit, type Permits } from 'floodgate';
import { fromIoredis, fromIoredisSubscriber, redisPermitStore } from 'floodgate/redis';
import { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { HOST, startRedisServer } from './redis-server.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1000);
const OPS = Number(process.env.BENCH_OPS ?? 1000);
const LIMIT = 10;
const KEYS = Math.ceil(OPS / LIMIT);
const LEASE_MS = 60_000;

const server = await startRedisServer(6700, 6800);
const admin = new Redis({ host: HOST, port: server.port });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client that records the names of the commands it sends (top-level ones only). */
function recordedClient(sent: Set<string>): Redis {
  const client = new Redis({ host: HOST, port: server.port });
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
    sent.add(command.name.toLowerCase());
    return (send as (...args: unknown[]) => unknown)(command, ...rest);
  }) as typeof client.sendCommand;
  return client;
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

interface Handoff {
  p50: number;
  p99: number;
  /** Redis time per handoff: the waiter's asks (polls or wakes), the release, the waiter's grant. */
  cost: ServerCost;
}

/** Handoffs run before the measured ones (connections, scripts, subscriptions warm up). */
const WARM_UP = 20;

/**
 * Rounds of: the waiter asks (and is left waiting), a random pause, the holder releases; the time from
 * the release call to the waiter's grant. The waiter then holds, and the other side waits next.
 */
async function handoff(
  sent: Set<string>,
  take: (side: 0 | 1) => Promise<() => Promise<unknown>>,
  queued: () => Promise<void>,
): Promise<Handoff> {
  let release = await take(0);
  let side: 0 | 1 = 1;
  const ms: number[] = [];
  let cpuBefore = 0;
  for (let i = -WARM_UP; i < ROUNDS; i++) {
    if (i === 0) {
      await admin.config('RESETSTAT');
      sent.clear();
      cpuBefore = await cpuUs();
    }
    let grantedAt = 0;
    const next = take(side).then((r) => {
      grantedAt = performance.now();
      return r;
    });
    await queued();
    await sleep(Math.random() * 10);
    const releasedAt = performance.now();
    await release();
    release = await next;
    if (i >= 0) ms.push(grantedAt - releasedAt);
    side = side === 0 ? 1 : 0;
  }
  const { usec, calls } = await commandStats(sent);
  const cost = { commandUs: usec / ROUNDS, cpuUs: ((await cpuUs()) - cpuBefore) / ROUNDS, calls: calls / ROUNDS };
  await release();
  ms.sort((a, b) => a - b);
  return { p50: quantile(ms, 0.5), p99: quantile(ms, 0.99), cost };
}

interface ServerCost {
  commandUs: number;
  cpuUs: number;
  /** Commands the library sent. */
  calls: number;
}

async function cpuUs(): Promise<number> {
  const info = await admin.info('cpu');
  const user = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]);
  const sys = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
  return (user + sys) * 1e6;
}

/** Runs `phase`, then reports the Redis time of the commands in `sent` and the server CPU, per call. */
async function serverCost(sent: Set<string>, calls: number, phase: () => Promise<void>): Promise<ServerCost> {
  await admin.config('RESETSTAT');
  const cpuBefore = await cpuUs();
  sent.clear();
  await phase();
  const cpuAfter = await cpuUs();
  const stats = await commandStats(sent);
  return { commandUs: stats.usec / calls, cpuUs: (cpuAfter - cpuBefore) / calls, calls: stats.calls / calls };
}

/** Calls and µs of Redis time since the last RESETSTAT of the commands named in `sent`. */
async function commandStats(sent: Set<string>): Promise<{ usec: number; calls: number }> {
  const stats = await admin.info('commandstats');
  let usec = 0;
  let calls = 0;
  for (const name of sent) {
    const m = new RegExp(`^cmdstat_${name}:calls=(\\d+),usec=(\\d+)`, 'm').exec(stats);
    calls += Number(m?.[1] ?? 0);
    usec += Number(m?.[2] ?? 0);
  }
  return { usec, calls };
}

async function bytesOf(pattern: string, leases: number): Promise<number> {
  let cursor = '0';
  let bytes = 0;
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) bytes += Number(await admin.memory('USAGE', key, 'SAMPLES', 0));
  } while (cursor !== '0');
  return bytes / leases;
}

/** Acquires LIMIT on each of KEYS keys, LIMIT at once, then releases them all, measuring both phases. */
async function acquireRelease<H>(
  sent: Set<string>,
  acquire: (key: string) => Promise<H>,
  release: (held: H) => Promise<unknown>,
  pattern: string,
): Promise<{ acquire: ServerCost; release: ServerCost; bytes: number }> {
  const held: H[] = [];
  const total = KEYS * LIMIT;
  const acquireCost = await serverCost(sent, total, async () => {
    for (let k = 0; k < KEYS; k++) {
      held.push(...(await Promise.all(Array.from({ length: LIMIT }, () => acquire(`key-${k}`)))));
    }
  });
  const bytes = await bytesOf(pattern, total);
  const releaseCost = await serverCost(sent, total, async () => {
    for (let i = 0; i < held.length; i += LIMIT) await Promise.all(held.slice(i, i + LIMIT).map(release));
  });
  return { acquire: acquireCost, release: releaseCost, bytes };
}

interface Row {
  name: string;
  handoff: Handoff;
  acquire: ServerCost;
  release: ServerCost;
  bytes: number;
}

async function floodgate(): Promise<Row> {
  const sent = new Set<string>();
  const sides = [0, 1].map(() => {
    const client = recordedClient(sent);
    const subscriber = new Redis({ host: HOST, port: server.port });
    const store = redisPermitStore({ client: fromIoredis(client), subscriber: fromIoredisSubscriber(subscriber) });
    return { client, subscriber, store };
  });
  const on = (side: 0 | 1, limit: number, prefix: string): Permits =>
    createPermits({
      store: (sides[side] as (typeof sides)[0]).store,
      policy: concurrency({ limit, leaseMs: LEASE_MS }),
      prefix,
    });
  const one = [on(0, 1, 'fg'), on(1, 1, 'fg')] as const;
  const handoffs = await handoff(
    sent,
    async (side) => {
      const { permit } = await one[side].acquire('handoff');
      return () => permit.release();
    },
    // The queue in Redis: the benchmark's own look at it costs one ZCARD a round or two (in the CPU row).
    async () => {
      do await sleep(1);
      while ((await admin.zcard('fg:{handoff}:concurrency:q')) === 0);
    },
  );
  const many = on(0, LIMIT, 'fgm');
  const costs = await acquireRelease<Permit>(
    sent,
    async (key) => (await many.acquire(key)).permit,
    (permit) => permit.release(),
    'fgm:*',
  );
  for (const side of sides) {
    side.client.disconnect();
    side.subscriber.disconnect();
  }
  return { name: 'floodgate', handoff: handoffs, ...costs };
}

async function redisSemaphore(): Promise<Row> {
  const sent = new Set<string>();
  const clients = [recordedClient(sent), recordedClient(sent)] as const;
  const options = { lockTimeout: LEASE_MS, acquireTimeout: 60_000, refreshInterval: 0 };
  const handoffs = await handoff(
    sent,
    async (side) => {
      const semaphore = new Semaphore(clients[side], 'handoff', 1, options);
      await semaphore.acquire();
      return () => semaphore.release();
    },
    // No queue to see: its first attempt is made at once and refused.
    async () => {
      await sleep(1);
    },
  );
  const costs = await acquireRelease<Semaphore>(
    sent,
    async (key) => {
      const semaphore = new Semaphore(clients[0], key, LIMIT, options);
      await semaphore.acquire();
      return semaphore;
    },
    (semaphore) => semaphore.release(),
    'semaphore:*',
  );
  for (const client of clients) client.disconnect();
  return { name: 'redis-semaphore', handoff: handoffs, ...costs };
}

async function bottleneck(): Promise<Row> {
  const sent = new Set<string>();
  const connections = [0, 1].map(
    () => new Bottleneck.IORedisConnection({ client: recordedClient(sent) as never, Redis: Redis as never }),
  );
  const limiter = (side: number, id: string, maxConcurrent: number) =>
    new Bottleneck({
      id,
      maxConcurrent,
      datastore: 'ioredis',
      connection: connections[side] as Bottleneck.IORedisConnection,
      clearDatastore: true,
      heartbeatInterval: 600_000,
    });
  /** Schedules a job that holds its slot until the returned function is called, resolving once it runs. */
  const hold = (on: Bottleneck) =>
    new Promise<() => Promise<unknown>>((started) => {
      let finish: (() => void) | undefined;
      const done = on.schedule(
        () =>
          new Promise<void>((resolve) => {
            finish = resolve;
            started(() => {
              finish?.();
              return done;
            });
          }),
      );
    });
  const pair = [limiter(0, 'handoff', 1), limiter(1, 'handoff', 1)] as const;
  await Promise.all(pair.map((l) => l.ready()));
  const handoffs = await handoff(
    sent,
    (side) => hold(pair[side]),
    async () => {
      do await sleep(1);
      while (pair[0].counts().QUEUED + pair[1].counts().QUEUED === 0);
    },
  );
  const limiters = new Map<string, Bottleneck>();
  for (let k = 0; k < KEYS; k++) {
    const l = limiter(0, `key-${k}`, LIMIT);
    await l.ready();
    limiters.set(`key-${k}`, l);
  }
  const costs = await acquireRelease(
    sent,
    (key) => hold(limiters.get(key) as Bottleneck),
    // A release ends when the job's promise settled; Bottleneck frees its slot on the server then.
    async (finish) => {
      await finish();
    },
    'b_key-*',
  );
  // Bottleneck frees a slot after the job's promise settled: give its last `free` scripts time to land.
  for (const l of [...limiters.values(), ...pair]) await l.disconnect(false);
  for (const c of connections) await c.disconnect(false);
  return { name: 'Bottleneck', handoff: handoffs, ...costs };
}

const rows: Row[] = [];
for (const run of [floodgate, redisSemaphore, bottleneck]) {
  rows.push(await run());
  console.log(`${(rows.at(-1) as Row).name} done`);
}
const [base] = rows as [Row];
const info = await admin.info('server');
console.log(
  `\nredis ${/redis_version:(\S+)/.exec(info)?.[1]} on 127.0.0.1 (own server); ${ROUNDS} handoffs on one key of limit 1; ` +
    `${KEYS * LIMIT} acquires then releases over ${KEYS} keys of limit ${LIMIT}; ` +
    `load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} on ${availableParallelism()} cores\n`,
);
const f = (n: number, digits = 2) => n.toFixed(digits);
const ratio = (n: number, b: number) => (b > 0 ? `${Number((n / b).toPrecision(2))}×` : '—');
const lines: [string, (r: Row) => number, number][] = [
  ['release → next grant, p50 (ms)', (r) => r.handoff.p50, 2],
  ['release → next grant, p99 (ms)', (r) => r.handoff.p99, 2],
  ['Redis command time per handoff (µs)', (r) => r.handoff.cost.commandUs, 1],
  ['Redis CPU per handoff (µs)', (r) => r.handoff.cost.cpuUs, 1],
  ['commands sent per handoff', (r) => r.handoff.cost.calls, 1],
  ['Redis command time per acquire (µs)', (r) => r.acquire.commandUs, 1],
  ['Redis command time per release (µs)', (r) => r.release.commandUs, 1],
  ['Redis CPU per acquire (µs)', (r) => r.acquire.cpuUs, 1],
  ['Redis CPU per release (µs)', (r) => r.release.cpuUs, 1],
  ['bytes per live lease (MEMORY USAGE)', (r) => r.bytes, 0],
];
console.log(
  `| | ${rows.map((r) => r.name).join(' | ')} | ${rows
    .slice(1)
    .map((r) => `${r.name} ÷ floodgate`)
    .join(' | ')} |`,
);
console.log(
  `|---|${rows.map(() => '---:').join('|')}|${rows
    .slice(1)
    .map(() => '---:')
    .join('|')}|`,
);
for (const [label, get, digits] of lines) {
  console.log(
    `| ${label} | ${rows.map((r) => f(get(r), digits)).join(' | ')} | ${rows
      .slice(1)
      .map((r) => ratio(get(r), get(base)))
      .join(' | ')} |`,
  );
}
admin.disconnect();
await server.stop();
process.exit(0);
