import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { concurrency, createPermits, isFloodgateError, memoryPermitStore } from '../../src/index.js';
import type { PermitStore } from '../../src/permits/store.js';
import {
  fromPg,
  fromPgListener,
  fromPostgres,
  fromPostgresListener,
  type PostgresListener,
  postgresPermitStore,
} from '../../src/stores/postgres/index.js';
import { permitChannel } from '../../src/stores/postgres/permits-sql.js';
import { sqlitePermitStore } from '../../src/stores/sqlite/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { mostHeld } from './fixtures/most-held.js';
import { HOSTILE_KEYS } from './redis/hostile-keys.js';
import type { PermitWaitMessage, PermitWaitReply } from './sql/permit-wait-worker.js';
import { PG_CONFIG, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

// Waiting for permits (`permits.acquire`) on the PostgreSQL store (both drivers, woken by LISTEN/NOTIFY)
// and the SQLite store (woken within the process, polling across processes): the same queue as the
// memory store's (the model) and the Redis store's.

const postgresUp = await requirePostgres();
const WORKER = fileURLToPath(new URL('./sql/permit-wait-worker.ts', import.meta.url));

function startWorker(kind: string, target: string): Promise<ChildProcess> {
  const worker = fork(WORKER, [kind, target], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  return new Promise((resolve) => worker.once('message', () => resolve(worker)));
}

/** Sends a wait to a worker; resolves with its report once it was granted and released. */
function waitIn(worker: ChildProcess, message: PermitWaitMessage): Promise<PermitWaitReply> {
  return new Promise((resolve) => {
    const onMessage = (reply: PermitWaitReply) => {
      if (reply.label !== message.label) return;
      worker.off('message', onMessage);
      resolve(reply);
    };
    worker.on('message', onMessage);
    worker.send(message);
  });
}

function stopWorker(worker: ChildProcess): void {
  if (worker.exitCode === null && worker.signalCode === null) worker.send('exit');
}

/** Passes a value on after running `fn`: records when a promise settled. */
function note<T>(fn: () => unknown): (value: T) => T {
  return (value) => {
    fn();
    return value;
  };
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('did not reject');
    },
    (error: unknown) => error,
  );
}

/** A permit a worker held: from its grant until it sent the release, in the machine's time. */
type Held = Extract<PermitWaitReply, { fence: number }>;

const codeOf = (error: unknown) => (isFloodgateError(error) ? error.code : String(error));
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One store under test: how to build it, and how to read its queue's rows. */
interface Subject {
  /** A store (with notification within this process when `watched`). */
  store(watched: boolean): PermitStore;
  /** Waiters queued under a prefix. */
  queued(prefix: string): Promise<number>;
  /** Any row (key, lease, waiter) left under a prefix. */
  rows(prefix: string): Promise<number>;
  /** The worker's arguments, for the tests across processes. */
  worker: [string, string];
}

