// envoyproxy/ratelimit's integration scenarios, replayed over gRPC against `floodgate serve` reading the
// configs of test/envoy/ (written from that service's documentation), with a client generated from
// Envoy's protos (@grpc/grpc-js and proto-loader), on the memory store and on Redis, on a manual clock.
// Every answer is compared whole: code, current_limit (requests_per_unit, unit, name), limit_remaining
// and duration_until_reset, as that service computes them.
import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ManualClock, manualClock } from 'floodgate/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../floodgate/test/stores/redis/servers.js';
import { type Service, type ServiceOptions, startService } from '../src/service.js';
import { grpcClient, type RateLimitClient, waitFor } from './helpers.js';

const HERE = fileURLToPath(new URL('./envoy/', import.meta.url));
const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

/** 10:00:30.250 UTC on 1 January 2030: 0.75 s left of the second, 29.75 s of the minute. */
const START_MS = Date.UTC(2030, 0, 1, 10, 0, 30, 250);
const SECONDS_OF_DAY_LEFT = 86_400 - (10 * 3600 + 30);

const temporary: string[] = [];
afterAll(() => {
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

interface Replay {
  readonly service: Service;
  readonly client: RateLimitClient;
  readonly clock: ManualClock;
  /** The config directory the service reads. */
  readonly dir: string;
}

const running: Replay[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    r.client.close();
    await r.service.close();
  }
});

/**
 * Starts the service on a copy of these config files (a directory of test/envoy/, or single files), plus
 * a file of floodgate's format that gives the run its own key prefix in a shared Redis.
 */
async function replay(store: string, sources: string[], options: Partial<ServiceOptions> = {}): Promise<Replay> {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-replay-'));
  temporary.push(dir);
  for (const source of sources)
    cpSync(join(HERE, source), source.endsWith('.yaml') ? join(dir, source.split('/').pop() as string) : dir, {
      recursive: true,
    });
  writeFileSync(join(dir, 'zz-prefix.yaml'), `prefix: replay-${randomBytes(6).toString('hex')}\ndomains: []\n`);
  const clock = manualClock({ startMs: START_MS });
  const service = await startService({
    configFile: dir,
    store,
    clock,
    httpPort: false,
    grpcPort: 0,
    watch: false,
    logger: process.env.LOGLEVEL ?? 'silent',
    drainTimeoutMs: 2000,
    ...options,
  });
  const r = { service, client: grpcClient(service.grpcPort), clock, dir };
  running.push(r);
  return r;
}

type Entries = [string, string][];

/** A descriptor, optionally with its own hits_addend and a limit override. */
function d(entries: Entries, extra: { hits?: number | string; limit?: [number, string] } = {}): unknown {
  return {
    entries: entries.map(([key, value]) => ({ key, value })),
    ...(extra.hits === undefined ? {} : { hits_addend: { value: extra.hits } }),
    ...(extra.limit === undefined ? {} : { limit: { requests_per_unit: extra.limit[0], unit: extra.limit[1] } }),
  };
}

interface Status {
  code: string;
  current_limit: { name: string; requests_per_unit: number; unit: string } | null;
  limit_remaining: number;
  duration_until_reset: { seconds: number; nanos: number } | null;
}

/**
 * A status as envoyproxy/ratelimit's tests build them: `[code, requests_per_unit, unit, remaining,
 * seconds until reset]`, plus the name when there is one; `[code, remaining]` without a limit.
 */
type Compact = (string | number)[];

function compact(s: Status): Compact {
  if (s.current_limit === null) return [s.code, s.limit_remaining];
  const out: Compact = [
    s.code,
    s.current_limit.requests_per_unit,
    s.current_limit.unit,
    s.limit_remaining,
    s.duration_until_reset?.seconds ?? -1,
  ];
  if (s.current_limit.name !== '') out.push(s.current_limit.name);
  expect(s.duration_until_reset?.nanos ?? 0).toBe(0);
  return out;
}

