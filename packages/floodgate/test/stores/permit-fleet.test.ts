import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AcquireReply, concurrency, createPermits, type PermitStore } from '../../src/index.js';
import { fromPg, postgresPermitStore } from '../../src/stores/postgres/index.js';
import { fromIoredis, redisPermitStore } from '../../src/stores/redis/index.js';
import { sqlitePermitStore } from '../../src/stores/sqlite/index.js';
import { uniquePrefix } from '../../src/testing/index.js';
import { runPermitConformanceSuite } from '../permits/permit-conformance.js';
import type {
  PermitHoldReply,
  PermitResumeReply,
  PermitRunReply,
  PermitWorkerConfig,
  PermitWorkerMessage,
  PermitWorkerStore,
} from './fixtures/permit-fleet-worker.js';
import { redisAvailable, requireServer, startCluster, type TestCluster } from './redis/servers.js';
import { PG_CONFIG, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

// Concurrency permits held by several processes at once on each shared store: Redis, a Redis Cluster
// started here, PostgreSQL and a SQLite file. Timing assertions are bounds and orderings with wide
// margins (the machine may be loaded), never tight durations.

const WORKER = fileURLToPath(new URL('./fixtures/permit-fleet-worker.ts', import.meta.url));
/** Two of the four processes run with clocks 90 s off, one ahead and one behind. */
const SKEWS_MS = [0, 90_000, -90_000, 0];

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const postgresUp = await requirePostgres();
let cluster: TestCluster | undefined;
let clusterError: unknown;
try {
  cluster = await startCluster();
} catch (error) {
  clusterError = error;
}
const clusterUp = requireServer(
  cluster !== undefined,
  `a Redis Cluster started from redis-server (${String(clusterError)})`,
);
const directory = mkdtempSync(join(tmpdir(), 'floodgate-permits-'));
const schema = uniqueSchema('permits');

afterAll(async () => {
  await cluster?.stop();
  rmSync(directory, { recursive: true, force: true });
});

function start(config: PermitWorkerConfig): Promise<ChildProcess> {
  const worker = fork(WORKER, [JSON.stringify(config)], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    worker.once('message', () => resolve(worker));
    worker.once('exit', (code) => reject(new Error(`a permit worker exited (${code}) before it was ready`)));
  });
}

function ask<R>(worker: ChildProcess, message: PermitWorkerMessage): Promise<R & { error?: string }> {
  return new Promise((resolve) => {
    worker.once('message', (reply: R & { error?: string }) => resolve(reply));
    worker.send(message);
  });
}

function stop(worker: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (worker.exitCode !== null || worker.signalCode !== null) return resolve();
    worker.once('exit', () => resolve());
    worker.kill('SIGKILL');
  });
}

/** The most cost in flight at once over all spans: a sweep over enter (+cost) and exit (−cost) events. */
function maxInFlight(spans: readonly (readonly [number, number, number, ...number[]])[]): number {
  const events = spans.flatMap(([enter, exit, cost]) => [
    [enter, cost],
    [exit, -cost],
  ]);
  // At equal times exits first: a span that ends when another starts did not overlap it.
  events.sort((a, b) => (a[0] as number) - (b[0] as number) || (a[1] as number) - (b[1] as number));
  let now = 0;
  let max = 0;
  for (const [, delta] of events) {
    now += delta as number;
    max = Math.max(max, now);
  }
  return max;
}

interface Target {
  name: string;
  available: boolean;
  worker: () => PermitWorkerStore;
  /** The test process's own store, and how to close it. */
  open: () => Promise<{ store: PermitStore; close: () => Promise<void> }>;
  conformance?: boolean;
}

const TARGETS: Target[] = [
  {
    name: 'Redis',
    available: redisUp,
    worker: () => ({ kind: 'redis' }),
    open: async () => {
      const client = new Redis({ host: '127.0.0.1', port: 6379 });
      return {
        store: redisPermitStore({ client: fromIoredis(client) }),
        close: async () => void (await client.quit()),
      };
    },
  },
  {
    name: 'Redis Cluster',
    available: clusterUp,
    worker: () => ({ kind: 'cluster', ports: [...(cluster as TestCluster).ports] }),
    open: async () => {
      const client = new Cluster((cluster as TestCluster).ports.map((port) => ({ host: '127.0.0.1', port })));
      return {
        store: redisPermitStore({ client: fromIoredis(client) }),
        close: async () => void (await client.quit()),
      };
    },
    conformance: true,
  },
  {
    name: 'PostgreSQL',
    available: postgresUp,
    worker: () => ({ kind: 'postgres', schema }),
    open: async () => {
      const pool = new pg.Pool({ ...PG_CONFIG, max: 4 });
      const store = postgresPermitStore({ client: fromPg(pool), schema });
      await store.migrate();
      return {
        store,
        close: async () => {
          await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          await pool.end();
        },
      };
    },
  },
  {
    name: 'SQLite',
    available: true,
    worker: () => ({ kind: 'sqlite', file: join(directory, 'permits.db') }),
    open: async () => {
      const database = new Database(join(directory, 'permits.db'));
      const store = sqlitePermitStore({ database, busyTimeoutMs: 20_000 });
      store.migrate();
      return { store, close: async () => void database.close() };
    },
  },
];

