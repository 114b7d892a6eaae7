import { createServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getConnInfo } from '@hono/node-server/conninfo';
import { Hono } from 'hono';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { rateLimit as honoRateLimit, type RateLimitVariables } from '../../src/http/hono.js';
import { gcra } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';
import { type App, type Harness, harnesses, type NeutralOptions, type Running, SEEN_KEY } from './harness.js';
import { collectWarnings } from './warnings.js';

// The client address follows each framework's own trusted-proxy setting: Express `trust proxy`, Fastify
// `trustProxy`, Koa `app.proxy` (with `maxIpsCount`); node:http and Hono have none, and floodgate's
// `trustProxy` is the setting there and the override everywhere. Every request goes over real HTTP.

/** One request per key and minute: a second request on a key is denied. */
function app(proxyHops: number | undefined, extra: Partial<NeutralOptions> = {}): App {
  const limit: NeutralOptions = {
    policies: gcra({ limit: 1, periodMs: 60_000, name: 'who' }),
    clock: manualClock({ startMs: Date.UTC(2030, 0, 1) }),
    ...extra,
  };
  return {
    global: limit,
    routes: [{ method: 'GET', path: '/who', limit }],
    ...(proxyHops === undefined ? {} : { proxyHops }),
  };
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
}

/** A GET with node:http, so the client's own address can be chosen (any 127.0.0.0/8 address is local). */
function get(url: string, headers: Record<string, string> = {}, localAddress?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      { headers, agent: false, ...(localAddress === undefined ? {} : { localAddress }) },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** `[status, key the handler saw]` of a request with this X-Forwarded-For (none: no header). */
async function who(server: Running, xff?: string, localAddress?: string): Promise<[number, string | undefined]> {
  const answer = await get(`${server.url}/who`, xff === undefined ? {} : { 'x-forwarded-for': xff }, localAddress);
  return [answer.status, answer.headers[SEEN_KEY] as string | undefined];
}

/**
 * A reverse proxy as a load balancer is one: it forwards every request to `target`, appending the
 * address of the client it came from to X-Forwarded-For.
 */
async function startProxy(target: string): Promise<Running> {
  const server = createServer((req, res) => {
    const prior = req.headers['x-forwarded-for'];
    const client = req.socket.remoteAddress as string;
    const headers = { ...req.headers, 'x-forwarded-for': prior === undefined ? client : `${prior}, ${client}` };
    const upstream = httpRequest(new URL(req.url ?? '/', target), { method: req.method, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe.each(harnesses.map((h) => [h.name, h] as [string, Harness]))('%s', (_name, harness) => {
  let servers: Running[] = [];
  let warnings: ReturnType<typeof collectWarnings>;
  const start = async (application: App) => {
    const server = await harness.start(application, '127.0.0.1');
    servers.push(server);
    return server;
  };
  beforeEach(() => {
    warnings = collectWarnings();
  });
  afterEach(async () => {
    warnings.stop();
    await Promise.all(servers.map((server) => server.close()));
    servers = [];
  });

  it('with no proxy trusted, forwarded headers change nothing and draw one warning', async () => {
    const server = await start(app(undefined));
    expect(await who(server, '1.1.1.1')).toEqual([200, '127.0.0.1']);
    expect((await who(server, '2.2.2.2'))[0]).toBe(429);
    expect((await who(server, '3.3.3.3'))[0]).toBe(429);
    expect((await get(`${server.url}/who`, { forwarded: 'for=4.4.4.4' })).status).toBe(429);
    expect((await get(`${server.url}/who`, { 'x-real-ip': '5.5.5.5' })).status).toBe(429);
    await warnings.flush();
    expect(warnings.codes()).toEqual(['FLOODGATE_UNTRUSTED_PROXY']);
    expect(warnings.warnings[0]?.message).toContain('x-forwarded-for');
  });

  it('trustProxy: three clients behind one proxy get three keys', async () => {
    const server = await start(app(undefined, { trustProxy: { hops: 1 } }));
    expect(await who(server, '1.1.1.1')).toEqual([200, '1.1.1.1']);
    expect(await who(server, '2.2.2.2')).toEqual([200, '2.2.2.2']);
    expect(await who(server, '3.3.3.3')).toEqual([200, '3.3.3.3']);
    expect((await who(server, '1.1.1.1'))[0]).toBe(429);
    // What a client writes sits left of the proxy's entry: prepending changes nothing.
    expect((await who(server, '9.9.9.9, 2.2.2.2'))[0]).toBe(429);
    await warnings.flush();
    expect(warnings.codes()).toEqual([]);
  });

  it('trustProxy: false keeps the peer and stays silent', async () => {
    const server = await start(app(harness.proxySetting ? 1 : undefined, { trustProxy: false }));
    expect(await who(server, '1.1.1.1')).toEqual([200, '127.0.0.1']);
    expect((await who(server, '2.2.2.2'))[0]).toBe(429);
    await warnings.flush();
    expect(warnings.codes()).toEqual([]);
  });

  it('three clients through a real reverse proxy get three keys', async () => {
    // The framework's own setting where it has one, floodgate's trustProxy where it has none.
    const server = await start(harness.proxySetting ? app(1) : app(undefined, { trustProxy: { hops: 1 } }));
    const proxy = await startProxy(server.url);
    servers.push(proxy);
    for (const client of ['127.0.0.1', '127.0.0.2', '127.0.0.3']) {
      expect(await who(proxy, undefined, client)).toEqual([200, client]);
    }
    expect((await who(proxy, undefined, '127.0.0.2'))[0]).toBe(429);
    // A client cannot pick another key by writing X-Forwarded-For itself.
    expect((await who(proxy, '127.0.0.9', '127.0.0.3'))[0]).toBe(429);
    await warnings.flush();
    expect(warnings.codes()).toEqual([]);
  });

  describe.runIf(harness.proxySetting)("the framework's own trusted-proxy setting", () => {
    it('gives three clients behind one proxy three keys, and a prepended address changes nothing', async () => {
      const server = await start(app(1));
      expect(await who(server, '1.1.1.1')).toEqual([200, '1.1.1.1']);
      expect(await who(server, '2.2.2.2')).toEqual([200, '2.2.2.2']);
      expect(await who(server, '3.3.3.3')).toEqual([200, '3.3.3.3']);
      expect((await who(server, '1.1.1.1'))[0]).toBe(429);
      expect((await who(server, '9.9.9.9, 3.3.3.3'))[0]).toBe(429);
      await warnings.flush();
      expect(warnings.codes()).toEqual([]);
    });

    it('groups IPv6 clients by /64, so rotating addresses does not escape', async () => {
      const server = await start(app(1));
      expect(await who(server, '2001:db8:1:2::1')).toEqual([200, '2001:db8:1:2::/64']);
      expect((await who(server, '2001:db8:1:2:ffff::9'))[0]).toBe(429);
      expect(await who(server, '::ffff:203.0.113.7')).toEqual([200, '203.0.113.7']);
      expect((await who(server, '203.0.113.7'))[0]).toBe(429);
    });

    it('keys a forwarded entry that is not an address on the peer, never on the text', async () => {
      const server = await start(app(1));
      // The framework names `nonsense-1` as the client; a key of it would let each new text pass.
      expect(await who(server, 'nonsense-1')).toEqual([200, '127.0.0.1']);
      expect((await who(server, 'nonsense-2'))[0]).toBe(429);
      expect((await who(server, '"; 1.1.1.1'))[0]).toBe(429);
    });

    it('is overridden by trustProxy', async () => {
      const server = await start(app(1, { trustProxy: { hops: 2 } }));
      // The framework would say 8.8.8.8; two hops make the client the entry left of it.
      expect(await who(server, '7.7.7.7, 8.8.8.8')).toEqual([200, '7.7.7.7']);
      expect(await who(server, '6.6.6.6, 8.8.8.8')).toEqual([200, '6.6.6.6']);
    });
  });
});

describe('hono without a socket', () => {
  const build = (withConnInfo: boolean) => {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use(
      honoRateLimit({
        policies: gcra({ limit: 2, periodMs: 60_000, name: 'in-process' }),
        clock: manualClock(),
        ...(withConnInfo ? { getConnInfo } : {}),
      }),
    );
    app.get('/', (c) => c.text(c.get('rateLimit')?.key ?? 'none'));
    return app;
  };

  it.each([false, true])(
    'app.request() is limited on one shared key, not answered 500 (getConnInfo: %s)',
    async (withConnInfo) => {
      const warnings = collectWarnings();
      try {
        const app = build(withConnInfo);
        const first = await app.request('/');
        expect([first.status, await first.text()]).toEqual([200, 'unknown']);
        expect((await app.request('/')).status).toBe(200);
        const third = await app.request('/');
        expect(third.status).toBe(429);
        expect(third.headers.get('retry-after')).toBe('30');
        await warnings.flush();
        expect(warnings.codes()).toEqual(['FLOODGATE_UNKNOWN_ADDRESS']);
      } finally {
        warnings.stop();
      }
    },
  );

  it('app.request() with a key of the caller needs no address and warns of nothing', async () => {
    const warnings = collectWarnings();
    try {
      const app = new Hono();
      app.use(
        honoRateLimit({
          policies: gcra({ limit: 1, periodMs: 60_000 }),
          key: (c) => c.req.header('x-user') ?? 'anonymous',
        }),
      );
      app.get('/', (c) => c.text('ok'));
      expect((await app.request('/', { headers: { 'x-user': 'a' } })).status).toBe(200);
      expect((await app.request('/', { headers: { 'x-user': 'b' } })).status).toBe(200);
      expect((await app.request('/', { headers: { 'x-user': 'a' } })).status).toBe(429);
      await warnings.flush();
      expect(warnings.codes()).toEqual([]);
    } finally {
      warnings.stop();
    }
  });
});