/** Calls ShouldRateLimit; returns the overall code and each status, compact. */
async function call(
  r: Replay,
  domain: string,
  descriptors: unknown[],
  hits?: number,
): Promise<{ overall: string; statuses: Compact[] }> {
  const response = await r.client.shouldRateLimit({
    domain,
    descriptors,
    ...(hits === undefined ? {} : { hits_addend: hits }),
  });
  return {
    overall: response.overall_code as string,
    statuses: (response.statuses as Status[]).map(compact),
  };
}

const stores: [string, string, boolean][] = [
  ['memory', 'memory', true],
  ['redis', 'redis://127.0.0.1:6379', runRedis],
];

describe.each(stores)("envoyproxy/ratelimit's scenarios on %s", (_name, store, available) => {
  const test = it.skipIf(!available);

  test('the basic scenario: an unknown domain, a per-second limit, 25 calls over a minute limit, 15 over two keys', async () => {
    const r = await replay(store, ['runtime/config']);
    // An unknown domain: OK, no limit.
    expect(await call(r, 'foo', [d([['hello', 'world']])])).toEqual({ overall: 'OK', statuses: [['OK', 0]] });
    expect(await call(r, 'basic', [d([['key1', 'foo']])])).toEqual({
      overall: 'OK',
      statuses: [['OK', 50, 'SECOND', 49, 1]],
    });
    // 25 calls on a fresh value under 20 a minute: 20 OK, counting down, then 5 over.
    const value = randomBytes(4).toString('hex');
    for (let i = 0; i < 25; i++) {
      const over = i >= 20;
      expect(await call(r, 'another', [d([['key2', value]])]), `call ${i + 1}`).toEqual({
        overall: over ? 'OVER_LIMIT' : 'OK',
        statuses: [[over ? 'OVER_LIMIT' : 'OK', 20, 'MINUTE', over ? 0 : 19 - i, 30]],
      });
    }
    // Two descriptors each call: key2 (20 a minute) stays OK while key3 (10 an hour) goes over.
    const both = randomBytes(4).toString('hex');
    for (let i = 0; i < 15; i++) {
      const over = i >= 10;
      expect(await call(r, 'another', [d([['key2', both]]), d([['key3', both]])]), `call ${i + 1}`).toEqual({
        overall: over ? 'OVER_LIMIT' : 'OK',
        statuses: [
          ['OK', 20, 'MINUTE', 19 - i, 30],
          [over ? 'OVER_LIMIT' : 'OK', 10, 'HOUR', over ? 0 : 9 - i, 3570],
        ],
      });
    }
    // duration_until_reset counts down in whole seconds, rounded up: a client never retries early.
    const first = await call(r, 'another', [d([['key4', 'durTest']])]);
    expect(first.statuses).toEqual([['OK', 20, 'DAY', 19, SECONDS_OF_DAY_LEFT]]);
    r.clock.advance(2000);
    const second = await call(r, 'another', [d([['key4', 'durTest']])]);
    expect(second.statuses).toEqual([['OK', 20, 'DAY', 18, SECONDS_OF_DAY_LEFT - 2]]);
    // The next window starts afresh, every count included.
    r.clock.advance(30_000);
    expect((await call(r, 'another', [d([['key2', value]])])).statuses).toEqual([['OK', 20, 'MINUTE', 19, 58]]);
  });

  test('denied calls count: the quota pattern (check with hits_addend 0, charge 1 when the stream ends)', async () => {
    const r = await replay(store, ['runtime/config']);
    const user = [['one_per_minute', randomBytes(4).toString('hex')]] as Entries;
    const check = () => call(r, 'basic', [d(user, { hits: 0 })]);
    const charge = (hits?: number) => call(r, 'basic', [d(user)], hits);
    // The reference adds every hit and then compares: over when the count exceeds the limit.
    expect(await check()).toEqual({ overall: 'OK', statuses: [['OK', 1, 'MINUTE', 1, 30]] });
    expect(await charge()).toEqual({ overall: 'OK', statuses: [['OK', 1, 'MINUTE', 0, 30]] });
    expect(await check()).toEqual({ overall: 'OK', statuses: [['OK', 1, 'MINUTE', 0, 30]] });
    // The second charge goes over, and counts: every check after it is over, to the window's end.
    expect(await charge()).toEqual({ overall: 'OVER_LIMIT', statuses: [['OVER_LIMIT', 1, 'MINUTE', 0, 30]] });
    for (let i = 0; i < 3; i++) {
      expect(await check()).toEqual({ overall: 'OVER_LIMIT', statuses: [['OVER_LIMIT', 1, 'MINUTE', 0, 30]] });
    }
    r.clock.advance(29_750);
    expect(await check()).toEqual({ overall: 'OK', statuses: [['OK', 1, 'MINUTE', 1, 60]] });
    // A charge far above the limit (the largest hits_addend) counts too.
    expect((await charge(4_294_967_295)).statuses).toEqual([['OVER_LIMIT', 1, 'MINUTE', 0, 60]]);
    expect((await check()).overall).toBe('OVER_LIMIT');
  });

  test('reload: a domain added with a deny-all rule, served, then removed', async () => {
    const r = await replay(store, ['runtime/config']);
    expect(await call(r, 'reload', [d([['block', 'foo']])])).toEqual({ overall: 'OK', statuses: [['OK', 0]] });
    cpSync(join(HERE, 'runtime', 'reload.yaml'), join(r.dir, 'reload.yaml'));
    expect(r.service.reload()).toEqual({ ok: true, changed: true });
    expect(await call(r, 'reload', [d([['key1', 'foo']])])).toEqual({
      overall: 'OK',
      statuses: [['OK', 50, 'SECOND', 49, 1]],
    });
    // requests_per_unit: 0 denies every call.
    for (let i = 0; i < 2; i++) {
      expect(await call(r, 'reload', [d([['block', 'foo']])])).toEqual({
        overall: 'OVER_LIMIT',
        statuses: [['OVER_LIMIT', 0, 'SECOND', 0, 1]],
      });
    }
    expect((await call(r, 'reload', [d([['one_per_minute', 'foo']])])).statuses).toEqual([['OK', 1, 'MINUTE', 0, 30]]);
    expect((await call(r, 'reload', [d([['one_per_minute', 'foo']])])).overall).toBe('OVER_LIMIT');
    unlinkSync(join(r.dir, 'reload.yaml'));
    expect(r.service.reload()).toEqual({ ok: true, changed: true });
    expect(await call(r, 'reload', [d([['block', 'foo']])])).toEqual({ overall: 'OK', statuses: [['OK', 0]] });
  });

  test('reload: more descriptors for a loaded domain, refused unless domains merge', async () => {
    const refused = await replay(store, ['runtime/config']);
    cpSync(join(HERE, 'runtime', 'existing-domain.yaml'), join(refused.dir, 'existing-domain.yaml'));
    const result = refused.service.reload();
    expect(result.ok).toBe(false);
    expect(result.error?.message).toMatch(/duplicate domain "basic"/);
    // The config in use keeps serving.
    expect((await call(refused, 'basic', [d([['key1', 'x']])])).statuses).toEqual([['OK', 50, 'SECOND', 49, 1]]);
    expect(await call(refused, 'basic', [d([['key11', 'x']])])).toEqual({ overall: 'OK', statuses: [['OK', 0]] });

    const merging = await replay(store, ['runtime/config'], { mergeDomains: true });
    cpSync(join(HERE, 'runtime', 'existing-domain.yaml'), join(merging.dir, 'existing-domain.yaml'));
    expect(merging.service.reload()).toEqual({ ok: true, changed: true });
    expect((await call(merging, 'basic', [d([['key11', 'x']])])).statuses).toEqual([['OK', 50, 'SECOND', 49, 1]]);
    expect((await call(merging, 'basic', [d([['block1', 'x']])])).statuses).toEqual([
      ['OVER_LIMIT', 0, 'SECOND', 0, 1],
    ]);
    expect((await call(merging, 'basic', [d([['key1', 'x']])])).statuses).toEqual([['OK', 50, 'SECOND', 49, 1]]);
  });

  test('reload when a file of the directory changes (watched)', async () => {
    const r = await replay(store, ['runtime/config'], { watch: true });
    cpSync(join(HERE, 'runtime', 'reload.yaml'), join(r.dir, 'reload.yaml'));
    await waitFor(async () => (await call(r, 'reload', [d([['block', 'w']])])).overall === 'OVER_LIMIT');
  });

  test('shadow mode: decided and counted, answered OK', async () => {
    const r = await replay(store, ['valid/shadow.yaml']);
    const a = [
      d([
        ['service', 'auth'],
        ['user', 'user-a'],
      ]),
    ];
    for (let i = 0; i < 10; i++) await call(r, 'example6', a);
    expect(await call(r, 'example6', a)).toEqual({ overall: 'OK', statuses: [['OK', 10, 'SECOND', 0, 1]] });
    const b = [
      d([
        ['service', 'auth'],
        ['user', 'user-b'],
      ]),
    ];
    for (let i = 0; i < 20; i++) expect((await call(r, 'example6', b)).overall).toBe('OK');
    expect(await call(r, 'example6', b)).toEqual({
      overall: 'OVER_LIMIT',
      statuses: [['OVER_LIMIT', 20, 'SECOND', 0, 1]],
    });
  });

  test('the global shadow mode (SHADOW_MODE): answered OK overall, the statuses as they are', async () => {
    const r = await replay(store, ['runtime/config'], { shadowMode: true });
    const user = [d([['one_per_minute', randomBytes(4).toString('hex')]])];
    expect(await call(r, 'basic', user)).toEqual({ overall: 'OK', statuses: [['OK', 1, 'MINUTE', 0, 30]] });
    expect(await call(r, 'basic', user)).toEqual({ overall: 'OK', statuses: [['OVER_LIMIT', 1, 'MINUTE', 0, 30]] });
    expect(r.service.stats.globalShadow).toBe(1);
  });

  test('wildcards: anywhere in a value, the first written wins, exact values first, each value counts apart', async () => {
    const r = await replay(store, ['valid/wildcard.yaml']);
    const one = async (key: string, value: string) => (await call(r, 'example9', [d([[key, value]])])).statuses[0];
    expect(await one('key1', 'value1')).toEqual(['OK', 20, 'MINUTE', 19, 30]);
    expect(await one('key1', 'value2')).toEqual(['OK', 20, 'MINUTE', 19, 30]);
    expect(await one('key1', 'value1')).toEqual(['OK', 20, 'MINUTE', 18, 30]);
    expect(await one('key1', 'nope')).toEqual(['OK', 0]);
    expect(await one('exact', 'foo')).toEqual(['OK', 20, 'MINUTE', 19, 30]);
    expect(await one('exact', 'foo1')).toEqual(['OK', 0]);
    expect(await one('any', 'anything')).toEqual(['OK', 20, 'MINUTE', 19, 30]);
    // `bar*b`: a `*` in the middle matches any run of characters, none included.
    expect(await one('middle', 'barab')).toEqual(['OK', 7, 'MINUTE', 6, 30]);
    expect(await one('middle', 'barb')).toEqual(['OK', 7, 'MINUTE', 6, 30]);
    expect(await one('middle', 'bar')).toEqual(['OK', 0]);
    expect(await one('route', '/api/v2/users/42')).toEqual(['OK', 8, 'MINUTE', 7, 30]);
    expect(await one('route', '/api/v2/groups/42')).toEqual(['OK', 0]);
    expect(await one('path', '/v1/admin/users')).toEqual(['OK', 1, 'MINUTE', 0, 30]);
    expect(await one('file', 'report.pdf')).toEqual(['OK', 3, 'MINUTE', 2, 30]);
    expect(await one('file', 'other.pdf')).toEqual(['OK', 4, 'MINUTE', 3, 30]);
    expect(await one('file', 'other.txt')).toEqual(['OK', 5, 'MINUTE', 4, 30]);
    expect(await one('file', '')).toEqual(['OK', 5, 'MINUTE', 4, 30]);
  });

  test('share_threshold: every value of a wildcard shares one counter; without it, each counts apart', async () => {
    const r = await replay(store, ['runtime/config']);
    for (let i = 0; i < 10; i++) {
      expect((await call(r, 'share-threshold-test', [d([['files', 'files/a.pdf']])])).statuses).toEqual([
        ['OK', 10, 'HOUR', 9 - i, 3570],
      ]);
    }
    expect(await call(r, 'share-threshold-test', [d([['files', 'files/b.csv']])])).toEqual({
      overall: 'OVER_LIMIT',
      statuses: [['OVER_LIMIT', 10, 'HOUR', 0, 3570]],
    });
    for (let i = 0; i < 10; i++) {
      expect(
        (await call(r, 'share-threshold-test', [d([['files_no_share', `files_no_share/${i}`]])])).statuses,
      ).toEqual([['OK', 10, 'HOUR', 9, 3570]]);
    }
  });

  test('replaces: a limit replaced by another of the request is not applied', async () => {
    const r = await replay(store, ['valid/replaces.yaml']);
    const specific = d([
      ['key_1', 'value_1'],
      ['user', 'bkthomps'],
    ]);
    const replacing = d([
      ['key_2', 'value_2'],
      ['user', 'bkthomps'],
    ]);
    expect(await call(r, 'example7', [specific])).toEqual({
      overall: 'OK',
      statuses: [['OK', 5, 'SECOND', 4, 1, 'specific_limit']],
    });
    for (let i = 0; i < 10; i++) {
      expect((await call(r, 'example7', [specific, replacing])).statuses).toEqual([
        ['OK', 0],
        ['OK', 10, 'SECOND', 9 - i, 1],
      ]);
    }
    expect((await call(r, 'example7', [specific, replacing])).overall).toBe('OVER_LIMIT');
    // The replaced limit counted nothing meanwhile.
    expect((await call(r, 'example7', [specific])).statuses).toEqual([['OK', 5, 'SECOND', 3, 1, 'specific_limit']]);
  });

  test('limits Envoy sends with a descriptor: a counter per descriptor and unit, shared with the config', async () => {
    const r = await replay(store, ['valid/nested.yaml']);
    const entries: Entries = [
      ['key1', 'value1'],
      ['subkey1', 'something'],
    ];
    expect((await call(r, 'test-domain', [d(entries, { limit: [10, 'DAY'] })])).statuses).toEqual([
      ['OK', 10, 'DAY', 9, SECONDS_OF_DAY_LEFT],
    ]);
    // Another limit of the same unit counts on the same counter; another unit on its own.
    expect((await call(r, 'test-domain', [d(entries, { limit: [42, 'DAY'] })])).statuses).toEqual([
      ['OK', 42, 'DAY', 40, SECONDS_OF_DAY_LEFT],
    ]);
    expect((await call(r, 'test-domain', [d(entries, { limit: [42, 'HOUR'] })])).statuses).toEqual([
      ['OK', 42, 'HOUR', 41, 3570],
    ]);
    // Without one, the config's 5 a second; a limit per second then counts on the same counter.
    expect((await call(r, 'test-domain', [d(entries)])).statuses).toEqual([['OK', 5, 'SECOND', 4, 1]]);
    expect((await call(r, 'test-domain', [d(entries, { limit: [7, 'SECOND'] })])).statuses).toEqual([
      ['OK', 7, 'SECOND', 5, 1],
    ]);
    // 0 per unit denies; a descriptor no rule matches takes the limit too.
    expect((await call(r, 'test-domain', [d(entries, { limit: [0, 'MINUTE'] })])).statuses).toEqual([
      ['OVER_LIMIT', 0, 'MINUTE', 0, 30],
    ]);
    expect((await call(r, 'test-domain', [d([['unknown', 'x']], { limit: [3, 'MINUTE'] })])).statuses).toEqual([
      ['OK', 3, 'MINUTE', 2, 30],
    ]);
    // A unit Envoy's RateLimitUnit does not define: the limit is ignored, the config decides.
    expect((await call(r, 'test-domain', [d(entries, { limit: [3, 'UNKNOWN'] })])).statuses).toEqual([
      ['OK', 5, 'SECOND', 2, 1],
    ]);
  });

  test('unknown domains, unmatched descriptors, unlimited and deny-all rules, WEEK, names', async () => {
    const r = await replay(store, ['valid/internal.yaml', 'valid/proxy-example.yaml', 'valid/units.yaml']);
    expect(await call(r, 'nowhere', [d([['a', 'b']]), d([['c', 'd']])])).toEqual({
      overall: 'OK',
      statuses: [
        ['OK', 0],
        ['OK', 0],
      ],
    });
    // Unlimited: OK with the largest uint32 remaining, and no current_limit.
    expect(await call(r, 'internal', [d([['ldap', 'x']]), d([['azure', 'x']])])).toEqual({
      overall: 'OK',
      statuses: [
        ['OK', 4294967295],
        ['OK', 100, 'MINUTE', 99, 30],
      ],
    });
    expect(
      (
        await call(r, 'rl', [
          d([
            ['foo', 'f'],
            ['bay', 'y'],
          ]),
          d([['qux', 'q']]),
        ])
      ).statuses,
    ).toEqual([
      ['OK', 4294967295],
      ['OK', 4294967295],
    ]);
    expect(
      await call(r, 'rl', [
        d([
          ['foo', 'f'],
          ['bar', 'banned'],
        ]),
      ]),
    ).toEqual({
      overall: 'OVER_LIMIT',
      statuses: [['OVER_LIMIT', 0, 'MINUTE', 0, 30]],
    });
    expect(
      (
        await call(r, 'rl', [
          d([
            ['foo', 'f'],
            ['baz', 'shady'],
          ]),
        ])
      ).statuses,
    ).toEqual([['OK', 1, 'MINUTE', 0, 30]]);
    expect(
      (
        await call(r, 'rl', [
          d([
            ['foo', 'f'],
            ['baz', 'shady'],
          ]),
        ])
      ).statuses,
    ).toEqual([['OK', 1, 'MINUTE', 0, 30]]);
    expect(
      (
        await call(r, 'rl', [
          d([
            ['foo', 'f'],
            ['nothing', 'x'],
          ]),
        ])
      ).statuses,
    ).toEqual([['OK', 0]]);
    // WEEK is 7; a week window starts on the epoch's weekday, as the reference aligns it.
    const weekLeft = 604_800 - (Math.floor(START_MS / 1000) % 604_800);
    expect((await call(r, 'units', [d([['w', 'x']])])).statuses).toEqual([['OK', 5, 'WEEK', 4, weekLeft, 'weekly']]);
    expect((await call(r, 'units', [d([['y', 'x']])])).statuses[0]?.slice(0, 4)).toEqual([
      'OK',
      4294967295,
      'YEAR',
      4294967294,
    ]);
  });

  test('STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a request going over charges none of its other descriptors', async () => {
    const config =
      'domain: stop\ndescriptors:\n  - { key: key4, rate_limit: { unit: hour, requests_per_unit: 15 } }\n  - { key: key5, rate_limit: { unit: hour, requests_per_unit: 14 } }\n';
    for (const stop of [false, true]) {
      const r = await replay(store, [], { stopIncrementWhenOverLimit: stop });
      writeFileSync(join(r.dir, 'stop.yaml'), config);
      expect(r.service.reload().ok).toBe(true);
      const both = [d([['key4', 'value4']]), d([['key5', 'value5']])];
      expect((await call(r, 'stop', both, 13)).statuses).toEqual([
        ['OK', 15, 'HOUR', 2, 3570],
        ['OK', 14, 'HOUR', 1, 3570],
      ]);
      // 13 + 2 fits key4 (15) but not key5 (14).
      expect(await call(r, 'stop', both, 2)).toEqual({
        overall: 'OVER_LIMIT',
        statuses: [
          ['OK', 15, 'HOUR', stop ? 2 : 0, 3570],
          ['OVER_LIMIT', 14, 'HOUR', 0, 3570],
        ],
      });
      expect((await call(r, 'stop', [d([['key4', 'value4']], { hits: 0 })])).statuses).toEqual([
        ['OK', 15, 'HOUR', stop ? 2 : 0, 3570],
      ]);
      r.client.close();
      await r.service.close();
      running.splice(running.indexOf(r), 1);
    }
  });
});
