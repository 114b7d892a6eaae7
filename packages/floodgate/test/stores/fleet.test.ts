import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { redisAvailable, requireServer } from './redis/servers.js';
import { type Connection, connect, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

const worker = fileURLToPath(new URL('./fixtures/fleet-worker.ts', import.meta.url));
const PROCESSES = 4;
const CALLS = 40;
/** The emission interval: one call every 25 ms, burst 1 (one process's calls alone book a second ahead). */
const PERIOD_MS = 25;

interface Booked {
  allowed: boolean;
  delayMs: number;
  tatUs: number | null;
}

/**
 * Several processes book reservations on one key at once. Every call is admitted (the slots are an hour
 * deep), nearly all with a delay, and the moments they may proceed (TAT − τ,
 * τ = T with burst 1) are spaced by the emission interval, never closer.
 */
async function fleet(kind: 'redis' | 'postgres', driver: string, namespace: string): Promise<void> {
  const key = 'one key';
  const workers: ChildProcess[] = [];
  try {
    const ready: Promise<unknown>[] = [];
    for (let i = 0; i < PROCESSES; i++) {
      const child = fork(worker, [kind, driver, namespace, key, String(CALLS), String(PERIOD_MS)], {
        execArgv: ['--import', 'tsx'],
        stdio: 'inherit',
      });
      workers.push(child);
      ready.push(
        new Promise((resolve, reject) => {
          child.once('message', resolve);
          child.once('exit', (code) => reject(new Error(`a fleet process exited (${code}) before it was ready`)));
        }),
      );
    }
    await Promise.all(ready);
    // Every process fires its calls at the same moment.
    const results = workers.map(
      (child) =>
        new Promise<Booked[]>((resolve, reject) => {
          child.once('message', resolve);
          child.once('exit', (code) => reject(new Error(`a fleet process exited (${code}) before it answered`)));
        }),
    );
    for (const child of workers) child.send('go');
    const outputs = await Promise.all(results);
    check(outputs.flat());
  } finally {
    for (const child of workers) if (child.exitCode === null) child.kill();
  }
}

function check(booked: Booked[]): void {
  expect(booked).toHaveLength(PROCESSES * CALLS);
  expect(booked.every((b) => b.allowed)).toBe(true);
  const tats = booked.filter((b) => b.tatUs !== null).map((b) => b.tatUs as number);
  // Only a call admitted at once carries no reservation: the first one on the key, and at most one per
  // process whose 'go' came (on a loaded machine) after the others' bookings had all come due.
  expect(tats.length).toBeGreaterThanOrEqual(PROCESSES * CALLS - PROCESSES);
  expect(booked.filter((b) => b.delayMs > 0)).toHaveLength(tats.length);
  const sorted = [...tats].sort((a, b) => a - b);
  const gaps = sorted.slice(1).map((t, i) => t - (sorted[i] as number));
  expect(Math.min(...gaps)).toBeGreaterThanOrEqual(PERIOD_MS * 1000);
  // Booked back to back: nearly every gap is exactly one interval.
  expect(gaps.filter((g) => g === PERIOD_MS * 1000).length).toBeGreaterThan(gaps.length * 0.9);
}

const redis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

describe.skipIf(!redis)('fleet of processes reserving on one Redis key', () => {
  for (const driver of ['ioredis', 'node-redis']) {
    it(`${driver}: admission times are spaced by the emission interval, never closer`, async () => {
      await fleet('redis', driver, uniquePrefix('fleet'));
    }, 60_000);
  }
});

const pgAvailable = await requirePostgres();
const schema = uniqueSchema('fleet');
let admin: Connection | undefined;

describe.skipIf(!pgAvailable)('fleet of processes reserving on one PostgreSQL key', () => {
  beforeAll(async () => {
    admin = connect('pg', 2);
    await postgresStore({ client: admin.client, schema, table: 'fleet' }).migrate();
  });
  afterAll(async () => {
    await admin?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin?.close();
  });
  for (const driver of ['pg', 'postgres']) {
    it(`${driver}: admission times are spaced by the emission interval, never closer`, async () => {
      await admin?.sql(`DELETE FROM "${schema}"."fleet"`);
      await fleet('postgres', driver, schema);
    }, 60_000);
  }
});
