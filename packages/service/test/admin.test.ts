import { request as httpsRequest } from 'node:https';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { type Service, type ServiceOptions, startService } from '../src/service.js';
import { descriptor, post } from './helpers.js';
import { makePki, type Pair } from './tls-certs.js';

const TOKEN = 'admin-token-0123456789abcdef';
const CONFIG = `domains:
  - domain: api
    descriptors:
      - key: tenant
        policies:
          - { algorithm: fixed-window, name: per-tenant, limit: 3, windowMs: 3600000 }
`;

const services: Service[] = [];
afterAll(async () => {
  await Promise.all(services.map((s) => s.close()));
});

/** A service with an admin API, and the JSON log lines it writes. */
async function start(
  options: { [K in keyof ServiceOptions]?: ServiceOptions[K] | undefined } = {},
): Promise<{ service: Service; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line.startsWith('{')) logs.push(JSON.parse(line));
      done();
    },
  });
  const service = await startService({
    config: CONFIG,
    store: 'memory',
    httpPort: 0,
    grpcPort: false,
    logger: pino({ level: 'info' }, sink),
    ...options,
    ...('admin' in options ? {} : { admin: { token: TOKEN, refreshMs: 0 } }),
  } as ServiceOptions);
  services.push(service);
  return { service, logs };
}