/** A store that keeps the last granted reply (its times on the store's clock). */
function recording(store: PermitStore): { store: PermitStore; last: () => AcquireReply | undefined } {
  let last: AcquireReply | undefined;
  return {
    last: () => last,
    store: {
      name: store.name,
      acquire: async (key, args) => {
        last = await store.acquire(key, args);
        return last;
      },
      refresh: (key, args) => store.refresh(key, args),
      release: (key, args) => store.release(key, args),
    },
  };
}

for (const target of TARGETS) {
  describe.skipIf(!target.available)(`permits across processes: ${target.name}`, () => {
    const workers: ChildProcess[] = [];
    let local: { store: PermitStore; close: () => Promise<void> };
    beforeAll(async () => {
      local = await target.open();
      workers.push(...(await Promise.all(SKEWS_MS.map((skewMs) => start({ store: target.worker(), skewMs })))));
    }, 120_000);
    afterAll(async () => {
      await Promise.all(workers.map(stop));
      await local?.close();
    });

    if (target.conformance === true) {
      runPermitConformanceSuite({ describe, it }, { store: () => local.store, randomRuns: 4 });
    }

    it('holders that record their own enter and exit never overlap beyond the limit, two of four clocks 90 s off', async () => {
      const limit = 5;
      const job = { prefix: uniquePrefix('fleet'), key: 'shared', limit, leaseMs: 60_000 };
      const replies = await Promise.all(
        workers.map((w) =>
          ask<PermitRunReply>(w, { op: 'run', ...job, attempts: 100, lanes: 4, costs: [1, 2, 1, 3], holdMs: 3 }),
        ),
      );
      expect(replies.map((r) => r.error)).toEqual(workers.map(() => undefined));
      // The skews took effect: each process's own clock was that far off.
      for (const [i, r] of replies.entries())
        expect(Math.abs(r.skewSeenMs - (SKEWS_MS[i] as number))).toBeLessThan(5000);
      const spans = replies.flatMap((r) => r.spans);
      const max = maxInFlight(spans);
      const refused = replies.reduce((sum, r) => sum + r.refused, 0);
      console.log(
        `${target.name}: ${spans.length} permits held by 4 processes × 4 lanes, ${refused} refused, at most ${max} of ${limit} in flight by the holders' own clocks; most reported by a decision ${Math.max(...replies.map((r) => r.maxReported))}`,
      );
      expect(spans.length).toBeGreaterThan(40);
      expect(refused).toBeGreaterThan(0);
      // Every grant had a fence of its own.
      expect(new Set(spans.map((s) => s[3])).size).toBe(spans.length);
      expect(max).toBeLessThanOrEqual(limit);
      // The limit was reached, so the check had something to catch.
      expect(max).toBeGreaterThanOrEqual(limit - 1);
      for (const r of replies) expect(r.maxReported).toBeLessThanOrEqual(limit);
      // Every permit came back: the whole limit is free again (nothing counted but live leases).
      const permits = createPermits({
        store: local.store,
        policy: concurrency({ limit, leaseMs: 60_000 }),
        prefix: job.prefix,
      });
      const all = await permits.limit('shared', { cost: limit });
      expect([all.allowed, all.inFlight]).toEqual([true, limit]);
      await all.permit?.release();
    }, 120_000);

    it('fences strictly increase in the order the permits were held (limit 1, two of four clocks 90 s off)', async () => {
      const job = { prefix: uniquePrefix('fences'), key: 'one', limit: 1, leaseMs: 60_000 };
      const replies = await Promise.all(
        workers.map((w) =>
          ask<PermitRunReply>(w, { op: 'run', ...job, attempts: 150, lanes: 2, costs: [1], holdMs: 1 }),
        ),
      );
      expect(replies.map((r) => r.error)).toEqual(workers.map(() => undefined));
      // One at a time: the spans follow each other, and so must their fences.
      const spans = replies.flatMap((r) => r.spans).sort((a, b) => a[0] - b[0]);
      expect(maxInFlight(spans)).toBe(1);
      let rises = 0;
      for (let i = 1; i < spans.length; i++) if ((spans[i]?.[3] as number) > (spans[i - 1]?.[3] as number)) rises++;
      console.log(
        `${target.name}: ${spans.length} permits held one at a time by 4 processes; fence rose ${rises} of ${spans.length - 1} times in the order held`,
      );
      expect(spans.length).toBeGreaterThan(20);
      expect(rises).toBe(spans.length - 1);
    }, 120_000);

    it("a holder killed with SIGKILL frees its permit after leaseMs on the store's clock, never sooner", async () => {
      const leaseMs = 1500;
      const job = { prefix: uniquePrefix('crash'), key: 'crash', limit: 1, leaseMs };
      // The victim's clock runs 90 s behind: had its clock set the lease, the lease would be long over.
      const victim = await start({ store: target.worker(), skewMs: -90_000 });
      const grant = await ask<PermitHoldReply>(victim, { op: 'hold', ...job });
      expect(grant.error).toBeUndefined();
      victim.kill('SIGKILL');
      await new Promise((resolve) => victim.once('exit', resolve));
      const rec = recording(local.store);
      const permits = createPermits({
        store: rec.store,
        policy: concurrency({ limit: 1, leaseMs }),
        prefix: job.prefix,
      });
      let polls = 0;
      let lastRefusalUs = 0;
      for (;;) {
        const d = await permits.limit('crash');
        const at = rec.last()?.nowUs as number;
        if (d.permit !== undefined) {
          const recoveryUs = at - grant.nowUs;
          console.log(
            `${target.name}: SIGKILL recovery ${(recoveryUs / 1000).toFixed(1)} ms after the grant on the store's clock (lease ${leaseMs} ms; last refusal at ${((lastRefusalUs - grant.nowUs) / 1000).toFixed(1)} ms; ${polls} polls); fences ${grant.fence} → ${d.permit.fence}`,
          );
          // Never sooner than the lease...
          expect(recoveryUs).toBeGreaterThanOrEqual(leaseMs * 1000);
          expect(at).toBeGreaterThanOrEqual(grant.expiresAtUs);
          // ... and the first call after the lease ran out got it: the refusal before it came before expiry.
          expect(lastRefusalUs).toBeLessThan(grant.expiresAtUs);
          // Within the lease plus one polling round (25 ms) and a generous slack for a loaded machine.
          expect(recoveryUs).toBeLessThan((leaseMs + 1500) * 1000);
          expect(d.permit.fence).toBeGreaterThan(grant.fence);
          await d.permit.release();
          break;
        }
        lastRefusalUs = at;
        polls++;
        expect(d.retryAfterMs).toBeGreaterThan(0);
        expect(d.retryAfterMs).toBeLessThanOrEqual(leaseMs);
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    }, 120_000);

    it('a SIGSTOPped holder that resumes after losing its lease has a lower fence than the current holder', async () => {
      const leaseMs = 1000;
      const job = { prefix: uniquePrefix('stall'), key: 'stall', limit: 1, leaseMs };
      // The stalled holder's clock runs 90 s ahead: had its clock made the fence, its fence would be larger.
      const stalled = await start({ store: target.worker(), skewMs: 90_000 });
      try {
        const grant = await ask<PermitHoldReply>(stalled, { op: 'hold', ...job });
        expect(grant.error).toBeUndefined();
        stalled.kill('SIGSTOP');
        const permits = createPermits({
          store: local.store,
          policy: concurrency({ limit: 1, leaseMs: 60_000 }),
          prefix: job.prefix,
        });
        let current: Awaited<ReturnType<typeof permits.limit>>;
        for (;;) {
          current = await permits.limit('stall');
          if (current.permit !== undefined) break;
          await new Promise((resolve) => setTimeout(resolve, 25));
        }
        stalled.kill('SIGCONT');
        const after = await ask<PermitResumeReply>(stalled, { op: 'resume' });
        console.log(
          `${target.name}: stalled holder's fence ${after.fence} < current holder's ${current.permit.fence}; on resuming: signal aborted ${after.aborted}, refresh ${after.refreshed}, release ${after.released}`,
        );
        expect(after.error).toBeUndefined();
        expect(after.fence).toBe(grant.fence);
        expect(after.fence).toBeLessThan(current.permit.fence);
        expect(after.aborted).toBe(true);
        // The lost lease is never taken back, and the current holder keeps the permit.
        expect(after.refreshed).toBe(false);
        expect(after.released).toBe(false);
        expect((await permits.limit('stall')).allowed).toBe(false);
        expect(await current.permit.release()).toBe(true);
      } finally {
        stalled.kill('SIGCONT');
        await stop(stalled);
      }
    }, 120_000);
  });
}
