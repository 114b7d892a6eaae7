import { type AddressInfo, createServer as createTcpServer, type Socket, type Server as TcpServer } from 'node:net';
import { Redis } from 'ioredis';
import { type Item, parseDictionary, parseItem, parseList } from 'structured-headers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HeaderFormat, QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY } from '../../src/http/index.js';
import { fixedWindow, gcra, type Policy, type Store, tokenBucket } from '../../src/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { type ManualClock, manualClock } from '../../src/testing/index.js';
import { type App, type Harness, harnesses, type NeutralOptions, type Running } from './harness.js';

// One scenario, written once, run through every adapter and every header format on a real listening
// server with real HTTP requests. Time is a manual clock that starts on an hour boundary.
const START_MS = Date.UTC(2030, 0, 1);

/** q and w of every policy in the scenario, as `RateLimit-Policy` must advertise them. */
const SHAPES: Record<string, [q: number, w: number]> = {
  'per-minute': [3, 60],
  'per-hour': [5, 3600],
  login: [2, 60],
  batch: [10, 10],
  free: [1, 10],
  pro: [5, 10],
  proxied: [2, 60],
  closed: [1, 1],
};

const RATE_HEADERS = [
  'ratelimit',
  'ratelimit-policy',
  'ratelimit-limit',
  'ratelimit-remaining',
  'ratelimit-reset',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
];

/**
 * Redis stores whose server is gone, through a real client: one on a port nothing listens on (every call
 * fails at once), one on a server that accepts connections and never answers (every call hangs).
 */
const outage = {
  refused: undefined as Store | undefined,
  hung: undefined as Store | undefined,
  close: async () => {},
};

beforeAll(async () => {
  const listen = (server: TcpServer) =>
    new Promise<number>((resolve) =>
      server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
    );
  const probe = createTcpServer();
  const closedPort = await listen(probe);
  await new Promise((resolve) => probe.close(resolve));
  const sockets = new Set<Socket>();
  const blackHole = createTcpServer((socket) => sockets.add(socket));
  const blackHolePort = await listen(blackHole);
  const refused = new Redis({
    host: '127.0.0.1',
    port: closedPort,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
  });
  const hung = new Redis({ host: '127.0.0.1', port: blackHolePort, retryStrategy: () => null });
  // Connection errors are what this test is about; they must not surface as unhandled 'error' events.
  refused.on('error', () => {});
  hung.on('error', () => {});
  outage.refused = redisStore({ client: fromIoredis(refused) });
  outage.hung = redisStore({ client: fromIoredis(hung) });
  outage.close = async () => {
    refused.disconnect();
    hung.disconnect();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => blackHole.close(resolve));
  };
});

afterAll(() => outage.close());

function down(which: 'refused' | 'hung'): Store {
  return outage[which] ?? expect.unreachable('the outage stores are made before any server starts');
}

function scenarioApp(clock: ManualClock, headers: HeaderFormat): App {
  const common = { clock, headers };
  const plans: Record<string, Policy[] | undefined> = {
    free: [gcra({ limit: 1, periodMs: 10_000, name: 'free' })],
    pro: [gcra({ limit: 5, periodMs: 10_000, name: 'pro' })],
    internal: undefined,
  };
  const global: NeutralOptions = {
    ...common,
    policies: [
      gcra({ limit: 3, periodMs: 60_000, name: 'per-minute' }),
      fixedWindow({ limit: 5, windowMs: 3_600_000, name: 'per-hour' }),
    ],
    skip: (request) => request.path === '/health',
  };
  const closed = fixedWindow({ limit: 1, windowMs: 1000, name: 'closed' });
  return {
    global,
    routes: [
      { method: 'GET', path: '/hello', limit: global },
      { method: 'GET', path: '/health', limit: global },
      { method: 'GET', path: '/off', limit: false },
      {
        method: 'POST',
        path: '/login',
        limit: { ...common, policies: fixedWindow({ limit: 2, windowMs: 60_000, name: 'login' }) },
      },
      {
        method: 'POST',
        path: '/batch',
        readsBody: true,
        limit: {
          ...common,
          policies: tokenBucket({ capacity: 10, refillAmount: 1, refillIntervalMs: 1000, name: 'batch' }),
          cost: async (request) => ((await request.body()) as { records: unknown[] }).records.length,
        },
      },
      {
        method: 'GET',
        path: '/plan',
        limit: {
          ...common,
          policies: (request) => plans[request.header('x-plan') ?? 'free'],
          key: (request) => `api-key:${request.header('x-api-key')}`,
        },
      },
      {
        method: 'GET',
        path: '/proxied',
        limit: {
          ...common,
          policies: gcra({ limit: 2, periodMs: 60_000, name: 'proxied' }),
          trustProxy: { cidrs: ['loopback'] },
        },
      },
      {
        method: 'GET',
        path: '/closed',
        limit: { ...common, policies: closed, store: down('refused'), failure: 'closed' },
      },
      {
        method: 'GET',
        path: '/open',
        limit: { ...common, policies: closed, store: down('refused'), failure: 'open' },
      },
      {
        method: 'GET',
        path: '/hang',
        limit: { ...common, policies: closed, store: down('hung'), timeoutMs: 50, failure: 'closed' },
      },
      {
        method: 'GET',
        path: '/broken',
        limit: {
          ...common,
          policies: closed,
          key: () => {
            throw new Error('no user on this request');
          },
        },
      },
    ],
  };
}

