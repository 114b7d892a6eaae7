import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixedWindow, type Policy } from '../../src/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/model/compile.js';
import { encodeKey } from '../../src/stores/index.js';
import { type PostgresClient, type PostgresStore, postgresStore } from '../../src/stores/postgres/index.js';
import { PRUNE_GRACE_US, stateKey } from '../../src/stores/sql/common.js';
import type { StoreRequest, StoreResult } from '../../src/stores/store.js';
import { modelStore, uniquePrefix } from '../../src/testing/index.js';
import { type Connection, connect, DRIVERS, requirePostgres, uniqueSchema } from './sql/postgres-env.js';
import { countingStatements, decisionFields, tableRows } from './sql/statement-kit.js';

/**
 * The fixed-window statements (window-fast.ts) against the decide function and the model: the same random
 * calls through a store that sends every lone single-window call to them, a store that sends every call to
 * the decide function and a store that picks one or the other at random, each on its own table, must give
 * the model's decisions and leave the same rows (state and expiry) behind, pruning included.
 */
const available = await requirePostgres();
const schema = uniqueSchema('window');
const run = promisify(execFile);
const worker = fileURLToPath(new URL('./sql/postgres-worker.ts', import.meta.url));

/** Fixed windows of every variant (each form of the write statement, both alignments), a fractional limit. */
const POLICIES: Policy[] = [
  fixedWindow({ limit: 3, windowMs: 1000, name: 'c' }),
  fixedWindow({ limit: 2, windowMs: 700, blockMs: 3000, name: 'cb' }),
  fixedWindow({ limit: 2.5, windowMs: 500, align: 'first-request', name: 'f' }),
  fixedWindow({ limit: 3, windowMs: 900, countDenied: true, name: 'cd' }),
  fixedWindow({ limit: 2, windowMs: 600, align: 'first-request', countDenied: true, blockMs: 1000, name: 'fcb' }),
  fixedWindow({ limit: 1.5, windowMs: 400, countDenied: true, blockMs: 250, name: 'ccb' }),
  fixedWindow({ limit: 2, windowMs: 800, align: 'first-request', blockMs: 2000, name: 'fb' }),
  fixedWindow({ limit: 3, windowMs: 600, align: 'first-request', countDenied: true, name: 'fc' }),
  // A plain window that denies often: the plain form's denial, which writes nothing.
  fixedWindow({ limit: 1, windowMs: 4000, name: 'one' }),
];
const COMPILED = POLICIES.map(compilePolicy);
const KEYS = ['a', 'b', 'ключ {c}'];

const counting = (client: PostgresClient) => countingStatements(client, ['window', 'window_read']);
const strip = decisionFields;

