// Hostile costs through `floodgate serve`: a cost outside the library's domain (0, or 1e-9 to 2^53 − 1)
// is the client's fault (HTTP 400) naming the field, or over every limit (gRPC's uint64 hits_addend),
// never a store failure (503, UNAVAILABLE), and it never opens the breaker that `--failure open` would
// then wave everyone through.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { PG_CONFIG, requirePostgres, uniqueSchema } from '../../../floodgate/test/stores/sql/postgres-env.js';
import { startService } from '../../src/service.js';
import { descriptor, get, grpcClient, post, waitFor } from '../helpers.js';

const runPostgres = await requirePostgres();
const schemas: string[] = [];
afterAll(async () => {
  if (schemas.length === 0) return;
  const pool = new pg.Pool({ ...PG_CONFIG, max: 1 });
  for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await pool.end();
});

function configFor(prefix: string): string {
  return `prefix: ${prefix}
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: gcra, name: per-user, limit: 3, periodMs: 3600000 }
          - { algorithm: leaky-bucket, name: per-user-leak, capacity: 3, leakPerSecond: 0.0001 }
`;
}

/** Costs a client may send in JSON that the service must refuse; 1e400 parses as Infinity. */
const REFUSED_JSON = ['5e-324', '4.9e-322', '2.2250738585072014e-308', '1e-10', '9007199254740992', '1e400', '-1'];

async function attack(store: string): Promise<void> {
  const service = await startService({
    config: configFor(`hostile-${randomBytes(6).toString('hex')}`),
    store,
    httpPort: 0,
    grpcPort: 0,
    logger: 'silent',
    failure: 'open',
    drainTimeoutMs: 2000,
  });
  const client = grpcClient(service.grpcPort);
  try {
    // Traffic once the service is ready, as a load balancer sends it: a PostgreSQL store is migrated by
    // then (calls before it would be store faults, admitted by failure 'open').
    await waitFor(async () => (await get(service, '/readyz')).status === 200, 30_000);
    const attacker = descriptor(['user', 'attacker']);
    const statuses = new Set<string>();
    for (let round = 0; round < 4; round++) {
      for (const cost of REFUSED_JSON) {
        for (const path of ['/v1/decide', '/v1/check']) {
          const top = await post(
            service,
            path,
            `{"domain":"api","descriptors":[${JSON.stringify(attacker)}],"cost":${cost}}`,
          );
          statuses.add(`${top.status} ${String(top.body.field)}`);
          expect(String(top.body.detail)).toMatch(
            /^cost must be 0 or a finite number from 1e-9 to 9007199254740991, got /,
          );
          const own = await post(
            service,
            path,
            `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"attacker"}],"cost":${cost}}]}`,
          );
          statuses.add(`${own.status} ${String(own.body.field)}`);
        }
      }
    }
    expect([...statuses].sort()).toEqual(['400 cost', '400 descriptors[0].cost']);
    // gRPC: Envoy's descriptor hits_addend is a uint64; above 2^53 − 1 it counts as 2^53 − 1, more than
    // these policies ever admit: OVER_LIMIT for that descriptor, never an error, never UNAVAILABLE.
    for (const value of [2 ** 53 + 2, '18446744073709551615']) {
      for (let i = 0; i < 3; i++) {
        const reply = await client.shouldRateLimit({
          domain: 'api',
          descriptors: [{ ...attacker, hits_addend: { value } }],
        });
        expect(reply.overall_code).toBe('OVER_LIMIT');
      }
    }
    // Another client, under a limit of 3: exactly 3 of 20, the store deciding every one.
    const victim = { domain: 'api', descriptors: [descriptor(['user', 'victim'])] };
    const codes: unknown[] = [];
    for (let i = 0; i < 10; i++) {
      const reply = await post(service, '/v1/decide', victim);
      expect(reply.status).toBe(200);
      codes.push(reply.body.code);
    }
    for (let i = 0; i < 10; i++) codes.push((await client.shouldRateLimit(victim)).overall_code);
    expect(codes.filter((c) => c === 'OK')).toHaveLength(3);
    expect(codes.filter((c) => c === 'OVER_LIMIT')).toHaveLength(17);
    const stats = JSON.parse((await get(service, '/v1/stats')).text) as {
      health: { breaker: string; storeErrorsTotal: number; degradedTotal: number };
    };
    expect(stats.health).toMatchObject({ breaker: 'closed', storeErrorsTotal: 0, degradedTotal: 0 });
    const metrics = (await get(service, '/metrics')).text;
    expect(metrics).not.toMatch(/floodgate_store_errors_total\{[^}]*\} [1-9]/);
    expect(metrics).toMatch(/floodgate_request_errors_total\{api="http",method="decide",code="400"\} 56/);
  } finally {
    client.close();
    await service.close();
  }
}

describe('hostile costs through the service', () => {
  it('memory store: 400 naming the field, never 503; the breaker stays closed; another key admits exactly 3', () =>
    attack('memory:'));

  it.skipIf(!runPostgres)(
    'PostgreSQL store: 400 naming the field, never 503; the breaker stays closed; another key admits exactly 3',
    { timeout: 60_000 },
    async () => {
      const schema = uniqueSchema('hostile_service');
      schemas.push(schema);
      await attack(`postgres://postgres@127.0.0.1:5432/test?schema=${schema}&unlogged=true`);
    },
  );
});
