import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Service } from '../../service/src/service.js';
import { artifact, browserAvailable, openPage, type PageSession } from './browser.js';

const enabled = browserAvailable();

const CONFIG = `
prefix: live-test
domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - { algorithm: gcra, name: per-ip, limit: 20, periodMs: 1000, burst: 5 }
      - key: tenant
        policies:
          - { algorithm: fixed-window, name: per-tenant, limit: 2, windowMs: 3600000 }
      - key: path
        value: /login
        descriptors:
          - key: remote_address
            policies:
              - { algorithm: sliding-log, name: login, limit: 3, windowMs: 60000, countDenied: true }
`;

interface Tally {
  allowed: number;
  denied: number;
}

describe.skipIf(!enabled)('the live view of a running service, in Chromium', () => {
  let session: PageSession;
  let service: Service;
  let page: Page;

  beforeAll(async () => {
    session = await openPage(CONFIG);
    ({ service, page } = session);
  });

  afterAll(() => session?.close());

  /** Sends one decision; counts the outcome as the service answered it. */
  async function decide(ip: string, tally: Tally, path?: string): Promise<void> {
    const address = { key: 'remote_address', value: ip };
    const entries = path === undefined ? [address] : [{ key: 'path', value: path }, address];
    const response = await fetch(`http://127.0.0.1:${service.httpPort}/v1/decide`, {
      method: 'POST',
      body: JSON.stringify({ domain: 'api', descriptors: [{ entries }] }),
    });
    const body = (await response.json()) as { descriptors: { allowed: boolean }[] };
    if (body.descriptors[0]?.allowed) tally.allowed++;
    else tally.denied++;
  }

  it('shows the traffic the test sends: rates per policy, the most denied keys, the store', async () => {
    await page.goto(`${session.url}#live`);
    await page.waitForSelector('#live[data-polls]');

    // Three seconds of traffic, bounded: an attacker far over its limit, a client within it, and a
    // login guesser. Each answer is counted here, to compare with what the page shows.
    const attacker: Tally = { allowed: 0, denied: 0 };
    const client: Tally = { allowed: 0, denied: 0 };
    const login: Tally = { allowed: 0, denied: 0 };
    // Sixty rounds, however long a busy machine takes for them (a deadline made it fewer, and the
    // attacker too polite to be denied much, at load 20).
    const started = Date.now();
    for (let round = 0; round < 60; round++) {
      const batch: Promise<void>[] = [];
      for (let i = 0; i < 6; i++) batch.push(decide('203.0.113.66', attacker));
      if (round % 3 === 0) batch.push(decide('192.0.2.10', client));
      if (round % 5 === 0) batch.push(decide('198.51.100.23', login, '/login'));
      await Promise.all(batch);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const elapsedS = (Date.now() - started) / 1000;
    expect(attacker.denied).toBeGreaterThan(50);
    expect(client.denied).toBe(0);
    expect(login.denied).toBeGreaterThan(0);
    const perIp = { allowed: attacker.allowed + client.allowed, denied: attacker.denied + client.denied };

    // The policy table reaches the totals the service answered (the page polls every second).
    await page.waitForFunction(
      ({ allowed, denied }) => {
        const row = document.querySelector('[data-table=policies] tr[data-policy="api / remote_address / per-ip"]');
        return (
          row instanceof HTMLElement &&
          row.dataset.allowedTotal === String(allowed) &&
          row.dataset.deniedTotal === String(denied)
        );
      },
      perIp,
      { timeout: 10_000 },
    );
    const loginRow = await page.$eval('[data-table=policies] tr[data-policy^="api / path=/login"]', (el) => ({
      allowed: (el as HTMLElement).dataset.allowedTotal,
      denied: (el as HTMLElement).dataset.deniedTotal,
    }));
    expect(loginRow).toEqual({ allowed: String(login.allowed), denied: String(login.denied) });

    // The attacker tops the most denied keys with exactly its denials (the sketch has room: no error).
    const keys = await page.$$eval('[data-table=denied-keys] tr[data-denied-key]', (rows) =>
      rows.map((r) => ({ key: (r as HTMLElement).dataset.deniedKey, count: Number((r as HTMLElement).dataset.count) })),
    );
    expect(keys[0]?.key).toBe('api|remote_address=203.0.113.66');
    expect(keys.map((k) => k.key)).toContain('api|path=/login|remote_address=198.51.100.23');
    expect(keys.map((k) => k.key)).not.toContain('api|remote_address=192.0.2.10');
    expect(keys[0]?.count).toBe(attacker.denied);
    expect(keys.find((k) => k.key?.includes('198.51.100.23'))?.count).toBe(login.denied);

    // The rate chart plotted denials per second while the traffic ran.
    const plotted = (await page.$eval(
      '[data-chart=rates]',
      (el) => (el as HTMLElement & { plotted: unknown }).plotted,
    )) as number[][];
    const deniedPerSecond = plotted[2] as number[];
    // At the rate the attacker was denied (more than 10 a second on an idle machine; whatever the
    // machine managed under load), half of it at least in its busiest second.
    expect(Math.max(...deniedPerSecond)).toBeGreaterThan(Math.min(10, attacker.denied / elapsedS / 2));
    expect(Math.max(...(plotted[1] as number[]))).toBeGreaterThan(0);

    // The store panel: the memory store, reachable, breaker closed, latency measured.
    expect(await page.$eval('[data-health]', (el) => (el as HTMLElement).dataset.up)).toBe('true');
    expect(await page.textContent('[data-health]')).toMatch(/closed/);
    await page.screenshot({ path: artifact('live.png'), fullPage: true });
    expect(session.errors).toEqual([]);
  });

  it('lists the most denied tenants, each with its denials', async () => {
    const tally: Tally = { allowed: 0, denied: 0 };
    const ask = async (tenant: string) => {
      const response = await fetch(`http://127.0.0.1:${service.httpPort}/v1/decide`, {
        method: 'POST',
        body: JSON.stringify({ domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: tenant }] }] }),
      });
      const body = (await response.json()) as { descriptors: { allowed: boolean }[] };
      if (body.descriptors[0]?.allowed) tally.allowed++;
      else tally.denied++;
    };
    for (let i = 0; i < 6; i++) await ask('acme');
    for (let i = 0; i < 3; i++) await ask('globex');
    expect(tally).toEqual({ allowed: 4, denied: 5 });
    await page.waitForFunction(
      () => document.querySelector('[data-table=denied-tenants] tr[data-denied-tenant="globex"]') !== null,
      undefined,
      { timeout: 10_000 },
    );
    const tenants = await page.$$eval('[data-table=denied-tenants] tr[data-denied-tenant]', (rows) =>
      rows.map((r) => [(r as HTMLElement).dataset.deniedTenant, Number((r as HTMLElement).dataset.count)]),
    );
    expect(tenants).toEqual([
      ['acme', 4],
      ['globex', 1],
    ]);
    await page.screenshot({ path: artifact('live-tenants.png'), fullPage: true });
  });
});

