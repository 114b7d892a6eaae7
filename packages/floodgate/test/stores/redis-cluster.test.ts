import { strictEqual } from 'node:assert/strict';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, slidingLog } from '../../src/index.js';
import { encodeKey, storageKey } from '../../src/stores/index.js';
import { DECIDE_SCRIPT_SHA, hashSlot, meterScriptFor } from '../../src/stores/redis/index.js';
import { runConformanceSuite, runPlainDataSuite, uniquePrefix } from '../../src/testing/index.js';
import { connectCluster, DRIVERS, type Driver, holdStore } from './redis/clients.js';
import { HOSTILE_KEYS } from './redis/hostile-keys.js';
import { requireServer, startCluster, type TestCluster, waitFor } from './redis/servers.js';

// A real cluster (3 primaries, 3 replicas) of redis-server processes on spare ports, started here.
let cluster: TestCluster | undefined;
let startError: unknown;
try {
  cluster = await startCluster();
} catch (error) {
  startError = error;
}
const available = requireServer(
  cluster !== undefined,
  `a Redis Cluster started from redis-server (${String(startError)})`,
);

afterAll(async () => {
  await cluster?.stop();
});

/** The oldest supported majors' cluster clients get a smoke run: everything but the failover, fewer random runs. */
const OLDER_CLUSTER_DRIVERS: readonly Driver[] = ['ioredis 5', 'node-redis 4'];