async function call(
  service: Service,
  method: string,
  path: string,
  options: { token?: string; authorization?: string; body?: unknown } = {},
): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.authorization !== undefined) headers.authorization = options.authorization;
  const response = await fetch(`http://127.0.0.1:${service.httpPort}${path}`, {
    method,
    headers,
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  return {
    status: response.status,
    body: (await response.json()) as Record<string, unknown>,
    headers: response.headers,
  };
}

const tenant = (value: string) => ({ domain: 'api', descriptors: [descriptor(['tenant', value])] });
const raise = { policies: [{ algorithm: 'fixed-window', limit: 10, windowMs: 3_600_000 }], note: 'ticket 7' };

describe('admin API', () => {
  it('refuses calls without a valid token: 401 with a Bearer challenge, and changes nothing', async () => {
    const { service } = await start();
    for (const options of [
      {},
      { token: 'wrong-token-0123456789' },
      { authorization: `Basic ${TOKEN}` },
      { authorization: 'Bearer' },
    ]) {
      for (const [method, path] of [
        ['GET', '/v1/admin/overrides'],
        ['PUT', '/v1/admin/overrides/tenant/acme'],
        ['DELETE', '/v1/admin/overrides/tenant/acme'],
        ['POST', '/v1/admin/reset'],
      ] as const) {
        const answer = await call(service, method, path, { ...options, body: method === 'PUT' ? raise : undefined });
        expect([answer.status, answer.headers.get('www-authenticate')]).toEqual([
          401,
          'Bearer realm="floodgate-admin"',
        ]);
      }
    }
    expect((await call(service, 'GET', '/v1/admin/overrides/tenant/acme', { token: TOKEN })).status).toBe(404);
  });

  it('answers 404 on a service without an admin API', async () => {
    const { service } = await start({ admin: undefined });
    expect((await call(service, 'GET', '/v1/admin/overrides', { token: TOKEN })).status).toBe(404);
  });

  it('sets, reads, lists and deletes an override that decisions then use, one audit line per change', async () => {
    const { service, logs } = await start();
    for (let i = 0; i < 3; i++) expect((await post(service, '/v1/decide', tenant('acme'))).body.code).toBe('OK');
    expect((await post(service, '/v1/decide', tenant('acme'))).body.code).toBe('OVER_LIMIT');
    const set = await call(service, 'PUT', '/v1/admin/overrides/tenant/acme', { token: TOKEN, body: raise });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ scope: 'tenant', id: 'acme', note: 'ticket 7' });
    // The count so far stays: 3 admitted (the denial counted nothing), and this call makes 4 of a limit now 10.
    const next = await post(service, '/v1/decide', tenant('acme'));
    expect(next.body.descriptors).toMatchObject([{ code: 'OK', limit: 10, remaining: 6, policy: 'per-tenant' }]);
    expect((await call(service, 'GET', '/v1/admin/overrides/tenant/acme', { token: TOKEN })).body).toEqual(set.body);
    const list = await call(service, 'GET', '/v1/admin/overrides?scope=tenant&limit=10', { token: TOKEN });
    expect((list.body.overrides as unknown[]).length).toBe(1);
    const state = await call(service, 'POST', '/v1/admin/state', { token: TOKEN, body: tenant('acme') });
    expect(state.body.descriptors).toMatchObject([{ limit: 10, remaining: 6 }]);
    expect((await call(service, 'DELETE', '/v1/admin/overrides/tenant/acme', { token: TOKEN })).body).toEqual({
      removed: true,
    });
    expect((await post(service, '/v1/decide', tenant('acme'))).body.code).toBe('OVER_LIMIT');
    expect((await call(service, 'POST', '/v1/admin/reset', { token: TOKEN, body: tenant('acme') })).status).toBe(200);
    expect((await post(service, '/v1/decide', tenant('acme'))).body.code).toBe('OK');
    const audit = logs.filter((l) => l.audit !== undefined).map((l) => l.audit as Record<string, unknown>);
    expect(audit.map((a) => [a.who, a.action])).toEqual([
      ['token:env', 'set-override'],
      ['token:env', 'delete-override'],
      ['token:env', 'reset'],
    ]);
    expect(audit[0]).toMatchObject({ target: { scope: 'tenant', id: 'acme' } });
    expect(Number.isNaN(Date.parse(audit[0]?.at as string))).toBe(false);
    expect(JSON.stringify(logs)).not.toContain(TOKEN);
  });

  it('lists the most denied keys to an admin only', async () => {
    const { service } = await start();
    for (let i = 0; i < 5; i++) await post(service, '/v1/decide', tenant('noisy'));
    expect((await call(service, 'GET', '/v1/admin/top-denied')).status).toBe(401);
    for (let i = 0; i < 4; i++) await post(service, '/v1/decide', tenant('quiet'));
    const top = await call(service, 'GET', '/v1/admin/top-denied', { token: TOKEN });
    expect(top.body).toEqual({
      keys: {
        total: 3,
        error: 0,
        keys: [
          { key: 'api|tenant=noisy', count: 2, error: 0 },
          { key: 'api|tenant=quiet', count: 1, error: 0 },
        ],
      },
      tenants: {
        total: 3,
        error: 0,
        keys: [
          { key: 'noisy', count: 2, error: 0 },
          { key: 'quiet', count: 1, error: 0 },
        ],
      },
    });
    const one = await call(service, 'GET', '/v1/admin/top-denied?n=1', { token: TOKEN });
    expect((one.body.tenants as { keys: unknown[] }).keys).toEqual([{ key: 'noisy', count: 2, error: 0 }]);
    for (const n of ['0', '129', '-1', '1e3', '2.5', 'x', '__proto__', '9'.repeat(400)]) {
      const bad = await call(service, 'GET', `/v1/admin/top-denied?n=${n}`, { token: TOKEN });
      expect([n, bad.status, bad.body.field]).toEqual([n, 400, 'n']);
    }
    // Keys never become metric labels: the metrics carry counts and the sketch's error only.
    const metrics = await (await fetch(`http://127.0.0.1:${service.httpPort}/metrics`)).text();
    expect(metrics).not.toContain('noisy');
    expect(metrics).toContain('floodgate_top_denied_denials{kind="tenant"} 3');
    expect(metrics).toContain('floodgate_top_denied_error{kind="key"} 0');
  });

  it('refuses bad admin input with a 400 naming the field, and bounds pages and bodies', async () => {
    const { service } = await start();
    const bad = await call(service, 'PUT', '/v1/admin/overrides/tenant/acme', {
      token: TOKEN,
      body: { policies: [{ algorithm: 'gcra', limit: -1, periodMs: 1000 }] },
    });
    expect([bad.status, bad.body.field]).toEqual([400, 'override.policies[0].limit']);
    expect((await call(service, 'GET', '/v1/admin/overrides?limit=100000', { token: TOKEN })).status).toBe(400);
    expect((await call(service, 'GET', '/v1/admin/overrides?scope=__proto__', { token: TOKEN })).status).toBe(400);
    expect((await call(service, 'GET', '/v1/admin/overrides/user/x', { token: TOKEN })).status).toBe(404);
    const long = await call(service, 'PUT', `/v1/admin/overrides/key/${'k'.repeat(2000)}`, {
      token: TOKEN,
      body: raise,
    });
    expect(long.status).toBe(400);
    const huge = await call(service, 'PUT', '/v1/admin/overrides/tenant/acme', {
      token: TOKEN,
      body: { ...raise, note: 'n'.repeat(70_000) },
    });
    expect(huge.status).toBe(413);
  });
});

describe('admin API over mutual TLS', () => {
  const pki = makePki();
  afterAll(() => pki.remove());

  function https(port: number, path: string, client: Pair): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = httpsRequest(
        {
          host: '127.0.0.1',
          port,
          path,
          servername: 'localhost',
          ca: pki.read(pki.ca.cert),
          cert: pki.read(client.cert),
          key: pki.read(client.key),
          agent: false,
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.end();
    });
  }

  it('admits a listed client certificate, refuses another from the same CA (403)', async () => {
    const { service } = await start({
      admin: { certSubjects: ['client'] },
      httpTls: { certFile: pki.server.cert, keyFile: pki.server.key, clientCaFile: pki.ca.cert },
    });
    expect(await https(service.httpPort, '/v1/admin/overrides', pki.client)).toBe(200);
    expect(await https(service.httpPort, '/v1/admin/overrides', pki.intruder)).toBe(403);
  });
});
