// Hostile settles through `floodgate serve` (POST /v1/settle). A client holds the settlements it was
// answered: it may replay one (to the same process, to another process of the fleet, after a reload),
// alter any field, move it to other entries, forge one, or settle at any cost it likes. Each is refused
// with a problem+json 400 naming the field, never a store failure; costs and shapes are refused before any
// store call, a settlement's signature before its own store call. Processes sharing a settle secret
// settle each other's calls, and a decision settles once between them.
import { randomBytes } from 'node:crypto';
import { memoryStore, type Store } from 'floodgate';
import { afterEach, describe, expect, it } from 'vitest';
import { type Service, startService } from '../../src/service.js';
import { descriptor, post } from '../helpers.js';

const CONFIG = `
domains:
  - domain: llm
    descriptors:
      - key: user
        policies:
          - { algorithm: gcra, name: tokens, limit: 1000, periodMs: 3600000 }
      - key: ip
        policies:
          - { algorithm: fixed-window, name: per-ip, limit: 10, windowMs: 3600000 }
`;

/** A memory store that counts every call made of it: the wrapper asks the real store. */
function counted(): { store: Store; calls: () => number } {
  const inner = memoryStore();
  let calls = 0;
  const store = new Proxy(inner, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== 'function' || property === 'close') return value;
      return (...args: unknown[]) => {
        calls++;
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, calls: () => calls };
}

const services: Service[] = [];
afterEach(async () => {
  for (const s of services.splice(0)) await s.close();
});

async function serve(store: Store, settleSecret?: string): Promise<Service> {
  const service = await startService({
    config: CONFIG,
    store,
    httpPort: 0,
    grpcPort: false,
    logger: 'silent',
    drainTimeoutMs: 2000,
    ...(settleSecret === undefined ? {} : { settleSecret }),
  });
  services.push(service);
  return service;
}

const user = descriptor(['user', 'alice']);

/** Decides `estimate` for alice with settle: true; returns the settlement. */
async function reserve(service: Service, estimate: number): Promise<Record<string, unknown>> {
  const answer = await post(service, '/v1/decide', {
    domain: 'llm',
    descriptors: [user],
    cost: estimate,
    settle: true,
  });
  expect(answer.status).toBe(200);
  const d = (answer.body.descriptors as Record<string, unknown>[])[0] as Record<string, unknown>;
  expect(d.allowed).toBe(true);
  return d.settlement as Record<string, unknown>;
}

async function remaining(service: Service): Promise<number> {
  const answer = await post(service, '/v1/status', { domain: 'llm', descriptors: [user] });
  return (answer.body.descriptors as { remaining: number }[])[0]?.remaining as number;
}

function settle(service: Service, settlement: unknown, cost: unknown, entries = user.entries) {
  return post(service, '/v1/settle', { domain: 'llm', descriptors: [{ entries, settlement, cost }] });
}

