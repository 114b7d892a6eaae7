// No cost lost to rounding, through `floodgate serve`'s HTTP API: at a limit of 4294967295 (Envoy's
// largest), a window spent to its limit answered 2,000 of 2,000 calls of cost 1e-9 OK (`count + 1e-9 ===
// count` in a double). Such a cost is below the policy's resolution (2^-21 at this limit): the service
// refuses it (400, naming the field, the policy and its resolution) before the store, and it is no store
// failure.
import { afterEach, describe, expect, it } from 'vitest';
import { type Service, startService } from '../../src/service.js';
import { descriptor, get, post } from '../helpers.js';

const CONFIG = `
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: fixed-window, name: envoy-max, limit: 4294967295, windowMs: 3600000, align: first-request }
      - key: tenant
        policies:
          - { algorithm: sliding-window, name: tenant-max, limit: 4294967295, windowMs: 3600000 }
`;

let service: Service | undefined;
afterEach(async () => {
  await service?.close();
  service = undefined;
});

/** Calls of cost 1e-9 after the limit (the report's 2,000). */
const CALLS = 2000;

describe('hostile costs through the service: a cost below the resolution', () => {
  it('2,000 calls of cost 1e-9 after a limit of 4294967295: all refused (400, the policy and its resolution named), none OK', {
    timeout: 180_000,
  }, async () => {
    service = await startService({
      config: CONFIG,
      store: 'memory:',
      httpPort: 0,
      grpcPort: 0,
      logger: 'silent',
      failure: 'open',
      drainTimeoutMs: 2000,
    });
    const s = service;
    for (const key of ['user', 'tenant']) {
      const attacker = descriptor([key, 'attacker']);
      const first = await post(s, '/v1/decide', { domain: 'api', descriptors: [attacker] });
      expect(first.body.code).toBe('OK');
      const spent = await post(s, '/v1/decide', { domain: 'api', descriptors: [attacker], cost: 4294967294 });
      expect(spent.body.code).toBe('OK');
      const answers = new Map<string, number>();
      const details = new Set<string>();
      // The report's 2,000 calls on the fixed window, 200 on the sliding window; 20 at a time.
      const calls = key === 'user' ? CALLS : CALLS / 10;
      for (let i = 0; i < calls; i += 20) {
        const batch = Array.from({ length: 20 }, (_, j) =>
          // Half with the request's cost, half with the descriptor's own.
          post(
            s,
            '/v1/decide',
            j % 2 === 0
              ? { domain: 'api', descriptors: [attacker], cost: 1e-9 }
              : { domain: 'api', descriptors: [{ ...attacker, cost: 1e-9 }] },
          ),
        );
        for (const answer of await Promise.all(batch)) {
          const label = `${answer.status} ${String(answer.body.code ?? answer.body.field)}`;
          answers.set(label, (answers.get(label) ?? 0) + 1);
          details.add(String(answer.body.detail).replace(/^[^ ]+ /, ''));
        }
      }
      expect([...details]).toEqual([
        `1e-9 is below the resolution of policy "${key === 'user' ? 'envoy-max' : 'tenant-max'}" (limit 4294967295): its smallest cost is 4.76837158203125e-7, since a smaller one can be lost in rounding once the count is large`,
      ]);
      expect(Object.fromEntries(answers)).toEqual({ '400 cost': calls / 2, '400 descriptors[0].cost': calls / 2 });
      // The resolution itself is a cost like any other: at the limit, it is denied.
      const atResolution = await post(s, '/v1/decide', { domain: 'api', descriptors: [attacker], cost: 2 ** -21 });
      expect(atResolution.body.code).toBe('OVER_LIMIT');
      expect((await post(s, '/v1/decide', { domain: 'api', descriptors: [attacker] })).body.code).toBe('OVER_LIMIT');
    }
    const stats = JSON.parse((await get(s, '/v1/stats')).text) as {
      health: { breaker: string; storeErrorsTotal: number };
    };
    expect(stats.health).toMatchObject({ breaker: 'closed', storeErrorsTotal: 0 });
  });
});
