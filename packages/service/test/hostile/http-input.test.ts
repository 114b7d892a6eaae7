// Attacks on the HTTP JSON API's request body: every field a client controls, given the wrong type, an
// out-of-range number, a name an object inherits, a key twice, deep nesting or too much of it. Each must
// be a 400 (413 for an oversized body) whose problem names the field and what was sent, must cost little,
// and must leave the store, the counters and the breaker as they were.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_DESCRIPTORS, MAX_ENTRIES, MAX_ENTRY_LENGTH } from '../../src/engine.js';
import { MAX_BODY_BYTES } from '../../src/http-api.js';
import { MAX_JSON_DEPTH } from '../../src/json-body.js';
import type { Service } from '../../src/service.js';
import { grpcClient, type RateLimitClient, startTestService } from '../helpers.js';

let service: Service;

beforeAll(async () => {
  service = await startTestService();
});
afterAll(() => service.close());

interface Problem {
  status: number;
  body: { status?: number; detail?: string; field?: string; title?: string };
  ms: number;
}

async function send(body: string, path = '/v1/decide'): Promise<Problem> {
  const started = performance.now();
  const response = await fetch(`http://127.0.0.1:${service.httpPort}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  const text = await response.text();
  let parsed: Problem['body'] = {};
  try {
    parsed = JSON.parse(text) as Problem['body'];
  } catch {
    parsed = { detail: text };
  }
  return { status: response.status, body: parsed, ms: performance.now() - started };
}

const ENTRY = '{"key":"remote_address","value":"203.0.113.7"}';
const DESCRIPTOR = `{"entries":[${ENTRY}]}`;
/** A valid request with `extra` spliced into the top-level object. */
const withTop = (extra: string) => `{"domain":"api","descriptors":[${DESCRIPTOR}]${extra}}`;
/** A valid request whose one descriptor has `extra` spliced in. */
const withDescriptor = (extra: string) => `{"domain":"api","descriptors":[{"entries":[${ENTRY}]${extra}}]}`;
/** A valid request whose one entry is `entry`. */
const withEntry = (entry: string) => `{"domain":"api","descriptors":[{"entries":[${entry}]}]}`;

/** [name, body, field, text the detail must contain] */
const REFUSED: [string, string, string | undefined, string][] = [
  ['not JSON', '{"domain":', undefined, 'the body is not valid JSON'],
  ['NaN, which JSON has not', withTop(',"cost":NaN'), undefined, 'the body is not valid JSON'],
  ['a list for a body', `[${DESCRIPTOR}]`, undefined, 'must be a JSON object { domain, descriptors }, got a list of 1'],
  ['a number for a body', '42', undefined, 'got 42'],
  ['null for a body', 'null', undefined, 'got null'],
  ['a string for a body', '"api"', undefined, 'got "api"'],
  // Fields of the request.
  ['__proto__ at the top', withTop(',"__proto__":{"cost":0}'), '__proto__', 'unknown field __proto__'],
  ['constructor at the top', withTop(',"constructor":{}'), 'constructor', 'unknown field constructor'],
  ['__proto__ in a descriptor', withDescriptor(',"__proto__":{"cost":0}'), 'descriptors[0].__proto__', 'unknown field'],
  [
    '__proto__ in an entry',
    withEntry('{"key":"remote_address","value":"x","__proto__":{"value":"y"}}'),
    'descriptors[0].entries[0].__proto__',
    'unknown field',
  ],
  [
    '__proto__ in a limit',
    withDescriptor(',"limit":{"requestsPerUnit":5,"unit":"second","__proto__":{"unit":"year"}}'),
    'descriptors[0].limit.__proto__',
    'unknown field',
  ],
  ['domain twice', withTop(',"domain":"other"'), 'domain', 'domain is given twice'],
  ['domain twice, once escaped', withTop(',"dom\\u0061in":"other"'), 'domain', 'domain is given twice'],
  [
    'an entry key twice',
    withEntry('{"key":"remote_address","key":"api_key","value":"x"}'),
    'descriptors[0].entries[0].key',
    'descriptors[0].entries[0].key is given twice',
  ],
  ['a number for domain', '{"domain":7,"descriptors":[]}', 'domain', 'got 7'],
  ['an object for domain', `{"domain":{"name":"api"},"descriptors":[${DESCRIPTOR}]}`, 'domain', 'got an object'],
  ['an empty domain', `{"domain":"","descriptors":[${DESCRIPTOR}]}`, 'domain', 'got ""'],
  ['no descriptors', '{"domain":"api"}', 'descriptors', 'got nothing'],
  ['an object for descriptors', `{"domain":"api","descriptors":${DESCRIPTOR}}`, 'descriptors', 'got an object'],
  ['no descriptor at all', '{"domain":"api","descriptors":[]}', 'descriptors', 'got a list of 0'],
  [
    `${MAX_DESCRIPTORS + 1} descriptors`,
    `{"domain":"api","descriptors":[${Array.from({ length: MAX_DESCRIPTORS + 1 }, () => DESCRIPTOR).join(',')}]}`,
    'descriptors',
    `at most ${MAX_DESCRIPTORS} descriptors per request, got ${MAX_DESCRIPTORS + 1}`,
  ],
  [
    '100,000 descriptors, refused before any is read',
    `{"domain":"api","descriptors":[${Array.from({ length: 100_000 }, () => '1').join(',')}]}`,
    'descriptors',
    'got 100000',
  ],
  ['null for a descriptor', '{"domain":"api","descriptors":[null]}', 'descriptors[0]', 'got null'],
  ['a list for a descriptor', '{"domain":"api","descriptors":[[]]}', 'descriptors[0]', 'got a list of 0'],
  ['no entries', '{"domain":"api","descriptors":[{}]}', 'descriptors[0].entries', 'got nothing'],
  ['a string for entries', '{"domain":"api","descriptors":[{"entries":"a=b"}]}', 'descriptors[0].entries', 'got "a=b"'],
  [
    `${MAX_ENTRIES + 1} entries`,
    `{"domain":"api","descriptors":[{"entries":[${Array.from({ length: MAX_ENTRIES + 1 }, () => ENTRY).join(',')}]}]}`,
    'descriptors[0].entries',
    `has ${MAX_ENTRIES + 1} entries; at most ${MAX_ENTRIES}`,
  ],
  ['null for an entry', withEntry('null'), 'descriptors[0].entries[0]', 'got null'],
  ['a list for an entry', withEntry('["k","v"]'), 'descriptors[0].entries[0]', 'got a list of 2'],
  ['a number for a key', withEntry('{"key":1,"value":"v"}'), 'descriptors[0].entries[0].key', 'got 1'],
  ['an object for a value', withEntry('{"key":"k","value":{}}'), 'descriptors[0].entries[0].value', 'got an object'],
  ['no value', withEntry('{"key":"k"}'), 'descriptors[0].entries[0].value', 'got nothing'],
  [
    `a key of ${MAX_ENTRY_LENGTH + 1} characters`,
    withEntry(`{"key":"${'k'.repeat(MAX_ENTRY_LENGTH + 1)}","value":"v"}`),
    'descriptors[0].entries[0].key',
    `must be 1 to ${MAX_ENTRY_LENGTH} characters, got ${MAX_ENTRY_LENGTH + 1}`,
  ],
  // Numbers.
  ['a string for cost', withTop(',"cost":"1"'), 'cost', 'got "1"'],
  ['a list for cost', withTop(',"cost":[1]'), 'cost', 'got a list of 1'],
  ['an object for cost', withTop(',"cost":{"valueOf":1}'), 'cost', 'got an object'],
  ['true for cost', withTop(',"cost":true'), 'cost', 'got true'],
  ['a negative cost', withTop(',"cost":-1'), 'cost', 'got -1'],
  ['1e400, which JSON reads as Infinity', withTop(',"cost":1e400'), 'cost', 'got Infinity'],
  ['a string for a descriptor cost', withDescriptor(',"cost":"2"'), 'descriptors[0].cost', 'got "2"'],
  ['a negative descriptor cost', withDescriptor(',"cost":-0.5'), 'descriptors[0].cost', 'got -0.5'],
  // Request overrides.
  ['a number for limit', withDescriptor(',"limit":5'), 'descriptors[0].limit', 'got 5'],
  ['a list for limit', withDescriptor(',"limit":[5,"second"]'), 'descriptors[0].limit', 'got a list of 2'],
  [
    'a string for requestsPerUnit',
    withDescriptor(',"limit":{"requestsPerUnit":"5","unit":"second"}'),
    'descriptors[0].limit.requestsPerUnit',
    'got "5"',
  ],
  ...[0, -1, 1.5, 1e13].map((n): [string, string, string, string] => [
    `requestsPerUnit ${n}`,
    withDescriptor(`,"limit":{"requestsPerUnit":${n},"unit":"second"}`),
    'descriptors[0].limit.requestsPerUnit',
    `must be an integer from 1 to 1e12, got ${n}`,
  ]),
  [
    'a number for unit',
    withDescriptor(',"limit":{"requestsPerUnit":5,"unit":1}'),
    'descriptors[0].limit.unit',
    'got 1',
  ],
  ...['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', 'SECOND', ''].map(
    (unit): [string, string, string, string] => [
      `unit ${JSON.stringify(unit)}`,
      withDescriptor(`,"limit":{"requestsPerUnit":5,"unit":${JSON.stringify(unit)}}`),
      'descriptors[0].limit.unit',
      `must be one of second, minute, hour, day, week, month, year, got ${JSON.stringify(unit)}`,
    ],
  ),
];

describe('hostile HTTP input: each bad field is a 400 naming the field and the value', () => {
  for (const [name, body, field, detail] of REFUSED) {
    it(`refuses ${name}`, async () => {
      const answer = await send(body);
      expect(answer.status).toBe(400);
      expect(answer.body.status).toBe(400);
      expect(answer.body.title).toBe('Bad Request');
      expect(answer.body.field).toBe(field);
      expect(answer.body.detail).toContain(detail);
    });
  }

  it('refuses every one of them the same way on /v1/check, /v1/status and /v1/reset', async () => {
    for (const path of ['/v1/check', '/v1/status', '/v1/reset']) {
      for (const [, body, field] of REFUSED) {
        const answer = await send(body, path);
        expect([path, answer.status, answer.body.field]).toEqual([path, 400, field]);
      }
    }
  });

  it('consumed nothing, touched no state and kept the breaker closed through all of them', async () => {
    // per-ip admits 3 an hour: a key that every refused request above named still has all 3.
    const remaining: number[] = [];
    for (let i = 0; i < 4; i++) {
      const answer = await send(withTop(''));
      expect(answer.status).toBe(200);
      remaining.push((answer.body as { descriptors: { remaining: number }[] }).descriptors[0]?.remaining ?? -1);
    }
    expect(remaining).toEqual([2, 1, 0, 0]);
    expect(service.engine.limiter.breakerState).toBe('closed');
    expect(service.stats.storeErrors).toBe(0);
    expect(({} as Record<string, unknown>).cost).toBeUndefined();
    expect(({} as Record<string, unknown>).unit).toBeUndefined();
  });
});

describe('hostile HTTP input: size and nesting', () => {
  it(`refuses a body nested 500,000 deep at ${MAX_JSON_DEPTH} levels, before parsing it`, async () => {
    const depth = 500_000;
    const answer = await send(`{"domain":"api","descriptors":${'['.repeat(depth)}${']'.repeat(depth)}}`);
    expect(answer.status).toBe(400);
    expect(answer.body.detail).toContain(`deeper than ${MAX_JSON_DEPTH} levels`);
    // The body is level 1, its list of descriptors level 2: the 33rd level would open inside the 31st list.
    expect(answer.body.field).toBe(`descriptors${'[0]'.repeat(MAX_JSON_DEPTH - 1)}`);
    // JSON.parse alone spends hundreds of ms on this; the depth scan a few (a generous bound).
    expect(answer.ms).toBeLessThan(5000);
  });

  it('refuses deep objects too, naming where', async () => {
    const answer = await send(`${'{"a":'.repeat(1000)}1${'}'.repeat(1000)}`);
    expect(answer.status).toBe(400);
    expect(answer.body.field).toBe(Array.from({ length: MAX_JSON_DEPTH }, () => 'a').join('.'));
  });

  it(`answers 413 for a body over ${MAX_BODY_BYTES} bytes, and keeps serving`, async () => {
    const answer = await send(withEntry(`{"key":"k","value":"${'v'.repeat(MAX_BODY_BYTES)}"}`));
    expect(answer.status).toBe(413);
    expect(answer.body.detail).toBe(`the body is larger than ${MAX_BODY_BYTES} bytes`);
    const after = await send(`{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"413"}]}]}`);
    expect(after.status).toBe(200);
  });

  it('cuts a long value in a message to 64 characters', async () => {
    const long = 'u'.repeat(100_000);
    const answer = await send(withDescriptor(`,"limit":{"requestsPerUnit":5,"unit":"${long}"}`));
    expect(answer.status).toBe(400);
    expect(answer.body.detail).toContain(`got "${'u'.repeat(64)}…" (100000 characters)`);
    expect((answer.body.detail ?? '').length).toBeLessThan(300);
    const key = await send(withTop(`,"${'k'.repeat(100_000)}":1`));
    expect(key.body.field).toBe(`${'k'.repeat(64)}…`);
  });

  it('accepts the largest request the bounds allow: 64 descriptors of 16 entries, within the body limit', async () => {
    const entries = Array.from({ length: MAX_ENTRIES }, (_, j) => `{"key":"k${j}","value":"${'v'.repeat(400)}"}`);
    const descriptors = Array.from({ length: MAX_DESCRIPTORS }, () => `{"entries":[${entries.join(',')}]}`);
    const answer = await send(`{"domain":"api","descriptors":[${descriptors.join(',')}]}`);
    expect(answer.status).toBe(200);
    expect((answer.body as { descriptors: unknown[] }).descriptors).toHaveLength(MAX_DESCRIPTORS);
  });
});

describe('hostile HTTP input: paths', () => {
  it.each(['/__proto__', '/constructor', '/toString', '/v1/__proto__', '/v1/decide/__proto__'])(
    'answers POST %s with 405 (only the four decision paths take POST), deciding nothing',
    async (path) => {
      const answer = await send(withTop(''), path);
      expect(answer.status).toBe(405);
      expect(answer.body.detail).toBe('use GET, HEAD');
    },
  );
});

describe('hostile gRPC input: override units', () => {
  let client: RateLimitClient;
  beforeAll(() => {
    client = grpcClient(service.grpcPort);
  });
  afterAll(() => client.close());

  it('ignores a limit in a unit number Envoy does not define: the config decides that descriptor', async () => {
    const reply = await client.shouldRateLimit({
      domain: 'api',
      descriptors: [
        {
          entries: [{ key: 'remote_address', value: '203.0.113.8' }],
          limit: { requests_per_unit: 5, unit: 99 },
        },
      ],
    });
    expect(reply.overall_code).toBe('OK');
    const status = (reply.statuses as { current_limit: { requests_per_unit: number } | null }[])[0];
    expect(status?.current_limit?.requests_per_unit).not.toBe(5);
  });
});