describe.skipIf(!enabled)('the live view counts each decision once, in Chromium', () => {
  let session: PageSession;

  beforeAll(async () => {
    // One rule, three policies: the hourly window admits a third of the traffic below, the others all of it.
    session = await openPage(`
prefix: live-once
domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - { algorithm: fixed-window, name: hourly, limit: 10, windowMs: 3600000 }
          - { algorithm: gcra, name: per-second, limit: 1000, periodMs: 1000 }
          - { algorithm: sliding-window, name: per-minute, limit: 1000, windowMs: 60000 }
`);
  });

  afterAll(() => session?.close());

  it("plots a third admitted as a third on the 'all decisions' line, and fills every legend", async () => {
    const { page, service } = session;
    await page.goto(`${session.url}#live`);
    await page.waitForSelector('#live[data-polls]');
    expect(await page.$eval('select[name=live-policy] option[value=""]', (o) => o.textContent)).toBe('all decisions');
    const sent: Tally = { allowed: 0, denied: 0 };
    for (let i = 0; i < 30; i++) {
      const response = await fetch(`http://127.0.0.1:${service.httpPort}/v1/decide`, {
        method: 'POST',
        body: JSON.stringify({
          domain: 'api',
          descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.8' }] }],
        }),
      });
      const body = (await response.json()) as { allowed: boolean };
      if (body.allowed) sent.allowed++;
      else sent.denied++;
    }
    expect(sent).toEqual({ allowed: 10, denied: 20 });
    // The totals under the chart: each decision once (summing the policies would say 30 admitted).
    await page.waitForFunction(
      () => {
        const totals = document.querySelector('[data-rates-totals]') as HTMLElement | null;
        return totals?.dataset.allowedTotal === '10' && totals.dataset.deniedTotal === '20';
      },
      undefined,
      { timeout: 10_000 },
    );
    // The line: at most 10 admitted in any second (the three policies' sum would reach 15 or 30). The
    // totals count from the service's start, the line per completed second: it may come a poll later.
    await page.waitForFunction(
      () => {
        const el = document.querySelector('[data-chart=rates]') as (HTMLElement & { plotted?: number[][] }) | null;
        return Math.max(0, ...(el?.plotted?.[1] ?? [])) > 0;
      },
      undefined,
      { timeout: 10_000 },
    );
    const plotted = (await page.$eval(
      '[data-chart=rates]',
      (el) => (el as HTMLElement & { plotted: unknown }).plotted,
    )) as number[][];
    const allowed = plotted[1] as number[];
    expect(Math.max(...allowed)).toBeGreaterThan(0);
    expect(Math.max(...allowed)).toBeLessThan(15);
    // One policy's line is that policy's own count.
    const policies = await page.$$eval('select[name=live-policy] option', (options) =>
      options.map((o) => (o as HTMLOptionElement).value),
    );
    expect(policies).toContain('api / remote_address / per-second');
    await page.selectOption('select[name=live-policy]', 'api / remote_address / per-second');
    expect(await page.$eval('[data-rates-totals]', (el) => (el as HTMLElement).dataset.allowedTotal)).toBe('10');
    expect(await page.$eval('[data-rates-totals]', (el) => (el as HTMLElement).dataset.deniedTotal)).toBe('0');

    // Off the cursor every legend shows the latest second, never `--`.
    await page.mouse.move(0, 0);
    const values = await page.$$eval('#live .u-legend .u-value', (cells) => cells.map((c) => c.textContent));
    expect(values.length).toBeGreaterThanOrEqual(8);
    expect(values.filter((v) => v === '--' || v === '')).toEqual([]);
    expect(values[0]).toMatch(/\(latest\)$/);
    await page.screenshot({ path: artifact('live-decisions.png'), fullPage: true });
    expect(session.errors).toEqual([]);
  });
});

