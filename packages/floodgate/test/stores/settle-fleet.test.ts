import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, gcra, type Store } from '../../src/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import type { SettledCall } from './fixtures/settle-worker.js';
import { connectSingle } from './redis/clients.js';
import { redisAvailable, requireServer } from './redis/servers.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

/**
 * The bound of settling (docs/algorithms.md, "Settling"), measured across processes: several processes
 * admit calls on one key with estimates and settle them at random actual costs. Over the test (one window:
 * the budget does not refill while it runs), the actual cost admitted stays within the limit plus the
 * most the calls in flight at once were underestimated by, and the store owes every unit of it at the end:
 * no debt is forgotten. The same traffic with every estimate 0 (charging at the end) shows the overshoot
 * settling bounds.
 */

const worker = fileURLToPath(new URL('./fixtures/settle-worker.ts', import.meta.url));
const PROCESSES = 4;
const CALLERS = 8;
const CALLS = 40;
const LIMIT = 2000;
/** Thirty days: one unit every 1296 s, so nothing drains while the test runs. */
const PERIOD_MS = 30 * 24 * 3_600_000;
const T_US = (PERIOD_MS * 1000) / LIMIT;

interface Measure {
  admitted: number;
  total: number;
  overshoot: number;
  /** The most by which calls in flight at one moment were underestimated. */
  inFlightUnder: number;
}

/** The largest sum of `max(0, actual − estimate)` over calls whose [start, end] spans hold one moment. */
function worstInFlightUnderestimate(calls: readonly SettledCall[]): number {
  const events: [number, number][] = [];
  for (const c of calls) {
    const under = Math.max(0, c.actual - c.estimate);
    if (under === 0) continue;
    events.push([c.startMs, under], [c.endMs, -under]);
  }
  // At one moment, starts count before ends: spans that touch overlap.
  events.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  let current = 0;
  let worst = 0;
  for (const [, delta] of events) {
    current += delta;
    if (current > worst) worst = current;
  }
  return worst;
}

async function run(
  kind: 'redis' | 'postgres',
  driver: string,
  namespace: string,
  mode: 'settle' | 'end',
  seed: number,
): Promise<SettledCall[]> {
  const key = `budget ${mode} ${seed}`;
  const workers: ChildProcess[] = [];
  try {
    const ready: Promise<unknown>[] = [];
    for (let i = 0; i < PROCESSES; i++) {
      const child = fork(
        worker,
        [kind, driver, namespace, key, mode, CALLERS, CALLS, seed * 10 + i, LIMIT, PERIOD_MS].map(String),
        { execArgv: ['--import', 'tsx'], stdio: 'inherit' },
      );
      workers.push(child);
      ready.push(
        new Promise((resolve, reject) => {
          child.once('message', resolve);
          child.once('exit', (code) => reject(new Error(`a settling process exited (${code}) before it was ready`)));
        }),
      );
    }
    await Promise.all(ready);
    const results = workers.map(
      (child) =>
        new Promise<SettledCall[]>((resolve, reject) => {
          child.once('message', resolve);
          child.once('exit', (code) => reject(new Error(`a settling process exited (${code}) before it answered`)));
        }),
    );
    for (const child of workers) child.send('go');
    return (await Promise.all(results)).flat();
  } finally {
    for (const child of workers) if (child.exitCode === null) child.kill();
  }
}

function measure(calls: readonly SettledCall[]): Measure {
  const total = calls.reduce((sum, c) => sum + c.actual, 0);
  return { admitted: calls.length, total, overshoot: total - LIMIT, inFlightUnder: worstInFlightUnderestimate(calls) };
}

async function owedUnits(store: Store, prefix: string, key: string): Promise<number> {
  const limiter = createLimiter({
    store,
    prefix,
    policies: gcra({ limit: LIMIT, periodMs: PERIOD_MS, name: 'budget' }),
  });
  const status = await limiter.status(key);
  // The key owes resetAfterMs (rounded up to ms, less the seconds the test ran): far less than one unit.
  return Math.ceil((status.resetAfterMs * 1000) / T_US);
}

async function boundHolds(
  kind: 'redis' | 'postgres',
  driver: string,
  namespace: string,
  store: Store,
  prefix: string,
  seed: number,
): Promise<void> {
  const settled = measure(await run(kind, driver, namespace, 'settle', seed));
  const atEnd = measure(await run(kind, driver, namespace, 'end', seed));
  console.info(
    `${kind} (${driver}), seed ${seed}: settle admitted ${settled.total} actual units in ${settled.admitted} calls against a limit of ${LIMIT}: overshoot ${settled.overshoot}, bound ${settled.inFlightUnder} (worst underestimate in flight); charging at the end: overshoot ${atEnd.overshoot}, bound ${atEnd.inFlightUnder}, in ${atEnd.admitted} calls`,
  );
  // The budget was spent: calls were admitted until the key owed its limit.
  expect(settled.total).toBeGreaterThan(LIMIT - 20);
  // The bound: the limit plus the underestimates of the calls in flight at once.
  expect(settled.overshoot).toBeLessThanOrEqual(settled.inFlightUnder);
  expect(atEnd.overshoot).toBeLessThanOrEqual(atEnd.inFlightUnder);
  // No debt forgotten: the store owes exactly what the admitted calls cost.
  expect(await owedUnits(store, prefix, `budget settle ${seed}`)).toBe(settled.total);
  expect(await owedUnits(store, prefix, `budget end ${seed}`)).toBe(atEnd.total);
}

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

describe.skipIf(!redisUp)('settling on Redis: several processes on one key', () => {
  it('the actual cost admitted stays within the limit plus the underestimates in flight; no debt forgotten', async () => {
    const namespace = uniquePrefix('settle');
    const connection = await connectSingle('ioredis');
    try {
      const store = redisStore({ client: connection.client });
      for (const seed of [1, 2]) await boundHolds('redis', 'ioredis', namespace, store, namespace, seed);
    } finally {
      await connection.close();
    }
  }, 120_000);
});

const pgUp = await requirePostgres();
const schema = uniqueSchema('settle');
let admin: Connection | undefined;

describe.skipIf(!pgUp)('settling on PostgreSQL: several processes on one key', () => {
  beforeAll(async () => {
    admin = connect('pg', 2);
    await postgresStore({ client: admin.client, schema, table: 'settle' }).migrate();
  });
  afterAll(async () => {
    await admin?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin?.close();
  });
  it('the actual cost admitted stays within the limit plus the underestimates in flight; no debt forgotten', async () => {
    const store = postgresStore({ client: (admin as Connection).client, schema, table: 'settle' });
    for (const seed of [1, 2]) await boundHolds('postgres', 'pg', schema, store, 'settle', seed);
  }, 120_000);
});