function waitingSuite(subject: () => Subject, options: { notifiedAcrossProcesses: boolean }) {
  let s: Subject;
  beforeAll(() => {
    s = subject();
  });
  function permitsOn(prefix: string, limit: number, extra: { maxQueue?: number; pollMs?: number } = {}) {
    return createPermits({
      store: s.store(true),
      policy: concurrency({
        limit,
        leaseMs: 30_000,
        ...(extra.maxQueue === undefined ? {} : { maxQueue: extra.maxQueue }),
      }),
      prefix,
      pollMs: extra.pollMs ?? 5000,
    });
  }
  async function untilQueued(prefix: string, n: number): Promise<void> {
    for (let i = 0; i < 1000 && (await s.queued(prefix)) < n; i++) await pause(5);
    expect(await s.queued(prefix)).toBe(n);
  }

  it('decides every random sequence of waits, leaves, refreshes and releases exactly like the model', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(
            fc.record({ op: fc.constant('acquire' as const), cost: fc.integer({ min: 1, max: 3 }) }),
            fc.record({ op: fc.constant('wait' as const), cost: fc.integer({ min: 1, max: 3 }), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('leave' as const), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('release' as const), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('refresh' as const), pick: fc.nat(8) }),
            fc.record({ op: fc.constant('advance' as const), us: fc.integer({ min: 0, max: 300_000 }) }),
          ),
          { maxLength: 40 },
        ),
        async (steps) => {
          const clock = manualClock();
          const memory = memoryPermitStore({ clock });
          const store = s.store(false);
          const key = `${uniquePrefix('wait-model')}:k`;
          const ids: string[] = [];
          const common = { limit: 3, leaseUs: 1_000_000, maxQueue: 4, waiterUs: 500_000 };
          for (const step of steps) {
            const nowUs = clock.nowUs();
            if (step.op === 'advance') {
              clock.advanceUs(step.us);
              continue;
            }
            if (step.op === 'acquire' || (step.op === 'wait' && step.pick >= ids.length)) {
              const leaseId = `${'A'.repeat(20)}${String(ids.length).padStart(2, '0')}`;
              ids.push(leaseId);
              const args = { ...common, cost: step.cost, leaseId, nowUs };
              if (step.op === 'acquire') expect(await store.acquire(key, args)).toEqual(memory.acquire(key, args));
              else expect(await store.wait?.(key, args)).toEqual(memory.wait(key, args));
              continue;
            }
            const leaseId = ids[step.pick % Math.max(1, ids.length)];
            if (leaseId === undefined) continue;
            const by = { limit: 3, leaseId, nowUs };
            if (step.op === 'wait') {
              const args = { ...common, cost: 1 + (ids.indexOf(leaseId) % 3), leaseId, nowUs };
              expect(await store.wait?.(key, args)).toEqual(memory.wait(key, args));
            } else if (step.op === 'leave') {
              expect(await store.leave?.(key, by)).toEqual(memory.leave(key, by));
            } else if (step.op === 'refresh') {
              const args = { ...by, leaseUs: 1_000_000 };
              expect(await store.refresh(key, args)).toEqual(memory.refresh(key, args));
            } else {
              expect(await store.release(key, by)).toEqual(memory.release(key, by));
            }
          }
        },
      ),
      { numRuns: 60 },
    );
  }, 120_000);

  it('refuses bad wait and leave arguments by name before any store call', async () => {
    const store = s.store(false);
    const ok = { limit: 2, leaseUs: 1_000_000, cost: 1, leaseId: 'A'.repeat(22), maxQueue: 4, waiterUs: 500_000 };
    const refusal = async (run: () => unknown) => {
      try {
        await run();
      } catch (error) {
        return isFloodgateError(error) ? [error.code, error.option] : [String(error)];
      }
      return ['accepted'];
    };
    expect(await refusal(() => store.wait?.('k', { ...ok, maxQueue: -1 }))).toEqual(['ERR_INVALID_POLICY', 'maxQueue']);
    expect(await refusal(() => store.wait?.('k', { ...ok, maxQueue: 10_001 }))).toEqual([
      'ERR_INVALID_POLICY',
      'maxQueue',
    ]);
    expect(await refusal(() => store.wait?.('k', { ...ok, waiterUs: 0 }))).toEqual(['ERR_INVALID_OPTION', 'waiterUs']);
    expect(await refusal(() => store.wait?.('k', { ...ok, cost: 1.5 }))).toEqual(['ERR_INVALID_COST', 'cost']);
    expect(await refusal(() => store.wait?.('a\0b', ok))).toEqual(['ERR_INVALID_KEY', 'key']);
    expect(await refusal(() => store.leave?.('k', { limit: 0, leaseId: ok.leaseId }))).toEqual([
      'ERR_INVALID_POLICY',
      'limit',
    ]);
    expect(await refusal(() => store.leave?.('k', { limit: 2, leaseId: "'; --" }))).toEqual([
      'ERR_INVALID_OPTION',
      'leaseId',
    ]);
    expect(await refusal(() => store.release('k', { limit: -1, leaseId: ok.leaseId }))).toEqual([
      'ERR_INVALID_POLICY',
      'limit',
    ]);
  });

  it('serves waiters first come, first served, each woken by notification well before the poll', async () => {
    const prefix = uniquePrefix('wait-fifo');
    const permits = permitsOn(prefix, 1);
    const holder = await permits.acquire('fifo');
    const order: string[] = [];
    const waits: Promise<unknown>[] = [];
    for (const label of ['a', 'b', 'c', 'd']) {
      waits.push(
        permits.acquire('fifo').then(async (d) => {
          order.push(label);
          await pause(2);
          await d.permit.release();
        }),
      );
      await untilQueued(prefix, waits.length);
    }
    const releasedMs = performance.now();
    await holder.permit.release();
    await Promise.all(waits);
    // pollMs is 5 s: four waiters each woken by a poll would take 20 s.
    expect(performance.now() - releasedMs).toBeLessThan(2000);
    expect(order).toEqual(['a', 'b', 'c', 'd']);
    expect(await s.queued(prefix)).toBe(0);
  });

  it('a large cost at the head is not starved by smaller ones that come after it', async () => {
    const prefix = uniquePrefix('wait-big');
    const permits = permitsOn(prefix, 4);
    const held = await Promise.all([1, 2, 3, 4].map(() => permits.acquire('big')));
    const order: string[] = [];
    const big = permits.acquire('big', { cost: 4 }).then(note(() => order.push('big')));
    await untilQueued(prefix, 1);
    const small = [1, 2, 3].map((i) => permits.acquire('big').then(note(() => order.push(`small${i}`))));
    await untilQueued(prefix, 4);
    for (const h of held.slice(0, 3)) await h.permit.release();
    // Three permits free, but the head asks for 4: nobody passes it, not even a call that does not wait.
    expect((await permits.limit('big')).allowed).toBe(false);
    await pause(50);
    expect(order).toEqual([]);
    await held[3]?.permit.release();
    const bigPermit = await big;
    expect(order).toEqual(['big']);
    await bigPermit.permit.release();
    for (const d of await Promise.all(small)) await d.permit.release();
    // The three fit at once behind it: let in together, their answers come back in any order.
    expect(order[0]).toBe('big');
    expect(order.slice(1).sort()).toEqual(['small1', 'small2', 'small3']);
    expect(await s.queued(prefix)).toBe(0);
  });

  it('a timeout and an abort leave nothing behind: no waiter row is left', async () => {
    const prefix = uniquePrefix('wait-clean');
    const permits = permitsOn(prefix, 1, { pollMs: 50 });
    const holder = await permits.acquire('clean');
    const timedOut = rejectionOf(permits.acquire('clean', { timeoutMs: 150 }));
    const controller = new AbortController();
    const aborted = rejectionOf(permits.acquire('clean', { signal: controller.signal }));
    await untilQueued(prefix, 2);
    controller.abort();
    expect(codeOf(await aborted)).toBe('ERR_ABORTED');
    expect(await s.queued(prefix)).toBe(1);
    expect(codeOf(await timedOut)).toBe('ERR_TIMEOUT');
    expect(await s.queued(prefix)).toBe(0);
    await holder.permit.release();
    // The key's row and nothing else: its fence.
    expect(await s.rows(prefix)).toBe(1);
  });

  it('refuses a waiter beyond maxQueue with ERR_QUEUE_FULL, per key, counting every store on the tables', async () => {
    const prefix = uniquePrefix('wait-full');
    const one = permitsOn(prefix, 1, { maxQueue: 2 });
    const two = createPermits({
      store: s.store(false),
      policy: concurrency({ limit: 1, leaseMs: 30_000, maxQueue: 2 }),
      prefix,
      pollMs: 20,
    });
    const holder = await one.acquire('full');
    const waiting = [one.acquire('full'), two.acquire('full')];
    await untilQueued(prefix, 2);
    expect(codeOf(await rejectionOf(two.acquire('full')))).toBe('ERR_QUEUE_FULL');
    expect(await s.queued(prefix)).toBe(2);
    const otherHolder = await one.acquire('other');
    const other = one.acquire('other');
    await untilQueued(prefix, 3);
    await holder.permit.release();
    await otherHolder.permit.release();
    await Promise.all([...waiting, other].map(async (d) => (await d).permit.release()));
    expect(await s.queued(prefix)).toBe(0);
  });

  it('hostile keys (braces, quotes, Unicode, 10 kB) wait and wake each on their own', async () => {
    const prefix = uniquePrefix('wait-hostile');
    const permits = permitsOn(prefix, 1);
    const keys = [...HOSTILE_KEYS, "'; NOTIFY x; --", '"', '\\', '$fn$', 'floodgate_'.repeat(10)];
    const holders = await Promise.all(keys.map((key) => permits.acquire(key)));
    const granted = new Set<number>();
    const waits = keys.map((key, i) => permits.acquire(key).then(note(() => granted.add(i))));
    await untilQueued(prefix, keys.length);
    // Each release lets in its own key's waiter, woken well before the 5 s poll, and no other.
    for (const [i, holder] of holders.entries()) {
      await holder.permit.release();
      const d = await waits[i];
      expect([...granted].sort((x, y) => x - y)).toEqual(keys.slice(0, i + 1).map((_, j) => j));
      await d?.permit.release();
    }
    expect(await s.queued(prefix)).toBe(0);
  }, 60_000);

  describe('across processes', () => {
    const workers: ChildProcess[] = [];
    beforeAll(async () => {
      workers.push(...(await Promise.all([startWorker(...s.worker), startWorker(...s.worker)])));
      // One wait each first, granted at once: a process's first wait loads and compiles what it runs,
      // which on a busy machine can stall it past its place's 3 polls (it would then join again behind).
      const warm = { prefix: uniquePrefix('warm'), limit: 2, cost: 1, holdMs: 0, pollMs: 200 };
      await Promise.all(workers.map((w, i) => waitIn(w, { ...warm, key: `w${i}`, label: 'warm' })));
    }, 60_000);
    afterAll(() => {
      for (const worker of workers) stopWorker(worker);
    });

    it('grants waiters of two processes first come, first served, never more than the limit at once', async () => {
      const prefix = uniquePrefix('wait-procs');
      // Without notification across processes, each waiter polls (its place lasting 3 polls, ample on a
      // busy machine).
      const pollMs = options.notifiedAcrossProcesses ? 5000 : 200;
      const holder = await permitsOn(prefix, 2).acquire('procs', { cost: 2 });
      const labels = ['a1', 'b1', 'a2', 'b2', 'a3', 'b3', 'a4', 'b4'];
      const done: Promise<PermitWaitReply>[] = [];
      for (const [i, label] of labels.entries()) {
        const message = { prefix, key: 'procs', label, limit: 2, cost: 1 + (i % 2), holdMs: 20, pollMs };
        done.push(waitIn(workers[i % 2] as ChildProcess, message));
        await untilQueued(prefix, i + 1);
      }
      const releasedMs = performance.timeOrigin + performance.now();
      await holder.permit.release();
      const replies = await Promise.all(done);
      for (const reply of replies) expect(reply).not.toHaveProperty('error');
      const granted = (replies as Held[]).slice().sort((x, y) => x.fence - y.fence);
      expect(granted.map((r) => r.label)).toEqual(labels);
      // Costs 1 and 2 alternate under a limit of 2: never more than 2 held at any moment.
      expect(mostHeld(granted.map((h) => ({ cost: h.cost, from: h.grantedMs, to: h.releasedMs })))).toBeLessThanOrEqual(
        2,
      );
      if (options.notifiedAcrossProcesses) {
        // pollMs 5 s: eight waiters each woken by a poll would take 40 s; NOTIFY wakes them at once.
        expect(Math.max(...granted.map((r) => r.grantedMs)) - releasedMs).toBeLessThan(2000);
      }
      expect(await s.queued(prefix)).toBe(0);
    }, 60_000);

    it('a waiter whose process is killed leaves the queue after its place expires (3 polls), never sooner', async () => {
      const prefix = uniquePrefix('wait-crash');
      const mine = permitsOn(prefix, 1, { pollMs: 100 });
      const holder = await mine.acquire('crash');
      const victim = await startWorker(...s.worker);
      void waitIn(victim, { prefix, key: 'crash', label: 'victim', limit: 1, cost: 1, holdMs: 0, pollMs: 100 });
      await untilQueued(prefix, 1);
      victim.kill('SIGKILL');
      await new Promise((resolve) => victim.once('exit', resolve));
      const killedMs = performance.now();
      let grantedMs = 0;
      const next = mine.acquire('crash').then(note(() => (grantedMs = performance.now())));
      await untilQueued(prefix, 2);
      await holder.permit.release();
      const d = await next;
      // The dead waiter held the head for up to 300 ms after its last ask (before the kill).
      expect(grantedMs - killedMs).toBeLessThan(1500);
      expect(grantedMs - killedMs).toBeGreaterThan(100);
      await d.permit.release();
      expect(await s.queued(prefix)).toBe(0);
    }, 30_000);
  });
}