interface Step {
  /** Clock move before the request. */
  advanceMs?: number;
  method?: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  /** POST body: a JSON batch of this many records. */
  records?: number;
  status: number;
  /** `[policy, r, t]` of each policy in the `RateLimit` field; absent: no rate-limit headers at all. */
  limits?: [string, number, number][];
  /** `Retry-After` of a denial, absent when retrying can never help. */
  retryAfter?: number;
  /** The policies a 429 names in its problem body. */
  violated?: string[];
  /** The policy the single-policy formats (draft-7, draft-6, legacy) report. @default the only, denying or tightest one */
  binding?: string;
  /** The denial's problem type. @default quota-exceeded for 429, temporary-reduced-capacity for 503 */
  problem?: string;
}

const xff = (value: string) => ({ 'x-forwarded-for': value });
const plan = (apiKey: string, name: string) => ({ 'x-api-key': apiKey, 'x-plan': name });

const STEPS: Step[] = [
  // Two policies in one field; the GCRA admits 3 at once and one every 20 s, the hour window 5.
  {
    path: '/hello',
    status: 200,
    limits: [
      ['per-minute', 2, 20],
      ['per-hour', 4, 3600],
    ],
  },
  {
    path: '/hello',
    status: 200,
    limits: [
      ['per-minute', 1, 40],
      ['per-hour', 3, 3600],
    ],
  },
  {
    path: '/hello',
    status: 200,
    limits: [
      ['per-minute', 0, 60],
      ['per-hour', 2, 3600],
    ],
  },
  // A spoofed X-Forwarded-For from an untrusted peer changes nothing: same key, still denied.
  {
    path: '/hello',
    headers: xff('198.51.100.1'),
    status: 429,
    limits: [
      ['per-minute', 0, 20],
      ['per-hour', 2, 3600],
    ],
    retryAfter: 20,
    violated: ['per-minute'],
  },
  { path: '/health', status: 200 },
  { path: '/off', status: 200 },
  {
    advanceMs: 20_000,
    path: '/hello',
    status: 200,
    limits: [
      ['per-minute', 0, 60],
      ['per-hour', 1, 3580],
    ],
  },
  {
    advanceMs: 60_000,
    path: '/hello',
    status: 200,
    limits: [
      ['per-minute', 2, 20],
      ['per-hour', 0, 3520],
    ],
  },
  // Denied by the hour window; the minute policy, which admitted, consumed nothing.
  {
    path: '/hello',
    status: 429,
    limits: [
      ['per-minute', 2, 20],
      ['per-hour', 0, 3520],
    ],
    retryAfter: 3520,
    violated: ['per-hour'],
  },
  // A route with its own policy counts apart from the global one (t = 80 s, window [60 s, 120 s)).
  { method: 'POST', path: '/login', status: 200, limits: [['login', 1, 40]] },
  { method: 'POST', path: '/login', status: 200, limits: [['login', 0, 40]] },
  { method: 'POST', path: '/login', status: 429, limits: [['login', 0, 40]], retryAfter: 40, violated: ['login'] },
  // Cost = records in the JSON batch; a token bucket of 10 refilling 1 per second.
  { method: 'POST', path: '/batch', records: 4, status: 200, limits: [['batch', 6, 4]] },
  {
    method: 'POST',
    path: '/batch',
    records: 7,
    status: 429,
    limits: [['batch', 6, 1]],
    retryAfter: 1,
    violated: ['batch'],
  },
  { method: 'POST', path: '/batch', records: 6, status: 200, limits: [['batch', 0, 10]] },
  // More than the bucket can ever hold: no Retry-After, since waiting cannot help.
  { method: 'POST', path: '/batch', records: 11, status: 429, limits: [['batch', 0, 10]], violated: ['batch'] },
  { advanceMs: 2000, method: 'POST', path: '/batch', records: 2, status: 200, limits: [['batch', 0, 10]] },
  // Per-plan policies and an API-key key: each plan its own policy, each key its own count.
  { path: '/plan', headers: plan('a', 'free'), status: 200, limits: [['free', 0, 10]] },
  {
    path: '/plan',
    headers: plan('a', 'free'),
    status: 429,
    limits: [['free', 0, 10]],
    retryAfter: 10,
    violated: ['free'],
  },
  { path: '/plan', headers: plan('b', 'pro'), status: 200, limits: [['pro', 4, 2]] },
  { path: '/plan', headers: plan('a', 'pro'), status: 200, limits: [['pro', 4, 2]] },
  { path: '/plan', headers: plan('c', 'internal'), status: 200 },
  // Behind a trusted proxy: rotating addresses inside one IPv6 /64 does not escape the limit.
  { path: '/proxied', headers: xff('2001:db8:1:2::1'), status: 200, limits: [['proxied', 1, 30]] },
  { path: '/proxied', headers: xff('2001:db8:1:2::ffff'), status: 200, limits: [['proxied', 0, 60]] },
  {
    path: '/proxied',
    headers: xff('2001:db8:1:2:abcd::9'),
    status: 429,
    limits: [['proxied', 0, 30]],
    retryAfter: 30,
    violated: ['proxied'],
  },
  // Prepending a made-up address does not help either: the proxy's own entry is read from the right.
  {
    path: '/proxied',
    headers: xff('203.0.113.9, 2001:db8:1:2::5'),
    status: 429,
    limits: [['proxied', 0, 30]],
    retryAfter: 30,
    violated: ['proxied'],
  },
  { path: '/proxied', headers: xff('2001:db8:1:3::1'), status: 200, limits: [['proxied', 1, 30]] },
  // An IPv4 client written as IPv4-mapped IPv6 is the same client.
  { path: '/proxied', headers: xff('::ffff:203.0.113.7'), status: 200, limits: [['proxied', 1, 30]] },
  { path: '/proxied', headers: xff('203.0.113.7'), status: 200, limits: [['proxied', 0, 60]] },
  {
    path: '/proxied',
    headers: xff('203.0.113.7'),
    status: 429,
    limits: [['proxied', 0, 30]],
    retryAfter: 30,
    violated: ['proxied'],
  },
  // Redis down: failure 'closed' answers 503 with no quota numbers; 'open' admits; a hung server times out.
  { path: '/closed', status: 503, retryAfter: 1, violated: ['closed'] },
  { path: '/open', status: 200 },
  { path: '/hang', status: 503, retryAfter: 1, violated: ['closed'] },
  // A key hook that throws is the framework's error to report, never a hung request.
  { path: '/broken', status: 500 },
];