describe('floodgate serve (the built command) serves the page at /', () => {
  const CLI = fileURLToPath(new URL('../../service/dist/cli.js', import.meta.url));
  const PAGE = fileURLToPath(new URL('../../service/dist/web/index.html', import.meta.url));
  let child: ChildProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-web-cli-'));
  afterAll(() => {
    if (child?.exitCode === null) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('without any option, from dist/web next to the command', async () => {
    if (!existsSync(CLI) || !existsSync(PAGE))
      throw new Error('the service and the page are not built: run `npm run build` first');
    const config = join(dir, 'floodgate.yaml');
    writeFileSync(config, CONFIG);
    child = spawn(process.execPath, [CLI, 'serve', '--config', config, '--port', '0', '--grpc-port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const port = await new Promise<number>((resolve, reject) => {
      let out = '';
      child?.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const match = /"http":"127\.0\.0\.1:(\d+)"/.exec(out);
        if (match !== null) resolve(Number(match[1]));
      });
      child?.on('exit', (code) => reject(new Error(`floodgate exited with ${code}`)));
    });
    const response = await fetch(`http://127.0.0.1:${port}/`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/text\/html/);
    const html = await response.text();
    expect(html).toContain('<title>floodgate</title>');
    const script = /src="\.\/(assets\/[^"]+\.js)"/.exec(html)?.[1];
    expect(script).toBeDefined();
    const asset = await fetch(`http://127.0.0.1:${port}/${script}`);
    expect(asset.status).toBe(200);
    expect(asset.headers.get('content-type')).toMatch(/javascript/);
    // The API keeps its paths.
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    child.kill('SIGTERM');
    await new Promise((resolve) => child?.once('exit', resolve));
  });
});