for (const driver of [...DRIVERS, ...OLDER_CLUSTER_DRIVERS]) {
  const installed = DRIVERS.includes(driver);
  describe.skipIf(!available)(`redis store, cluster, ${driver}`, () => {
    const held = holdStore(() => connectCluster(driver, (cluster as TestCluster).ports));

    it('the adapter reports a cluster client', () => {
      strictEqual(held.connection.client.cluster, true);
    });

    runConformanceSuite({ describe, it }, { store: () => held.store, randomRuns: installed ? 8 : 3, seed: 100 });
    runPlainDataSuite({ describe, it }, { store: () => held.store });

    it('hostile keys under two policies: one slot each, no CROSSSLOT, no collision', async () => {
      const policies = [
        fixedWindow({ limit: 1, windowMs: 60_000, align: 'first-request', name: 'a' }),
        slidingLog({ limit: 1, windowMs: 60_000, name: 'b' }),
      ];
      const prefix = uniquePrefix('hostile');
      const limiter = createLimiter({ store: held.store, policies, prefix });
      const first = await Promise.all(HOSTILE_KEYS.map((key) => limiter.limit(key)));
      expect(first.map((d) => d.allowed)).toEqual(HOSTILE_KEYS.map(() => true));
      const second = await Promise.all(HOSTILE_KEYS.map((key) => limiter.limit(key)));
      expect(second.map((d) => d.allowed)).toEqual(HOSTILE_KEYS.map(() => false));
      const slots = new Set(HOSTILE_KEYS.map((key) => hashSlot(encodeKey(key))));
      expect(slots.size).toBeGreaterThan(3);
      await Promise.all(HOSTILE_KEYS.map((key) => limiter.reset(key)));
      expect((await limiter.limit(HOSTILE_KEYS[0] as string)).allowed).toBe(true);
      await limiter.reset(HOSTILE_KEYS[0] as string);
    });

    it('sends each script call straight to the primary holding its keys: no MOVED redirection', async () => {
      const nodes = cluster as TestCluster;
      const movedSoFar = async () => {
        const stats = await nodes.onEveryNode('INFO', 'errorstats');
        return stats.reduce((sum, info) => sum + Number(/errorstat_MOVED:count=(\d+)/.exec(info)?.[1] ?? 0), 0);
      };
      const prefix = uniquePrefix('routed');
      const single = createLimiter({ store: held.store, policies: [gcra({ limit: 5, periodMs: 60_000 })], prefix });
      const double = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 5, periodMs: 60_000 }), slidingLog({ limit: 5, windowMs: 60_000 })],
        prefix,
      });
      const keys = Array.from({ length: 64 }, (_, i) => `user-${i}`);
      // Scripts loaded everywhere first: the count below covers EVALSHA; EVAL is covered by the flush test.
      await Promise.all(keys.map((key) => Promise.all([single.limit(key), double.limit(key)])));
      const before = await movedSoFar();
      for (const key of keys) await single.limit(key);
      await Promise.all(keys.map((key) => double.limit(key)));
      expect((await movedSoFar()) - before).toBe(0);
      await Promise.all(keys.map((key) => double.reset(key)));
    });

    it('survives SCRIPT FLUSH on every node: NOSCRIPT falls back to EVAL on the node that lacks it', async () => {
      const nodes = cluster as TestCluster;
      const prefix = uniquePrefix();
      // One meter policy takes its single-call script; two policies take the full one.
      const meter = gcra({ limit: 5, periodMs: 60_000, name: 'g' });
      const METER_SCRIPT_SHA = meterScriptFor(meter)?.sha as string;
      const single = createLimiter({ store: held.store, policies: [meter], prefix });
      const double = createLimiter({
        store: held.store,
        policies: [
          gcra({ limit: 5, periodMs: 60_000, name: 'g' }),
          slidingLog({ limit: 5, windowMs: 60_000, name: 'l' }),
        ],
        prefix,
      });
      // Enough keys to reach every primary.
      const keys = Array.from({ length: 64 }, (_, i) => `user-${i}`);
      await Promise.all(keys.map((key) => single.limit(key)));
      await nodes.onEveryNode('SCRIPT', 'FLUSH');
      for (const sha of [DECIDE_SCRIPT_SHA, METER_SCRIPT_SHA]) {
        expect(await nodes.onEveryNode('SCRIPT', 'EXISTS', sha)).toEqual(nodes.ports.map(() => '0'));
      }
      const decisions = await Promise.all(keys.map((key) => single.limit(key)));
      expect(decisions.map((d) => d.remaining)).toEqual(keys.map(() => 3));
      const both = await Promise.all(keys.map((key) => double.limit(key)));
      expect(both.map((d) => d.remaining)).toEqual(keys.map(() => 2));
      for (const sha of [DECIDE_SCRIPT_SHA, METER_SCRIPT_SHA]) {
        // Every primary ran the script again; replicas only receive its effects.
        const loaded = await nodes.onEveryNode('SCRIPT', 'EXISTS', sha);
        expect(loaded.filter((reply) => reply === '1').length).toBeGreaterThanOrEqual(3);
      }
      await Promise.all(keys.map((key) => double.reset(key)));
    });

    // The older majors' cluster clients run everything but the failover (see OLDER_CLUSTER_DRIVERS).
    if (installed) {
      it('follows a failover: the promoted replica has the state, and gets the scripts by EVAL', async () => {
        const nodes = cluster as TestCluster;
        const prefix = uniquePrefix('failover');
        // Hour-long policies: on a loaded machine the failover may take long, and the keys must not expire
        // meanwhile (an expired key would read as fresh and hide a lost write).
        const meter = gcra({ limit: 5, periodMs: 3_600_000, name: 'g' });
        const METER_SCRIPT_SHA = meterScriptFor(meter)?.sha as string;
        const single = createLimiter({ store: held.store, policies: [meter], prefix });
        const double = createLimiter({
          store: held.store,
          policies: [
            gcra({ limit: 5, periodMs: 3_600_000, name: 'g' }),
            slidingLog({ limit: 5, windowMs: 3_600_000, name: 'l' }),
          ],
          prefix,
        });
        await single.limit('k');
        await double.limit('k');
        const { primary, replica } = await nodes.shardOf(hashSlot(encodeKey('k')));
        // A manual failover waits for the replica to catch up: nothing written before it is lost. It needs a
        // live replication link; on a fresh cluster the link may still be syncing, and a failover asked too
        // early lapses, so wait for the link and ask again until the roles have swapped.
        await waitFor(
          'the replica to be in sync',
          async () => (await nodes.onNode(replica, 'INFO', 'replication')).includes('master_link_status:up'),
          30_000,
        );
        let asked = 0;
        await waitFor(
          'the replica to take over',
          async () => {
            if ((await nodes.onNode(replica, 'ROLE')).startsWith('master')) {
              return (await nodes.onNode(primary, 'ROLE')).startsWith('slave');
            }
            if (asked++ % 20 === 0) await nodes.onNode(replica, 'CLUSTER', 'FAILOVER');
            return false;
          },
          45_000,
        );
        expect((await single.limit('k')).remaining).toBe(2);
        expect((await double.limit('k')).remaining).toBe(1);
        expect(await nodes.onNode(replica, 'SCRIPT', 'EXISTS', METER_SCRIPT_SHA, DECIDE_SCRIPT_SHA)).toBe('1\n1');
        await double.reset('k');
      }, 120_000);
    }

    it('a storage key lives in the slot of its hash tag', async () => {
      const prefix = uniquePrefix();
      const limiter = createLimiter({
        store: held.store,
        policies: [gcra({ limit: 5, periodMs: 60_000, name: 'g' })],
        prefix,
      });
      for (const key of HOSTILE_KEYS) {
        await limiter.limit(key);
        const stored = storageKey(prefix, encodeKey(key), 'g');
        const [slot] = await (cluster as TestCluster).onEveryNode('CLUSTER', 'KEYSLOT', stored);
        strictEqual(Number(slot), hashSlot(encodeKey(key)));
        await limiter.reset(key);
      }
    });
  });
}
