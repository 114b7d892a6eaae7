// Prefix rules against long values: matching used to slice the value once per distinct prefix length, so
// with 1,000 prefix lengths and 1,024 descriptors of 990 characters one gRPC call took 0.9–2.8 s on the
// service's only thread. Rules now sit in a trie walked once per value: a gRPC call is within 3× of the
// same call under a plain rule (each path's best round within one run, not absolute times; 1.6-1.9×
// measured on 2026-11-29, 2.04× once beside the whole test run: see docs/security.md).
import { describe, expect, it } from 'vitest';
import { startService } from '../../src/service.js';
import { grpcClient, type RateLimitClient } from '../helpers.js';

const LENGTHS = 1000;
const DESCRIPTORS = 1024;
const VALUE = `/${'a'.repeat(989)}`;

// `path` has 1,000 prefix rules of 1,000 lengths (/b*, /ab*, /aab*, …: none a prefix of the value, every
// one sharing its start) and a rule for any other value; `plain` has only the latter. Both charge the store.
const CONFIG = `
domains:
  - domain: api
    descriptors:
${Array.from(
  { length: LENGTHS },
  (_, k) =>
    `      - { key: path, value: "/${'a'.repeat(k)}b*", policies: [{ algorithm: gcra, limit: 1000000, periodMs: 1000 }] }`,
).join('\n')}
      - { key: path, policies: [{ algorithm: gcra, name: any-path, limit: 1000000, periodMs: 1000 }] }
      - { key: plain, policies: [{ algorithm: gcra, name: any-plain, limit: 1000000, periodMs: 1000 }] }
`;

function request(key: string) {
  return {
    domain: 'api',
    descriptors: Array.from({ length: DESCRIPTORS }, () => ({ entries: [{ key, value: VALUE }] })),
  };
}

/** The median time of `runs` gRPC calls, ms. */
async function median(client: RateLimitClient, req: unknown, runs: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    const reply = await client.shouldRateLimit(req);
    times.push(performance.now() - started);
    expect(reply.overall_code).toBe('OK');
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(runs / 2)] as number;
}

describe('prefix rules: matching is linear in the value, whatever the number of prefix lengths', () => {
  it('1,000 prefix lengths, 1,024 descriptors of 990 characters: one gRPC call within 3× a plain-rule call', {
    timeout: 120_000,
  }, async () => {
    const service = await startService({
      config: CONFIG,
      store: 'memory:',
      httpPort: 0,
      grpcPort: 0,
      logger: 'silent',
    });
    const client = grpcClient(service.grpcPort);
    try {
      const attack = request('path');
      const plain = request('plain');
      // Warm both paths up, then measure them interleaved and keep each one's best round: load on the
      // machine only ever slows a round down, and a walk that is not linear is slow in every round.
      await median(client, attack, 3);
      await median(client, plain, 3);
      let attackMs = Number.POSITIVE_INFINITY;
      let plainMs = Number.POSITIVE_INFINITY;
      for (let round = 0; round < 7; round++) {
        attackMs = Math.min(attackMs, await median(client, attack, 3));
        plainMs = Math.min(plainMs, await median(client, plain, 3));
      }
      const ratio = attackMs / plainMs;
      console.log(
        `prefix rules, ${LENGTHS} lengths, ${DESCRIPTORS} descriptors of ${VALUE.length} characters: ${ratio.toFixed(2)}× a plain-rule gRPC call (${attackMs.toFixed(1)} against ${plainMs.toFixed(1)} ms)`,
      );
      expect(ratio).toBeLessThan(3);
    } finally {
      client.close();
      await service.close();
    }
  });
});
