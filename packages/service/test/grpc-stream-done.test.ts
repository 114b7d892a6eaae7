// Charging at stream end over Envoy's protocol (docs/service.md, "Charging at stream end"): a rule with
// `charge_on_stream_done: true` checks the request-path call (its descriptor's own hits_addend 0) and
// charges the stream-done call's hits_addend (the actual cost, from dynamic metadata in Envoy) whatever
// the key's state, answering it OK. Two service instances on one Redis, driven by the
// gRPC client built from Envoy's protos as a fleet of Envoys would drive them: the actual cost admitted
// stays within the limit plus the costs of the streams in flight at once (each one's estimate is 0),
// and every unit charged is owed at the end.
import { randomBytes } from 'node:crypto';
import { seededRandom } from 'floodgate/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, requireServer } from '../../floodgate/test/stores/redis/servers.js';
import { ConfigError, parseConfig } from '../src/config.js';
import type { Service } from '../src/service.js';
import { descriptor, grpcClient, post, startTestService } from './helpers.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const runRedis = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const LIMIT = 2000;
/** Thirty days: one unit every 1296 s, nothing drains while the test runs. */
const PERIOD_MS = 30 * 24 * 3_600_000;
const prefix = `stream-done-${randomBytes(6).toString('hex')}`;
const config = `prefix: ${prefix}
domains:
  - domain: llm
    descriptors:
      - key: user
        charge_on_stream_done: true
        policies:
          - { algorithm: gcra, name: tokens, limit: ${LIMIT}, periodMs: ${PERIOD_MS} }
`;

interface Stream {
  actual: number;
  startMs: number;
  endMs: number;
}