const DRIVERS = ['pg', 'postgres'] as const;

for (const driver of DRIVERS) {
  describe.skipIf(!postgresUp)(`postgres permit store, ${driver}: waiting`, () => {
    const schema = uniqueSchema(`wait_${driver}`);
    const pool = new pg.Pool({ ...PG_CONFIG, max: 8 });
    const sql = postgres({ ...PG_CONFIG, max: 8, onnotice: () => {} });
    let held: pg.PoolClient | undefined;
    let listener: PostgresListener;
    const client = driver === 'pg' ? fromPg(pool) : fromPostgres(sql);
    const count = async (table: string, prefix: string) =>
      Number(
        (await pool.query(`SELECT count(*) AS n FROM "${schema}"."${table}" WHERE key LIKE $1`, [`${prefix}:%`]))
          .rows[0]?.n,
      );
    beforeAll(async () => {
      if (driver === 'pg') {
        held = await pool.connect();
        listener = fromPgListener(held);
      } else {
        listener = fromPostgresListener(sql);
      }
      await postgresPermitStore({ client, schema }).migrate();
    });
    afterAll(async () => {
      held?.release();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await Promise.all([pool.end(), sql.end()]);
    });

    waitingSuite(
      () => ({
        store: (watched) => postgresPermitStore({ client, schema, ...(watched ? { listener } : {}) }),
        queued: (prefix) => count('floodgate_permits__fg_queue', prefix),
        rows: async (prefix) =>
          (await count('floodgate_permits__fg_queue', prefix)) +
          (await count('floodgate_permits', prefix)) +
          (await count('floodgate_permits__fg_keys', prefix)),
        worker: [driver, schema],
      }),
      { notifiedAcrossProcesses: true },
    );

    it('forged NOTIFY payloads on a key channel grant nothing out of turn', async () => {
      const prefix = uniquePrefix('wait-forged');
      const inner = postgresPermitStore({ client, schema, listener });
      // Counts the asks: a forged wake does reach the waiters (they ask again), and grants nothing.
      let asks = 0;
      const store = {
        ...inner,
        wait: (key: string, a: Parameters<typeof inner.wait>[1]) => {
          asks++;
          return inner.wait(key, a);
        },
      };
      const permits = createPermits({
        store,
        policy: concurrency({ limit: 1, leaseMs: 30_000 }),
        prefix,
        pollMs: 5000,
      });
      const holder = await permits.acquire('f');
      const order: string[] = [];
      const first = permits.acquire('f').then(note(() => order.push('first')));
      for (let i = 0; i < 200 && (await count('floodgate_permits__fg_queue', prefix)) < 1; i++) await pause(5);
      const second = permits.acquire('f').then(note(() => order.push('second')));
      for (let i = 0; i < 200 && (await count('floodgate_permits__fg_queue', prefix)) < 2; i++) await pause(5);
      const storageKey = (
        await pool.query(`SELECT key FROM "${schema}".floodgate_permits__fg_keys WHERE key LIKE $1`, [`${prefix}:%`])
      ).rows[0]?.key as string;
      const channel = permitChannel(schema, 'floodgate_permits', storageKey);
      await pause(100);
      const before = asks;
      // Tickets that name everyone, garbage, and huge numbers: each waiter asks again, and stays queued.
      for (const payload of ['999999', '1', '2', 'x', '', '-1', '1e9', '9'.repeat(40), "'; DROP TABLE x; --"]) {
        await pool.query('SELECT pg_notify($1, $2)', [channel, payload]);
      }
      await pause(200);
      expect(asks).toBeGreaterThan(before);
      expect(order).toEqual([]);
      expect(await count('floodgate_permits__fg_queue', prefix)).toBe(2);
      expect((await permits.limit('f')).allowed).toBe(false);
      await holder.permit.release();
      await (await first).permit.release();
      await (await second).permit.release();
      expect(order).toEqual(['first', 'second']);
    });

    it('a listener that cannot LISTEN leaves waiters to their poll', async () => {
      const closed = new pg.Client(PG_CONFIG);
      await closed.connect();
      await closed.end();
      const permits = createPermits({
        store: postgresPermitStore({ client, schema, listener: fromPgListener(closed) }),
        policy: concurrency({ limit: 1, leaseMs: 30_000 }),
        prefix: uniquePrefix('wait-no-listener'),
        pollMs: 50,
      });
      const holder = await permits.acquire('p');
      const next = permits.acquire('p', { timeoutMs: 5000 });
      await pause(20);
      await holder.permit.release();
      const d = await next;
      expect(d.allowed).toBe(true);
      await d.permit.release();
    });

    it('refuses a listener that is not one, and a pg client without LISTEN support, by name', () => {
      expect(() => postgresPermitStore({ client, schema, listener: {} as PostgresListener })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'listener' }),
      );
      expect(() => fromPgListener({} as never)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
      expect(() => fromPostgresListener({} as never)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    });
  });
}

