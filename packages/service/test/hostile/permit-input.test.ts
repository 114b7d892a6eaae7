// Attacks on the permit calls (HTTP API), the lease descriptors of Envoy calls and a rule's `concurrency`
// config. Each HTTP refusal must be a 400 (413, 404, 405) whose problem names the field and what was sent,
// and must leave the permits as they were: after every attack a tenant still gets its full limit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, type ConfigIssue, parseConfig } from '../../src/config.js';
import { MAX_ENTRIES, MAX_ENTRY_LENGTH } from '../../src/engine.js';
import { MAX_BODY_BYTES } from '../../src/http-api.js';
import type { Service } from '../../src/service.js';
import { grpcClient, post, type RateLimitClient, startTestService } from '../helpers.js';
import { PERMIT_CONFIG } from '../permit-config.js';

let service: Service;
let client: RateLimitClient;
beforeAll(async () => {
  service = await startTestService(PERMIT_CONFIG);
  client = grpcClient(service.grpcPort);
});
afterAll(async () => {
  client?.close();
  await service?.close();
});

async function send(path: string, body: string, method = 'POST') {
  const response = await fetch(`http://127.0.0.1:${service.httpPort}${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    ...(method === 'POST' ? { body } : {}),
  });
  const text = await response.text();
  let parsed: { detail?: string; field?: string } = {};
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = { detail: text };
  }
  return { status: response.status, type: response.headers.get('content-type'), body: parsed };
}

const ENTRIES = '[{"key":"tenant","value":"victim"}]';
const LEASE = 'A'.repeat(22);

/** [name, path, body, status, field, text in the detail] */
const REFUSED: [string, string, string, number, string | undefined, string][] = [
  ['not JSON', 'acquire', '{"domain":', 400, undefined, 'not valid JSON'],
  ['a list for a body', 'acquire', '[]', 400, undefined, 'must be a JSON object'],
  [
    '__proto__ at the top',
    'acquire',
    `{"domain":"llm","entries":${ENTRIES},"__proto__":{"cost":0}}`,
    400,
    '__proto__',
    'unknown field',
  ],
  [
    'leaseId on an acquire',
    'acquire',
    `{"domain":"llm","entries":${ENTRIES},"leaseId":"${LEASE}"}`,
    400,
    'leaseId',
    'unknown field',
  ],
  [
    'cost on a release',
    'release',
    `{"domain":"llm","entries":${ENTRIES},"leaseId":"${LEASE}","cost":1}`,
    400,
    'cost',
    'unknown field',
  ],
  ['a number for the domain', 'acquire', `{"domain":7,"entries":${ENTRIES}}`, 400, 'domain', 'got 7'],
  ['an empty domain', 'acquire', `{"domain":"","entries":${ENTRIES}}`, 400, 'domain', 'non-empty'],
  ['no entries', 'acquire', '{"domain":"llm"}', 400, 'entries', 'non-empty list'],
  [
    'an object for the entries',
    'acquire',
    '{"domain":"llm","entries":{"key":"tenant"}}',
    400,
    'entries',
    'got an object',
  ],
  [
    'too many entries',
    'acquire',
    `{"domain":"llm","entries":[${Array.from({ length: MAX_ENTRIES + 1 }, () => '{"key":"k","value":"v"}').join(',')}]}`,
    400,
    'entries',
    `at most ${MAX_ENTRIES}`,
  ],
  [
    'an entry with an extra field',
    'acquire',
    '{"domain":"llm","entries":[{"key":"tenant","value":"x","cost":0}]}',
    400,
    'entries[0].cost',
    'unknown field',
  ],
  [
    'an entry value too long',
    'acquire',
    `{"domain":"llm","entries":[{"key":"tenant","value":"${'v'.repeat(MAX_ENTRY_LENGTH + 1)}"}]}`,
    400,
    'entries[0].value',
    `1 to ${MAX_ENTRY_LENGTH}`,
  ],
  [
    'a number for an entry value',
    'acquire',
    '{"domain":"llm","entries":[{"key":"tenant","value":5}]}',
    400,
    'entries[0].value',
    'got 5',
  ],
  ['cost 0', 'acquire', `{"domain":"llm","entries":${ENTRIES},"cost":0}`, 400, 'cost', 'got 0'],
  ['a fractional cost', 'acquire', `{"domain":"llm","entries":${ENTRIES},"cost":0.5}`, 400, 'cost', 'got 0.5'],
  ['a negative cost', 'acquire', `{"domain":"llm","entries":${ENTRIES},"cost":-1}`, 400, 'cost', 'got -1'],
  ['a cost past 2^53', 'acquire', `{"domain":"llm","entries":${ENTRIES},"cost":1e300}`, 400, 'cost', 'got 1e+300'],
  ['a string cost', 'acquire', `{"domain":"llm","entries":${ENTRIES},"cost":"1"}`, 400, 'cost', 'got "1"'],
  ['no lease id', 'release', `{"domain":"llm","entries":${ENTRIES}}`, 400, 'leaseId', 'got nothing'],
  ['a short lease id', 'release', `{"domain":"llm","entries":${ENTRIES},"leaseId":"abc"}`, 400, 'leaseId', 'got "abc"'],
  [
    'a lease id with a path in it',
    'refresh',
    `{"domain":"llm","entries":${ENTRIES},"leaseId":"../../../../etc/passwd"}`,
    400,
    'leaseId',
    '22 characters',
  ],
  [
    'a lease id of a number',
    'refresh',
    `{"domain":"llm","entries":${ENTRIES},"leaseId":12345}`,
    400,
    'leaseId',
    'got 12345',
  ],
  ['an unknown domain', 'acquire', `{"domain":"nope","entries":${ENTRIES}}`, 404, 'domain', 'unknown domain'],
  [
    'an inherited domain name',
    'acquire',
    `{"domain":"__proto__","entries":${ENTRIES}}`,
    404,
    'domain',
    'unknown domain',
  ],
];

describe('hostile permit calls over the HTTP API', () => {
  it.each(REFUSED)('refuses %s, naming the field', async (_name, op, body, status, field, text) => {
    const answer = await send(`/v1/permits/${op}`, body);
    expect(answer.status).toBe(status);
    expect(answer.type).toContain('application/problem+json');
    if (field !== undefined) expect(answer.body.field).toBe(field);
    expect(answer.body.detail).toContain(text);
  });

  it('refuses a body over the limit (413) and a GET (405)', async () => {
    const huge = `{"domain":"llm","entries":${ENTRIES},"pad":"${'x'.repeat(MAX_BODY_BYTES)}"}`;
    expect((await send('/v1/permits/acquire', huge)).status).toBe(413);
    expect((await send('/v1/permits/acquire', '', 'GET')).status).toBe(405);
  });

  it('holds nothing after every attack: the victim still gets its full limit, and a forged release ends nothing', async () => {
    for (const [, op, body] of REFUSED) await send(`/v1/permits/${op}`, body);
    const entries = JSON.parse(ENTRIES);
    const a = await post(service, '/v1/permits/acquire', { domain: 'llm', entries });
    expect(a.body).toMatchObject({ allowed: true, inFlight: 1 });
    // A well-formed lease id that names no live lease, and the victim's id under another descriptor.
    expect((await post(service, '/v1/permits/release', { domain: 'llm', entries, leaseId: LEASE })).body.released).toBe(
      false,
    );
    const other = [{ key: 'tenant', value: 'attacker' }];
    const forged = await post(service, '/v1/permits/release', {
      domain: 'llm',
      entries: other,
      leaseId: a.body.leaseId,
    });
    expect(forged.body.released).toBe(false);
    const b = await post(service, '/v1/permits/acquire', { domain: 'llm', entries });
    expect(b.body).toMatchObject({ allowed: true, inFlight: 2 });
    for (const leaseId of [a.body.leaseId, b.body.leaseId]) {
      await post(service, '/v1/permits/release', { domain: 'llm', entries, leaseId });
    }
  });
});

describe('hostile lease descriptors of Envoy calls', () => {
  const tenant = { key: 'tenant', value: 'grpc-victim' };

  it('hashes a lease value of any length, and reads a lone lease or release entry as a plain descriptor', async () => {
    const long = { entries: [tenant, { key: 'floodgate_lease', value: 'r'.repeat(200_000) }] };
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [long] })).overall_code).toBe('OK');
    const done = { entries: [...long.entries, { key: 'floodgate_release', value: '1' }] };
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [done] })).overall_code).toBe('OK');
    // A lease entry with no descriptor before it, a release marker alone: no rule, answered OK, nothing held.
    for (const entries of [
      [{ key: 'floodgate_lease', value: 'x' }],
      [{ key: 'floodgate_release', value: '1' }],
      [tenant, { key: 'floodgate_release', value: '1' }],
    ]) {
      const answer = await client.shouldRateLimit({ domain: 'llm', descriptors: [{ entries }] });
      expect(answer.overall_code).toBe('OK');
    }
    const a = await post(service, '/v1/permits/acquire', { domain: 'llm', entries: [tenant] });
    expect(a.body).toMatchObject({ allowed: true, inFlight: 1 });
    await post(service, '/v1/permits/release', { domain: 'llm', entries: [tenant], leaseId: a.body.leaseId });
  });

  it('a huge hits_addend is one permit request too large, refused, never a wrap-around', async () => {
    const entries = [tenant, { key: 'floodgate_lease', value: 'big-cost' }];
    const answer = await client.shouldRateLimit({ domain: 'llm', hits_addend: 4294967295, descriptors: [{ entries }] });
    expect(answer.overall_code).toBe('OVER_LIMIT');
  });

  it('a request id sent twice holds one lease (ids must be unique per request: Envoy generates them)', async () => {
    const entries = [tenant, { key: 'floodgate_lease', value: 'same-id' }];
    for (let i = 0; i < 3; i++) {
      expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [{ entries }] })).overall_code).toBe('OK');
    }
    // One lease is held for the three calls: one more distinct request fits, then the limit holds.
    const other = [tenant, { key: 'floodgate_lease', value: 'other-id' }];
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [{ entries: other }] })).overall_code).toBe(
      'OK',
    );
    const third = [tenant, { key: 'floodgate_lease', value: 'third-id' }];
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [{ entries: third }] })).overall_code).toBe(
      'OVER_LIMIT',
    );
    for (const e of [entries, other]) {
      await client.shouldRateLimit({
        domain: 'llm',
        descriptors: [{ entries: [...e, { key: 'floodgate_release', value: '1' }] }],
      });
    }
  });
});

describe('hostile concurrency config', () => {
  function issues(text: string): ConfigIssue[] {
    try {
      parseConfig(text, 'hostile.yaml');
    } catch (error) {
      if (error instanceof ConfigError) return [...error.issues];
      throw error;
    }
    throw new Error('expected the config to be rejected');
  }
  const rule = (concurrency: string) => `
domains:
  - domain: d
    descriptors:
      - key: k
        concurrency: ${concurrency}
`;

  it.each([
    ['{ limit: 0, leaseMs: 1000 }', 'concurrency.limit', 'got 0'],
    ['{ limit: 10001, leaseMs: 1000 }', 'concurrency.limit', 'got 10001'],
    ['{ limit: "2", leaseMs: 1000 }', 'concurrency.limit', 'got "2"'],
    ['{ limit: 2, leaseMs: 2147483648 }', 'concurrency.leaseMs', 'got 2147483648'],
    ['{ limit: 2 }', 'concurrency.leaseMs', 'got undefined'],
    ['{ limit: 2, leaseMs: 1000, name: "Bad Name" }', 'concurrency.name', 'lower-case'],
    ['{ limit: 2, leaseMs: 1000, __proto__: { x: 1 } }', 'concurrency.__proto__', 'not an option'],
    ['[2, 1000]', 'concurrency', 'mapping'],
  ])('refuses concurrency %s at its path', (value, path, text) => {
    const found = issues(rule(value));
    expect(found.map((i) => i.path)).toContain(`domains[0].descriptors[0].${path}`);
    expect(found.find((i) => i.path.endsWith(path))?.message).toContain(text);
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it('refuses a concurrency limit on an unlimited rule, and a name shared with a policy of the rule', () => {
    expect(issues(rule('{ limit: 1, leaseMs: 1000 }\n        unlimited: true')).map((i) => i.path)).toContain(
      'domains[0].descriptors[0].unlimited',
    );
    const shared = `${rule('{ limit: 1, leaseMs: 1000, name: x }')}        policies: [{ algorithm: gcra, name: x, limit: 1, periodMs: 1000 }]\n`;
    expect(issues(shared).map((i) => i.path)).toContain('domains[0].descriptors[0].concurrency.name');
  });
});