describe('hostile settles over the HTTP API', () => {
  it('altered, forged, moved and malformed settlements are refused naming the field; nothing is given back', async () => {
    const service = await serve(memoryStore());
    const s = await reserve(service, 500);
    expect(await remaining(service)).toBe(500);
    const forged = [
      { ...s, cost: 1e6 },
      { ...s, cost: 500.5 },
      { ...s, atUs: (s.atUs as number) - 3_600_000_000 },
      { ...s, expiresAtMs: (s.expiresAtMs as number) + 1e9 },
      { ...s, policies: ['other'] },
      { ...s, id: 'forged' },
      { ...s, signature: 'A'.repeat(43) },
      { ...s, signature: undefined },
      { id: 'x', cost: 500, policies: ['tokens'], atUs: 1, expiresAtMs: 1e15, signature: 'y' },
    ];
    for (const settlement of forged) {
      const answer = await settle(service, settlement, 0);
      expect(answer.status).toBe(400);
      expect(answer.headers.get('content-type')).toBe('application/problem+json');
      expect(answer.body.field).toBe('descriptors[0].settlement');
    }
    // The right settlement on another user's entries.
    const moved = await settle(service, s, 0, descriptor(['user', 'mallory']).entries);
    expect(moved.status).toBe(400);
    expect(moved.body.field).toBe('descriptors[0].settlement');
    for (const settlement of [null, 'text', [], 42]) {
      const answer = await settle(service, settlement, 0);
      expect(answer.status).toBe(400);
      expect(answer.body.field).toBe('descriptors[0].settlement');
    }
    expect(await remaining(service)).toBe(500);
    // The genuine one still settles, once.
    expect((await settle(service, s, 100)).body).toEqual({ descriptors: [{ rule: 'user', settled: true }] });
    expect(await remaining(service)).toBe(900);
    const replay = await settle(service, s, 0);
    expect(replay.status).toBe(400);
    expect(replay.body.detail).toMatch(/settled already/);
    expect(await remaining(service)).toBe(900);
  });

  it('bad costs, shapes and rules are refused before any store call', async () => {
    const { store, calls } = counted();
    const service = await serve(store);
    const s = await reserve(service, 10);
    const before = calls();
    const bad: [unknown, string][] = [
      [{ domain: 'llm', descriptors: [{ entries: user.entries, settlement: s, cost: -1 }] }, 'descriptors[0].cost'],
      [{ domain: 'llm', descriptors: [{ entries: user.entries, settlement: s, cost: '5' }] }, 'descriptors[0].cost'],
      [{ domain: 'llm', descriptors: [{ entries: user.entries, settlement: s }] }, 'descriptors[0].cost'],
      [
        { domain: 'llm', descriptors: [{ entries: user.entries, settlement: s, cost: 2 ** 53 }] },
        'descriptors[0].cost',
      ],
      [{ domain: 'llm', descriptors: [{ entries: user.entries, settlement: s, cost: 1e-12 }] }, 'descriptors[0].cost'],
      [
        `{"domain":"llm","descriptors":[{"entries":${JSON.stringify(user.entries)},"settlement":${JSON.stringify(s)},"cost":1e400}]}`,
        'descriptors[0].cost',
      ],
      // A valid first descriptor does not reach the store when the second is bad.
      [
        {
          domain: 'llm',
          descriptors: [
            { entries: user.entries, settlement: s, cost: 1 },
            { entries: user.entries, settlement: s, cost: Number.NaN },
          ],
        },
        'descriptors[1].cost',
      ],
      [
        { domain: 'llm', descriptors: [{ entries: user.entries, settlement: s, cost: 1, extra: 1 }] },
        'descriptors[0].extra',
      ],
      [{ domain: 'llm', descriptors: [{ entries: [], settlement: s, cost: 1 }] }, 'descriptors[0].entries'],
      [{ domain: 'llm', descriptors: [] }, 'descriptors'],
      [
        { domain: 'llm', descriptors: new Array(65).fill({ entries: user.entries, settlement: s, cost: 1 }) },
        'descriptors',
      ],
      [{ domain: '', descriptors: [{ entries: user.entries, settlement: s, cost: 1 }] }, 'domain'],
      // A rule whose policy cannot settle (a fixed window).
      [
        { domain: 'llm', descriptors: [{ entries: descriptor(['ip', '1']).entries, settlement: s, cost: 1 }] },
        'descriptors[0]',
      ],
      // No rule at all.
      [
        { domain: 'llm', descriptors: [{ entries: descriptor(['other', '1']).entries, settlement: s, cost: 1 }] },
        'descriptors[0]',
      ],
    ];
    for (const [body, field] of bad) {
      const answer = await post(service, '/v1/settle', body);
      expect(answer.status, JSON.stringify(body).slice(0, 200)).toBe(400);
      expect(answer.body.field).toBe(field);
    }
    expect(calls()).toBe(before);
    // settle is refused on the calls that change nothing, and must be a boolean.
    for (const [path, value, field] of [
      ['/v1/check', true, 'settle'],
      ['/v1/decide', 'yes', 'settle'],
    ] as const) {
      const answer = await post(service, path, { domain: 'llm', descriptors: [user], settle: value });
      expect(answer.status).toBe(400);
      expect(answer.body.field).toBe(field);
    }
    expect(calls()).toBe(before);
    // A body past the limit is refused unread.
    const huge = await fetch(`http://127.0.0.1:${service.httpPort}/v1/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: 'x'.repeat(1024 * 1024 + 1),
    });
    expect(huge.status).toBe(413);
    expect((await fetch(`http://127.0.0.1:${service.httpPort}/v1/settle`)).status).toBe(405);
  });

  it('a fleet sharing a secret settles on any process, once; without it, only on the issuing one', async () => {
    const secret = randomBytes(32).toString('base64url');
    const store = memoryStore();
    const [a, b, c] = [await serve(store, secret), await serve(store, secret), await serve(store)];
    const s = await reserve(a, 400);
    expect(await remaining(a)).toBe(600);
    // A process with its own random secret refuses it.
    expect((await settle(c, s, 0)).body.field).toBe('descriptors[0].settlement');
    // Another process of the fleet settles it: 300 of the 400 come back.
    expect((await settle(b, s, 100)).status).toBe(200);
    expect(await remaining(a)).toBe(900);
    // Replayed to each process of the fleet, the issuing one included: refused, nothing more comes back.
    for (const service of [a, b]) {
      const replay = await settle(service, s, 0);
      expect(replay.status).toBe(400);
      expect(replay.body.detail).toMatch(/settled already/);
    }
    expect(await remaining(b)).toBe(900);
    // After a reload (a new engine), the same secret still verifies; a fresh settlement settles.
    a.applyConfig(a.engine.config);
    const t = await reserve(a, 50);
    expect((await settle(a, t, 150)).status).toBe(200);
    expect(await remaining(a)).toBe(750);
  });
});