/** The largest sum of the costs of streams whose [start, end] spans hold one moment. */
function worstInFlight(streams: readonly Stream[]): number {
  const events: [number, number][] = [];
  for (const s of streams) if (s.actual > 0) events.push([s.startMs, s.actual], [s.endMs, -s.actual]);
  events.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  let current = 0;
  let worst = 0;
  for (const [, delta] of events) {
    current += delta;
    worst = Math.max(worst, current);
  }
  return worst;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('charge_on_stream_done: config', () => {
  it('needs meter policies, and envoyproxy/ratelimit files are read as before', () => {
    const refused = `domains:
  - domain: llm
    descriptors:
      - key: user
        charge_on_stream_done: true
        policies:
          - { algorithm: fixed-window, name: w, limit: 5, windowMs: 1000 }
`;
    expect(() => parseConfig(refused)).toThrow(ConfigError);
    expect(() => parseConfig(refused)).toThrow(/charge_on_stream_done.*cannot charge past the limit under policy "w"/s);
    expect(() => parseConfig(refused.replace(/ {8}policies:\n.*\n/, ''))).toThrow(/needs policies/);
    expect(() => parseConfig(refused.replace('true', '"yes"'))).toThrow(ConfigError);
    const rule = parseConfig(config).domains[0]?.descriptors[0];
    expect(rule?.chargeOnStreamDone).toBe(true);
  });
});

/** One service: the stream-done call charges past the limit and answers OK; the request path then denies. */
async function debtScenario(service: Service): Promise<void> {
  const client = grpcClient(service.grpcPort);
  try {
    const user = descriptor(['user', 'debtor']);
    const check = { domain: 'llm', descriptors: [{ ...user, hits_addend: { value: 0 } }] };
    const done = (cost: number) => ({ domain: 'llm', descriptors: [{ ...user, hits_addend: { value: cost } }] });
    expect((await client.shouldRateLimit(check)).overall_code).toBe('OK');
    // Three times the limit at stream end: every call answered OK, none refused.
    for (let i = 0; i < 3; i++) expect((await client.shouldRateLimit(done(LIMIT))).overall_code).toBe('OK');
    expect((await client.shouldRateLimit(check)).overall_code).toBe('OVER_LIMIT');
    // A request whose descriptor has no hits_addend of its own also only checks (the request's 1 is not charged).
    expect((await client.shouldRateLimit({ domain: 'llm', descriptors: [user] })).overall_code).toBe('OVER_LIMIT');
    // The debt is owed: two limits' worth past the burst (the HTTP API tells how long).
    const status = await post(service, '/v1/status', { domain: 'llm', descriptors: [user] });
    const d = (status.body.descriptors as { resetAfterMs: number }[])[0] as { resetAfterMs: number };
    expect(Math.round(d.resetAfterMs / (PERIOD_MS / LIMIT))).toBe(3 * LIMIT);
  } finally {
    client.close();
  }
}

describe('charge_on_stream_done over gRPC on the memory store (the synchronous path)', () => {
  it('the stream-done call is charged past the limit and answered OK; the request path denies while in debt', async () => {
    const service = await startTestService(config);
    try {
      await debtScenario(service);
    } finally {
      await service.close();
    }
  });

  it('the HTTP API reads the rule the same way: a descriptor with its own cost is charged, one without checks', async () => {
    const service = await startTestService(config);
    try {
      const user = descriptor(['user', 'http']);
      const charged = await post(service, '/v1/decide', {
        domain: 'llm',
        descriptors: [{ ...user, cost: 2 * LIMIT }],
      });
      expect(charged.body.allowed).toBe(true);
      expect((charged.body.descriptors as { charged?: boolean }[])[0]?.charged).toBe(true);
      // A request-level cost is not the descriptor's own: the call only checks, and the key is in debt.
      const checked = await post(service, '/v1/decide', { domain: 'llm', cost: 5, descriptors: [user] });
      expect(checked.body.code).toBe('OVER_LIMIT');
      expect((checked.body.descriptors as { charged?: boolean }[])[0]?.charged).toBeUndefined();
    } finally {
      await service.close();
    }
  });
});

describe.skipIf(!runRedis)('charge_on_stream_done over gRPC: an Envoy fleet on one Redis', () => {
  let a: Service;
  let b: Service;
  beforeAll(async () => {
    a = await startTestService(config, { store: REDIS_URL });
    b = await startTestService(config, { store: REDIS_URL });
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  it('the stream-done call is charged past the limit and answered OK; the request path denies while in debt', () =>
    debtScenario(a));

  it('parallel streams through two service instances admit at most the limit plus the costs in flight', async () => {
    const clients = [grpcClient(a.grpcPort), grpcClient(b.grpcPort)];
    const random = seededRandom(28);
    const user = descriptor(['user', 'fleet']);
    const streams: Stream[] = [];
    let denied = 0;
    try {
      await Promise.all(
        Array.from({ length: 16 }, async (_, caller) => {
          const client = clients[caller % 2] as (typeof clients)[number];
          for (let i = 0; i < 40; i++) {
            const actual = Math.floor(random() * 41);
            const work = Math.floor(random() * 6);
            const startMs = performance.now();
            const answer = await client.shouldRateLimit({
              domain: 'llm',
              descriptors: [{ ...user, hits_addend: { value: 0 } }],
            });
            if (answer.overall_code !== 'OK') {
              denied++;
              await sleep(1);
              continue;
            }
            await sleep(work);
            const end = await client.shouldRateLimit({
              domain: 'llm',
              descriptors: [{ ...user, hits_addend: { value: actual } }],
            });
            // A stream that cost nothing sends 0: a check like the request path's (Envoy ignores the
            // answer of a stream-done call); any cost is charged and answered OK.
            if (actual > 0) expect(end.overall_code).toBe('OK');
            streams.push({ actual, startMs, endMs: performance.now() });
          }
        }),
      );
    } finally {
      for (const c of clients) c.close();
    }
    const total = streams.reduce((sum, s) => sum + s.actual, 0);
    const bound = worstInFlight(streams);
    console.info(
      `stream-done over gRPC, 2 service instances on Redis: ${total} units in ${streams.length} streams against a limit of ${LIMIT} (${denied} request-path denials): overshoot ${total - LIMIT}, bound ${bound} (costs of the streams in flight at once)`,
    );
    expect(denied).toBeGreaterThan(0);
    expect(total).toBeGreaterThan(LIMIT - 40);
    expect(total - LIMIT).toBeLessThanOrEqual(bound);
    // Nothing forgotten: the store owes every unit charged.
    const status = await post(b, '/v1/status', { domain: 'llm', descriptors: [user] });
    const owed = (status.body.descriptors as { resetAfterMs: number }[])[0]?.resetAfterMs as number;
    expect(Math.ceil((owed * LIMIT) / PERIOD_MS)).toBe(total);
  }, 60_000);
});