describe.skipIf(!available)('postgres fixed-window statements', () => {
  let connection: Connection;
  beforeAll(() => {
    connection = connect('pg', 4);
  });
  afterAll(async () => {
    await connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await connection?.close();
  });

  const rows = (table: string, prefix: string) => tableRows(connection, schema, table, prefix);

  it('random calls: fixed-window statements, decide function and a mix of both agree with the model, row for row', async () => {
    const tables = { fast: 'w_fast', function: 'w_function', mixed: 'w_mixed' };
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
      deniedWithoutWrite: 0,
      countedDenied: 0,
      penaltyStarted: 0,
      blocked: 0,
      exceedsCapacity: 0,
      checkOrCostZero: 0,
      fractionalCount: 0,
      pruned: 0,
    };
    const call = fc.record({
      key: fc.constantFrom(0, 0, 0, 1, 2),
      // One of the run's two policies (see below).
      policy: fc.integer({ min: 0, max: 1 }),
      cost: fc.oneof(fc.constantFrom(0, 1, 1, 1, 2, 7), fc.double({ min: 1e-9, max: 3, noNaN: true })),
      commit: fc.constantFrom(true, true, true, false),
      // Mostly close together, sometimes µs apart, sometimes minutes (rows expire, new ones prune them).
      advanceUs: fc.oneof(
        { arbitrary: fc.integer({ min: 0, max: 3 }), weight: 6 },
        { arbitrary: fc.integer({ min: 0, max: 300_000 }), weight: 3 },
        // A window or a penalty exactly: calls that land on the boundary of a window or of a block.
        { arbitrary: fc.constantFrom(250_000, 400_000, 500_000, 600_000, 700_000, 1_000_000, 3_000_000), weight: 3 },
        { arbitrary: fc.integer({ min: 0, max: 400_000_000 }), weight: 1 },
      ),
      viaFunction: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        // Two policies a run, so that calls meet on a key often enough to be denied and blocked.
        fc.tuple(fc.integer({ min: 0, max: POLICIES.length - 1 }), fc.integer({ min: 0, max: POLICIES.length - 1 })),
        fc.array(call, { minLength: 20, maxLength: 60, size: 'max' }),
        // Starting a few seconds before a whole minute, expiries (rounded up to minutes) tell more apart.
        fc.integer({ min: 0, max: 6_000_000 }),
        async (pair, calls, beforeMinuteUs) => {
          const prefix = uniquePrefix('window');
          const model = modelStore();
          // Behind the server's clock, so rows are pruned on this one (the earlier of the two).
          let nowUs = Date.UTC(2024, 0, 1) * 1000 - beforeMinuteUs;
          // The prefix is new, so the table holds none of its rows; after that, the last call's rows.
          let before = new Map<string, [number[], number]>();
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
              maxDelayUs: 0,
            };
            const row = stateKey(prefix, encodeKey(request.key), compiled).slice(prefix.length);
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
            // Every path leaves the same rows, states and expiries (rows a minute past their expiry are
            // housekeeping's: which of them a prune takes first depends on where the table put them).
            const kept = (found: Map<string, [number[], number]>) =>
              new Map([...found].filter(([, [, expiresAt]]) => expiresAt > nowUs - PRUNE_GRACE_US));
            expect(kept(after.fast), where).toEqual(kept(after.function));
            expect(kept(after.mixed), where).toEqual(kept(after.function));
            const stored = after.fast.get(row)?.[0];
            if (stored !== undefined) expect(stored, where).toEqual(model.states.get(`${prefix}${row}`));

            const e = want.evaluations[0] as (typeof want.evaluations)[number];
            const writes = c.commit && c.cost > 0;
            const held = before.get(row)?.[0];
            if (!before.has(row)) reached[writes && e.reason === 'ok' ? 'newKeyWrite' : 'newKeyRead']++;
            if (before.size > after.fast.size) reached.pruned++;
            if (!c.commit || c.cost === 0) reached.checkOrCostZero++;
            if (e.reason === 'exceeds-capacity') reached.exceedsCapacity++;
            if (e.reason === 'blocked') reached.blocked++;
            if (e.reason === 'ok' && writes) reached.admitted++;
            if (held !== undefined && !Number.isInteger(held[2])) reached.fractionalCount++;
            if (e.reason === 'limit' && writes) {
              if (compiled.blockUs > 0) reached.penaltyStarted++;
              else reached[compiled.b === 1 ? 'countedDenied' : 'deniedWithoutWrite']++;
            }
            before = after.fast;
          }
        },
      ),
      { numRuns: 64 },
    );
    for (const [branch, count] of Object.entries(reached)) expect(count, branch).toBeGreaterThanOrEqual(5);
    // The lone single-window calls went through the fixed-window statements (a cost beyond the limit of a
    // window counting denied calls through the decide function), and with fastPath: false never there.
    expect(fast.counts.window).toBeGreaterThan(200);
    expect(fast.counts.window_read).toBeGreaterThan(100);
    // Every form of the write statement was sent, for both alignments: plain, a box, denied calls
    // counted, both.
    for (const aligned of ['0', '1']) {
      for (const form of ['', '_box', '_counted', '_box_counted']) {
        expect(fast.counts[`window${aligned}${form}`], `window${aligned}${form}`).toBeGreaterThan(10);
      }
    }
    expect(fast.counts.decide).toBeLessThan((fast.counts.window ?? 0) / 5);
    expect([slow.counts.window, slow.counts.window_read]).toEqual([0, 0]);
    expect(mixedFast.counts.window).toBeGreaterThan(50);
    for (const store of Object.values(stores)) await store.close();
  }, 300_000);

  it('a count that is not whole is read back exactly, on both clocks', async () => {
    // The reply carries such a count as the bits of its float8: 0.1 + 0.2 is 0.30000000000000004.
    const store = postgresStore({ client: connection.client, schema, table: 'w_bits' });
    await store.migrate();
    const compiled = compilePolicy(
      fixedWindow({ limit: 1.2, windowMs: 3_600_000, align: 'first-request', name: 'bits' }),
    );
    const prefix = uniquePrefix('bits');
    for (const nowUs of [Date.UTC(2031, 0, 1) * 1000, undefined]) {
      const key = `k-${nowUs === undefined ? 'server' : 'caller'}`;
      const decide = (cost: number, commit = true) =>
        store.decide({ prefix, key, policies: [compiled], cost, commit, nowUs, maxDelayUs: 0 });
      const first = await decide(0.1);
      const second = await decide(0.2);
      // 0.30000000000000004 + 0.9 > 1.2: denied, as the model says (a count read back as 0.3 would admit it).
      const check = await decide(0.9, false);
      const at = (r: StoreResult) => r.nowUs as number;
      const model = modelStore();
      await model.decide({
        prefix,
        key,
        policies: [compiled],
        cost: 0.1,
        commit: true,
        nowUs: at(first),
        maxDelayUs: 0,
      });
      await model.decide({
        prefix,
        key,
        policies: [compiled],
        cost: 0.2,
        commit: true,
        nowUs: at(second),
        maxDelayUs: 0,
      });
      const want = strip(
        await model.decide({
          prefix,
          key,
          policies: [compiled],
          cost: 0.9,
          commit: false,
          nowUs: at(check),
          maxDelayUs: 0,
        }),
      );
      expect(strip(check)).toEqual(want);
      expect(want.allowed).toBe(false);
      // The row holds the count the model holds.
      const [row] = await connection.sql(
        `SELECT state FROM "${schema}".w_bits WHERE starts_with(key, $1) AND key LIKE $2`,
        [`${prefix}:`, `%${key}%`],
      );
      expect((row?.state as number[] | undefined)?.map(Number)[2]).toBe(0.1 + 0.2);
    }
    await store.close();
  });

  for (const driver of DRIVERS) {
    it(`processes calling one at a time admit exactly the limit, on new keys and on one hot key (${driver})`, async () => {
      const setup = connect(driver, 1);
      let store: PostgresStore | undefined;
      try {
        store = postgresStore({ client: setup.client, schema, table: 'w_race' });
        await store.migrate();
      } finally {
        await store?.close();
        await setup.close();
      }
      const prefix = uniquePrefix(`race-${driver}`);
      const many = (mode: string, key: string) =>
        Promise.all(
          [1, 2, 3, 4].map(() =>
            run(process.execPath, ['--import', 'tsx', worker, driver, schema, 'w_race', key, '120', mode], {
              encoding: 'utf8',
            }),
          ),
        );
      // 4 processes take 120 new keys in the same order, one call at a time: each key's window admits one
      // call a day, so exactly 120 are admitted, whichever process inserted each row first.
      const fresh = await many('window-new', prefix);
      expect(fresh.map((r) => Number(r.stdout)).reduce((a, b) => a + b, 0)).toBe(120);
      // 480 calls, one at a time per process, on a key whose window admits 100 a day.
      const hot = await many('window-hot', prefix);
      expect(hot.map((r) => Number(r.stdout)).reduce((a, b) => a + b, 0)).toBe(100);
    }, 120_000);
  }
});