function integer(item: Item | undefined): number {
  expect(item).toBeDefined();
  const value = (item as Item)[0];
  expect(Number.isInteger(value)).toBe(true);
  return value as number;
}

function binding(step: Step): [string, number, number] {
  const limits = step.limits ?? [];
  if (step.binding !== undefined) return limits.find(([name]) => name === step.binding) ?? expect.unreachable();
  if (step.violated !== undefined) return limits.find(([name]) => name === step.violated?.[0]) ?? expect.unreachable();
  return limits.reduce((a, b) => (b[1] < a[1] ? b : a));
}

function checkHeaders(format: HeaderFormat, step: Step, headers: Headers, nowS: number): void {
  if (step.limits === undefined || format === 'none') {
    for (const name of RATE_HEADERS) expect(headers.get(name), name).toBeNull();
    return;
  }
  const names = step.limits.map(([name]) => name);
  const policyHeader = headers.get('ratelimit-policy');
  const policies = policyHeader === null ? [] : parseList(policyHeader);
  if (format === 'legacy') expect(policyHeader).toBeNull();
  else expect(policies).toHaveLength(names.length);
  if (format === 'ietf') {
    policies.forEach(([name, params], i) => {
      const policy = names[i] as string;
      expect(String(name)).toBe(policy);
      expect(Object.fromEntries(params)).toEqual({ q: SHAPES[policy]?.[0], w: SHAPES[policy]?.[1] });
    });
    const limits = parseList(headers.get('ratelimit') as string);
    expect(limits.map(([name, params]) => [String(name), params.get('r'), params.get('t')])).toEqual(step.limits);
    return;
  }
  // The older drafts advertise policies by quota and window only.
  policies.forEach(([q, params], i) => {
    const policy = names[i] as string;
    expect([q, params.get('w')]).toEqual(SHAPES[policy]);
  });
  const [name, , reset] = binding(step);
  const limit = SHAPES[name]?.[0];
  const remaining = Math.min(...step.limits.map(([, r]) => r));
  if (format === 'draft-7') {
    const dictionary = parseDictionary(headers.get('ratelimit') as string);
    expect([...dictionary.keys()]).toEqual(['limit', 'remaining', 'reset']);
    expect(integer(dictionary.get('limit') as Item)).toBe(limit);
    expect(integer(dictionary.get('remaining') as Item)).toBe(remaining);
    expect(integer(dictionary.get('reset') as Item)).toBe(reset);
  } else {
    const prefix = format === 'draft-6' ? 'ratelimit-' : 'x-ratelimit-';
    expect(integer(parseItem(headers.get(`${prefix}limit`) ?? ''))).toBe(limit);
    expect(integer(parseItem(headers.get(`${prefix}remaining`) ?? ''))).toBe(remaining);
    // draft-6 counts seconds; the legacy header is the epoch second of the reset, as GitHub sends it.
    expect(integer(parseItem(headers.get(`${prefix}reset`) ?? ''))).toBe(format === 'legacy' ? nowS + reset : reset);
  }
}

