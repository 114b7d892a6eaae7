import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gcra, leakyBucket, type Policy, tokenBucket } from '../../src/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/model/compile.js';
import { encodeKey } from '../../src/stores/index.js';
import { type PostgresClient, type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { PRUNE_GRACE_US, stateKey } from '../../src/stores/sql/common.js';
import type { StoreRequest, StoreResult } from '../../src/stores/store.js';
import { modelStore, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, DRIVERS, requirePostgres, uniqueSchema } from './sql/postgres-env.js';
import { countingStatements, decisionFields, tableRows } from './sql/statement-kit.js';

/**
 * The meter statements (meter-fast.ts) against the decide function and the model: the same random calls
 * through a store that sends every lone single-meter call to them, a store that sends every call to the
 * decide function and a store that picks one or the other at random, each on its own table, must give the
 * model's decisions and leave the same rows (state and expiry) behind, pruning included.
 */
const available = await requirePostgres();
const schema = uniqueSchema('meter');
const run = promisify(execFile);
const worker = fileURLToPath(new URL('./sql/postgres-worker.ts', import.meta.url));

/** Meter policies of every shape: GCRA, continuous bucket, leaky meter and queue, penalty boxes, a fractional burst. */
const POLICIES: Policy[] = [
  gcra({ limit: 2, periodMs: 1000, name: 'g' }),
  gcra({ limit: 2, periodMs: 900, burst: 3, blockMs: 30_000, name: 'gb' }),
  gcra({ limit: 1.5, periodMs: 400, name: 'frac' }),
  tokenBucket({ capacity: 2, refillAmount: 1, refillIntervalMs: 333, name: 't' }),
  leakyBucket({ capacity: 2, leakPerSecond: 2, name: 'lm' }),
  leakyBucket({ capacity: 3, leakPerSecond: 2, mode: 'queue', name: 'lq' }),
  leakyBucket({ capacity: 2, leakPerSecond: 1, mode: 'queue', blockMs: 250, name: 'lqb' }),
];
const COMPILED = POLICIES.map(compilePolicy);
const KEYS = ['a', 'b', 'ключ {c}'];

const counting = (client: PostgresClient) => countingStatements(client, ['meter', 'meter_read']);
const strip = decisionFields;

describe.skipIf(!available)('postgres meter statements', () => {
  let connection: Connection;
  beforeAll(() => {
    connection = connect('pg', 4);
  });
  afterAll(async () => {
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  const rows = (table: string, prefix: string) => tableRows(connection, schema, table, prefix);

  it('random calls: meter statements, decide function and a mix of both agree with the model, row for row', async () => {
    const tables = { fast: 'm_fast', function: 'm_function', mixed: 'm_mixed' };
    const fast = counting(connection.client);
    const slow = counting(connection.client);
    const mixedFast = counting(connection.client);
    const stores = {
      fast: postgresStore({ client: fast.client, schema, table: tables.fast }),
      function: postgresStore({ client: slow.client, schema, table: tables.function, fastPath: false }),
      mixedFast: postgresStore({ client: mixedFast.client, schema, table: tables.mixed }),
      mixedFunction: postgresStore({ client: connection.client, schema, table: tables.mixed, fastPath: false }),
    };
    for (const store of Object.values(stores)) await store.migrate();
    // How often each rare branch was reached, to show the property exercised it.
    const reached = {
      newKeyWrite: 0,
      newKeyRead: 0,
      admitted: 0,
      deniedWithoutBlock: 0,
      penaltyStarted: 0,
      blocked: 0,
      queueDelay: 0,
      reservationDelay: 0,
      exceedsCapacity: 0,
      checkOrCostZero: 0,
      pruned: 0,
    };
    const call = fc.record({
      key: fc.constantFrom(0, 0, 0, 1, 2),
      // One of the run's two policies (see below).
      policy: fc.integer({ min: 0, max: 1 }),
      cost: fc.oneof(fc.constantFrom(0, 1, 1, 1, 2, 7), fc.double({ min: 1e-9, max: 3, noNaN: true })),
      commit: fc.constantFrom(true, true, true, false),
      maxDelayUs: fc.constantFrom(0, 0, 0, 500_000, 5_000_000),
      // Mostly close together, sometimes µs apart, sometimes minutes (rows expire, new ones prune them).
      advanceUs: fc.oneof(
        { arbitrary: fc.integer({ min: 0, max: 3 }), weight: 6 },
        { arbitrary: fc.integer({ min: 0, max: 300_000 }), weight: 3 },
        // A policy's interval or penalty exactly: calls that land on the boundary of admission or of a block.
        { arbitrary: fc.constantFrom(250_000, 266_667, 333_000, 450_000, 500_000, 1_000_000, 30_000_000), weight: 3 },
        { arbitrary: fc.integer({ min: 0, max: 400_000_000 }), weight: 1 },
      ),
      viaFunction: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        // Two policies a run, so that calls meet on a key often enough to be denied and blocked; the
        // penalty boxes more often, their writes being the rarest.
        fc.tuple(fc.constantFrom(1, 1, 1, 6, 6, 0, 2, 3, 4, 5), fc.constantFrom(0, 1, 2, 3, 4, 5, 6)),
        fc.array(call, { minLength: 20, maxLength: 60, size: 'max' }),
        // Starting a few seconds before a whole minute, expiries (rounded up to minutes) tell more apart.
        fc.integer({ min: 0, max: 6_000_000 }),
        async (pair, calls, beforeMinuteUs) => {
          const prefix = uniquePrefix('meter');
          const model = modelStore();
          // Behind the server's clock, so rows are pruned on this one (the earlier of the two).
          let nowUs = Date.UTC(2024, 0, 1) * 1000 - beforeMinuteUs;
          for (const [i, c] of calls.entries()) {
            nowUs += c.advanceUs;
            const compiled = COMPILED[pair[c.policy] as number] as CompiledPolicy;
            const request: StoreRequest = {
              prefix,
              key: KEYS[c.key] as string,
              policies: [compiled],
              cost: c.cost,
              commit: c.commit,
              nowUs,
              maxDelayUs: c.maxDelayUs,
            };
            const row = stateKey(prefix, encodeKey(request.key), compiled).slice(prefix.length);
            const before = await rows(tables.fast, prefix);
            const want = strip(await model.decide(request));
            const where = `call ${i} at ${nowUs}: ${JSON.stringify({ ...c, key: request.key, name: compiled.name })}`;
            expect(strip(await stores.fast.decide(request)), where).toEqual(want);
            expect(strip(await stores.function.decide(request)), where).toEqual(want);
            const mixed = c.viaFunction ? stores.mixedFunction : stores.mixedFast;
            expect(strip(await mixed.decide(request)), where).toEqual(want);

            const after = {
              fast: await rows(tables.fast, prefix),
              function: await rows(tables.function, prefix),
              mixed: await rows(tables.mixed, prefix),
            };
            // Every path leaves the same rows, states and expiries. Rows a minute past their expiry are
            // housekeeping's (they decide like missing ones): which of them a prune takes first, among equal
            // expiries, depends on where the table put them.
            const kept = (found: Map<string, [number[], number]>) =>
              new Map([...found].filter(([, [, expiresAt]]) => expiresAt > nowUs - PRUNE_GRACE_US));
            expect(kept(after.fast), where).toEqual(kept(after.function));
            expect(kept(after.mixed), where).toEqual(kept(after.function));
            const stored = after.fast.get(row)?.[0];
            if (stored !== undefined) expect(stored, where).toEqual(model.states.get(`${prefix}${row}`));

            const e = want.evaluations[0] as (typeof want.evaluations)[number];
            const writes = c.commit && c.cost > 0 && e.reason !== 'exceeds-capacity';
            if (!before.has(row)) reached[writes ? 'newKeyWrite' : 'newKeyRead']++;
            if (before.size > after.fast.size) reached.pruned++;
            if (!c.commit || c.cost === 0) reached.checkOrCostZero++;
            if (e.reason === 'exceeds-capacity') reached.exceedsCapacity++;
            if (e.reason === 'blocked') reached.blocked++;
            if (e.reason === 'ok' && writes) reached.admitted++;
            if (e.reason === 'limit' && writes)
              reached[compiled.blockUs > 0 ? 'penaltyStarted' : 'deniedWithoutBlock']++;
            if (e.allowed && e.delayUs > 0) reached[compiled.c === 1 ? 'queueDelay' : 'reservationDelay']++;
          }
        },
      ),
      // 60 runs reached the rarest branch (a call in a penalty box) 3 to 25 times: 120 keep it above 5.
      { numRuns: 120 },
    );
    for (const [branch, count] of Object.entries(reached)) expect(count, branch).toBeGreaterThanOrEqual(5);
    // The lone single-meter calls went through the meter statements, and only there.
    expect(fast.counts.decide).toBe(0);
    expect(fast.counts.meter).toBeGreaterThan(200);
    // Both forms of the write statement were sent: with a penalty box and without.
    expect(fast.counts.meter_box).toBeGreaterThan(20);
    expect((fast.counts.meter ?? 0) - (fast.counts.meter_box ?? 0)).toBeGreaterThan(20);
    expect(fast.counts.meter_read).toBeGreaterThan(100);
    expect([slow.counts.meter, slow.counts.meter_read]).toEqual([0, 0]);
    expect(mixedFast.counts.meter).toBeGreaterThan(50);
    for (const store of Object.values(stores)) await store.close();
  }, 300_000);

  it('the state each call decided on, at the server clock, is the one its write was computed from', async () => {
    // With the server's clock, each decision is the model's on the state returned, at the time returned: a
    // run of calls that admits exactly the burst, whatever their timing, and denies the rest.
    const store = postgresStore({ client: connection.client, schema, table: 'm_clock' });
    await store.migrate();
    const policy = compilePolicy(gcra({ limit: 3, periodMs: 3_600_000, blockMs: 60_000, name: 'slow' }));
    const prefix = uniquePrefix('clock');
    const decide = (key: string, commit = true): Promise<StoreResult> =>
      store.decide({ prefix, key, policies: [policy], cost: 1, commit, nowUs: undefined, maxDelayUs: 0 });
    const results: StoreResult[] = [];
    for (let i = 0; i < 6; i++) results.push(await decide('k'));
    expect(results.map((r) => [r.allowed, r.evaluations[0]?.reason])).toEqual([
      [true, 'ok'],
      [true, 'ok'],
      [true, 'ok'],
      [false, 'limit'],
      [false, 'blocked'],
      [false, 'blocked'],
    ]);
    const times = results.map((r) => r.nowUs as number);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    const [row] = await connection.sql(`SELECT state, expires_at FROM "${schema}".m_clock WHERE starts_with(key, $1)`, [
      `${prefix}:`,
    ]);
    // The penalty box started at the fourth call's time, on the TAT of the first three.
    expect((row?.state as number[] | undefined)?.map(Number)).toEqual([
      (times[3] as number) + 60_000_000,
      (times[0] as number) + 3_600_000_000,
    ]);
    const check = await decide('k', false);
    expect([check.allowed, check.evaluations[0]?.reason]).toEqual([false, 'blocked']);
    const fresh = await decide('never', false);
    expect([fresh.allowed, fresh.evaluations[0]?.remaining]).toEqual([true, 2]);
    await store.close();
  });

  it('a row the decide function left without a state decides like a missing key, on both paths', async () => {
    // The decide function inserts a row with a NULL state to lock a key of a batch, and leaves it so when
    // it writes nothing there (a denied batch): such a row is a missing key to every path.
    const compiled = compilePolicy(gcra({ limit: 2, periodMs: 1000, blockMs: 5000, name: 'n' }));
    const stores = {
      fast: postgresStore({ client: connection.client, schema, table: 'm_null_fast' }),
      function: postgresStore({ client: connection.client, schema, table: 'm_null_function', fastPath: false }),
    };
    for (const store of Object.values(stores)) await store.migrate();
    const prefix = uniquePrefix('null');
    for (const clock of ['caller', 'server'] as const) {
      const key = `key-${clock}`;
      const row = stateKey(prefix, encodeKey(key), compiled);
      for (const table of ['m_null_fast', 'm_null_function']) {
        await connection.sql(`INSERT INTO "${schema}"."${table}" (key, state, expires_at) VALUES ($1, NULL, 0)`, [row]);
      }
      // A check (the read statement), then a limit (the write statement), each the model's on a missing key.
      for (const commit of [false, true]) {
        const nowUs = clock === 'caller' ? Date.UTC(2031, 0, 1) * 1000 : undefined;
        const request: StoreRequest = { prefix, key, policies: [compiled], cost: 1, commit, nowUs, maxDelayUs: 0 };
        const fast = await stores.fast.decide(request);
        const want = strip(await modelStore().decide({ ...request, nowUs: fast.nowUs }));
        expect(strip(fast), `${clock}'s clock, commit ${commit}`).toEqual(want);
        expect([want.allowed, want.evaluations[0]?.remaining]).toEqual([true, 1]);
        if (clock === 'caller') expect(strip(await stores.function.decide(request))).toEqual(want);
        if (commit) {
          // The admission is written: the state a missing key gets, [0, now + T].
          const found = await rows('m_null_fast', prefix);
          expect(found.get(row.slice(prefix.length))?.[0]).toEqual([0, (fast.nowUs as number) + compiled.a]);
          if (clock === 'caller') {
            expect(found.get(row.slice(prefix.length))).toEqual(
              (await rows('m_null_function', prefix)).get(row.slice(prefix.length)),
            );
          }
        }
      }
    }
    for (const store of Object.values(stores)) await store.close();
  });

  it('fastPath must be a boolean: anything else is ERR_INVALID_OPTION naming it', () => {
    const client = { query: () => Promise.resolve([]) };
    expect(() => postgresStore({ client, fastPath: 'yes' as unknown as boolean })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'fastPath' }),
    );
  });

  for (const driver of DRIVERS) {
    it(`processes calling one at a time admit exactly the limit, on new keys and on one hot key (${driver})`, async () => {
      const setup = connect(driver, 1);
      let store: PostgresStore | undefined;
      try {
        store = postgresStore({ client: setup.client, schema, table: 'm_race' });
        await store.migrate();
      } finally {
        await store?.close();
        await setup.close();
      }
      const prefix = uniquePrefix(`race-${driver}`);
      const many = (mode: string, key: string) =>
        Promise.all(
          [1, 2, 3, 4].map(() =>
            run(process.execPath, ['--import', 'tsx', worker, driver, schema, 'm_race', key, '120', mode], {
              encoding: 'utf8',
            }),
          ),
        );
      // 4 processes take 120 new keys in the same order, one call at a time: each key admits one call a
      // day, so exactly 120 are admitted, whichever process inserted each row first.
      const fresh = await many('new-keys', prefix);
      expect(fresh.map((r) => Number(r.stdout)).reduce((a, b) => a + b, 0)).toBe(120);
      // 480 calls, one at a time per process, on a key that admits 100 a day.
      const hot = await many('hot-key', prefix);
      expect(hot.map((r) => Number(r.stdout)).reduce((a, b) => a + b, 0)).toBe(100);
    }, 120_000);
  }
});