describe('sqlite permit store: waiting', () => {
  const directory = mkdtempSync(join(tmpdir(), 'floodgate-permit-wait-'));
  const file = join(directory, 'permits.db');
  const database = new Database(file);
  // A second connection of this process on the same file: its stores' releases wake the first's waiters.
  const other = new Database(file);
  sqlitePermitStore({ database }).migrate();
  const count = (table: string, prefix: string) =>
    (database.prepare(`SELECT count(*) AS n FROM ${table} WHERE key LIKE ?`).get(`${prefix}:%`) as { n: number }).n;
  afterAll(() => {
    database.close();
    other.close();
    rmSync(directory, { recursive: true, force: true });
  });

  waitingSuite(
    () => ({
      store: (watched) => sqlitePermitStore({ database: watched ? database : other }),
      queued: async (prefix) => count('floodgate_permits__fg_queue', prefix),
      rows: async (prefix) =>
        count('floodgate_permits__fg_queue', prefix) +
        count('floodgate_permits', prefix) +
        count('floodgate_permits__fg_keys', prefix),
      worker: ['sqlite', file],
    }),
    { notifiedAcrossProcesses: false },
  );

  it('a release on another connection of this process to the file wakes a waiter at once', async () => {
    const prefix = uniquePrefix('wait-file');
    const policy = concurrency({ limit: 1, leaseMs: 30_000 });
    const waiting = createPermits({ store: sqlitePermitStore({ database }), policy, prefix, pollMs: 5000 });
    const releasing = createPermits({ store: sqlitePermitStore({ database: other }), policy, prefix, pollMs: 5000 });
    const holder = await releasing.acquire('w');
    let grantedMs = 0;
    const next = waiting.acquire('w').then(note(() => (grantedMs = performance.now())));
    await pause(50);
    const releasedMs = performance.now();
    await holder.permit.release();
    await (await next).permit.release();
    expect(grantedMs - releasedMs).toBeLessThan(1000);
  });
});