async function run(format: HeaderFormat, step: Step, server: Running, clock: ManualClock): Promise<void> {
  const method = step.method ?? 'GET';
  const headers: Record<string, string> = { ...step.headers };
  let body: string | undefined;
  if (step.records !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify({ records: Array.from({ length: step.records }, (_, i) => ({ id: i })) });
  }
  const response = await fetch(`${server.url}${step.path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body }),
  });
  const text = await response.text();
  expect(response.status).toBe(step.status);
  checkHeaders(format, step, response.headers, clock.nowMs() / 1000);
  const retryAfter = response.headers.get('retry-after');
  if (step.retryAfter === undefined) expect(retryAfter).toBeNull();
  else expect(integer(parseItem(retryAfter ?? ''))).toBe(step.retryAfter);
  if (step.status === 429 || step.status === 503) {
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    const problem = JSON.parse(text) as Record<string, unknown>;
    expect(problem.type).toBe(step.problem ?? (step.status === 429 ? QUOTA_EXCEEDED : TEMPORARY_REDUCED_CAPACITY));
    expect(problem.status).toBe(step.status);
    expect(typeof problem.title).toBe('string');
    expect(problem['violated-policies']).toEqual(step.violated);
    expect(problem.detail).toEqual(expect.any(String));
    if (step.status === 429) expect(problem.detail).toContain(`"${step.violated?.[0]}"`);
  } else if (step.status === 200) {
    expect(JSON.parse(text)).toEqual({ ok: true });
    expect(response.headers.get('cache-control')).toBeNull();
  }
}

const FORMATS: HeaderFormat[] = ['ietf', 'draft-7', 'draft-6', 'legacy', 'none'];

describe.each(harnesses.map((h) => [h.name, h] as [string, Harness]))('%s', (_name, harness) => {
  describe.each(FORMATS)('headers: %s', (format) => {
    const clock = manualClock({ startMs: START_MS });
    let server: Running;
    beforeAll(async () => {
      server = await harness.start(scenarioApp(clock, format), '127.0.0.1');
    });
    afterAll(async () => {
      await server?.close();
    });

    it('runs the scenario table', async () => {
      for (const [i, step] of STEPS.entries()) {
        if (step.advanceMs !== undefined) clock.advance(step.advanceMs);
        try {
          await run(format, step, server, clock);
        } catch (error) {
          throw new Error(`step ${i} (${step.method ?? 'GET'} ${step.path}): ${(error as Error).message}`, {
            cause: error,
          });
        }
      }
    });
  });

  it('keys a client on an IPv6 socket (::1)', async () => {
    const clock = manualClock({ startMs: START_MS });
    const server = await harness.start(scenarioApp(clock, 'ietf'), '::1');
    try {
      await run('ietf', { method: 'POST', path: '/login', status: 200, limits: [['login', 1, 60]] }, server, clock);
      await run('ietf', { method: 'POST', path: '/login', status: 200, limits: [['login', 0, 60]] }, server, clock);
      await run(
        'ietf',
        {
          method: 'POST',
          path: '/login',
          status: 429,
          limits: [['login', 0, 60]],
          retryAfter: 60,
          violated: ['login'],
        },
        server,
        clock,
      );
    } finally {
      await server.close();
    }
  });
});
