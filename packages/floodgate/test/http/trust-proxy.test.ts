import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gcra } from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';
import { type App, type Harness, harnesses, type NeutralOptions, type Running } from './harness.js';

// A client behind two proxies of yours (a CDN that appends the client's address, then a load balancer
// that appends the CDN's) must not pick its own key with a stray `"` in the forwarded header: the
// entries the proxies appended keep their place at the right end of the chain.
const CDN = '198.51.100.9';
const CLIENT = '5.6.7.8';

function app(): App {
  const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
  const xff: NeutralOptions = {
    policies: gcra({ limit: 1, periodMs: 60_000, name: 'xff' }),
    clock,
    trustProxy: { hops: 2 },
  };
  const forwarded: NeutralOptions = {
    policies: gcra({ limit: 1, periodMs: 60_000, name: 'fwd' }),
    clock,
    trustProxy: { hops: 2, header: 'forwarded' },
  };
  return {
    global: xff,
    routes: [
      { method: 'GET', path: '/xff', limit: xff },
      { method: 'GET', path: '/fwd', limit: forwarded },
    ],
  };
}

describe.each(harnesses.map((h) => [h.name, h] as [string, Harness]))('%s', (_name, harness) => {
  let server: Running;
  beforeAll(async () => {
    server = await harness.start(app(), '127.0.0.1');
  });
  afterAll(async () => {
    await server?.close();
  });

  const status = async (path: string, header: string, value: string) =>
    (await fetch(`${server.url}${path}`, { headers: { [header]: value } })).status;

  it('X-Forwarded-For, hops 2: an unterminated quote does not give a fresh key', async () => {
    const tail = `${CLIENT}, ${CDN}`;
    expect(await status('/xff', 'x-forwarded-for', tail)).toBe(200);
    expect(await status('/xff', 'x-forwarded-for', tail)).toBe(429);
    expect(await status('/xff', 'x-forwarded-for', `1.1.1.1, ${tail}`)).toBe(429);
    for (let i = 1; i <= 3; i++) {
      expect(await status('/xff', 'x-forwarded-for', `9.9.9.${i}, ", ${tail}`)).toBe(429);
      expect(await status('/xff', 'x-forwarded-for', `9.9.9.${i}, "x, ${tail}`)).toBe(429);
    }
  });

  it('Forwarded, hops 2: an unterminated quoted string does not give a fresh key', async () => {
    const tail = `for=${CLIENT}, for=${CDN}`;
    expect(await status('/fwd', 'forwarded', tail)).toBe(200);
    expect(await status('/fwd', 'forwarded', tail)).toBe(429);
    expect(await status('/fwd', 'forwarded', `for=1.1.1.1, ${tail}`)).toBe(429);
    for (let i = 1; i <= 3; i++) {
      expect(await status('/fwd', 'forwarded', `for=9.9.9.${i}, for="x, ${tail}`)).toBe(429);
      expect(await status('/fwd', 'forwarded', `for="9.9.9.${i}, ${tail}`)).toBe(429);
    }
  });
});
