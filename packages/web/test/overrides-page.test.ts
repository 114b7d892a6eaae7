import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Service } from '../../service/src/service.js';
import { artifact, browserAvailable, openPage, type PageSession } from './browser.js';

const enabled = browserAvailable();
const TOKEN = 'page-admin-token-0123456789abcdef';
/** A key as an attacker would choose it: markup that runs script if the page ever parsed it. */
const HOSTILE = 'api|tenant=<img src=x onerror="window.__pwned=1">';

const CONFIG = `
prefix: overrides-page
domains:
  - domain: api
    descriptors:
      - key: tenant
        policies:
          - { algorithm: fixed-window, name: per-tenant, limit: 3, windowMs: 3600000 }
`;

describe.skipIf(!enabled)('the overrides panel of the live view, in Chromium', () => {
  let session: PageSession;
  let service: Service;
  let page: Page;
  /** Every admin call the page made: method, path, Authorization header. */
  const adminCalls: { method: string; url: string; authorization: string | undefined }[] = [];

  beforeAll(async () => {
    session = await openPage(CONFIG, { admin: { token: TOKEN, refreshMs: 0 } });
    ({ service, page } = session);
    page.on('request', (request) => {
      if (new URL(request.url()).pathname.startsWith('/v1/admin/')) {
        adminCalls.push({
          method: request.method(),
          url: request.url(),
          authorization: request.headers().authorization,
        });
      }
    });
  });

  afterAll(() => session?.close());

  /** The admin API, asked directly. */
  async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
    const response = await fetch(`http://127.0.0.1:${service.httpPort}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: await response.json() };
  }

  const state = () => page.$eval('[data-panel=overrides]', (el) => (el as HTMLElement).dataset.overridesState);
  const message = () => page.textContent('[data-overrides-message]');
  const listed = () =>
    page.$$eval('[data-table=overrides] tr[data-override-id]', (rows) =>
      rows.map((r) => [(r as HTMLElement).dataset.overrideScope, (r as HTMLElement).dataset.overrideId]),
    );

  async function useToken(token: string): Promise<void> {
    await page.fill('input[name=admin-token]', token);
    await page.click('button[name=token-use]');
    await page.waitForFunction(
      () => {
        const s = (document.querySelector('[data-panel=overrides]') as HTMLElement | null)?.dataset.overridesState;
        return s === 'listed' || s === 'failed';
      },
      undefined,
      { timeout: 10_000 },
    );
  }

  it('without a token says the token is needed and makes no admin call', async () => {
    await page.goto(`${session.url}#live`);
    await page.waitForSelector('#live[data-polls]');
    // Two more polls of the live view: the panel has had time to call, had it meant to.
    const polls = Number(await page.$eval('#live', (el) => (el as HTMLElement).dataset.polls));
    await page.waitForFunction(
      (n) => Number((document.querySelector('#live') as HTMLElement).dataset.polls) >= n + 2,
      polls,
      {
        timeout: 10_000,
      },
    );
    expect(await state()).toBe('no-token');
    expect(await message()).toMatch(/admin token/);
    expect(adminCalls).toEqual([]);
    // Setting an override without a token asks nothing either.
    await page.fill('input[name=override-id]', 'api|tenant=acme');
    await page.fill(
      'textarea[name=override-policies]',
      '{ "algorithm": "fixed-window", "limit": 5, "windowMs": 60000 }',
    );
    await page.click('button[name=override-set]');
    expect(await state()).toBe('no-token');
    expect(adminCalls).toEqual([]);
  });

  it('with a wrong token shows the 401 and lists nothing', async () => {
    await useToken('wrong-token-0123456789abcdef');
    expect(await state()).toBe('failed');
    expect(await message()).toMatch(/^401 Unauthorized/);
    expect(await message()).toMatch(/Check the admin token/);
    expect(await listed()).toEqual([]);
    expect(adminCalls.at(-1)?.authorization).toBe('Bearer wrong-token-0123456789abcdef');
  });

  it('with the right token sets an override through the form, lists it, deletes it', async () => {
    await useToken(TOKEN);
    expect(await state()).toBe('listed');
    expect(await message()).toBe('No overrides are stored.');
    // The token never reaches the address bar.
    expect(page.url()).not.toContain(TOKEN);

    await page.selectOption('select[name=override-scope]', 'tenant');
    await page.fill('input[name=override-id]', 'acme');
    await page.fill(
      'textarea[name=override-policies]',
      '[{ "algorithm": "fixed-window", "name": "per-tenant", "limit": 50, "windowMs": 3600000 }]',
    );
    await page.fill('input[name=override-expires-minutes]', '90');
    await page.fill('input[name=override-note]', 'ticket 42');
    const before = Date.now();
    await page.click('button[name=override-set]');
    await page.waitForSelector('[data-table=overrides] tr[data-override-scope=tenant][data-override-id=acme]');
    expect(await message()).toBe('Set the tenant override.');
    const row = await page.textContent('[data-table=overrides] tr[data-override-id=acme]');
    expect(row).toContain('per-tenant: fixed-window');
    expect(row).toContain('limit=50');
    expect(row).toContain('ticket 42');

    // Stored, as the admin API says: the policy, the note and an expiry 90 minutes ahead.
    const stored = await admin('GET', '/v1/admin/overrides/tenant/acme');
    expect(stored.status).toBe(200);
    const body = stored.body as { policies: { limit: number; name: string }[]; note: string; expiresAt: number };
    expect(body.policies.map((p) => [p.name, p.limit])).toEqual([['per-tenant', 50]]);
    expect(body.note).toBe('ticket 42');
    expect(body.expiresAt).toBeGreaterThanOrEqual(before + 90 * 60_000);
    expect(body.expiresAt).toBeLessThanOrEqual(Date.now() + 90 * 60_000);
    // And it acts: the tenant is admitted past the base limit of 3.
    for (let i = 0; i < 5; i++) {
      const response = await fetch(`http://127.0.0.1:${service.httpPort}/v1/decide`, {
        method: 'POST',
        body: JSON.stringify({ domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }] }),
      });
      expect(((await response.json()) as { allowed: boolean }).allowed).toBe(true);
    }
    // Every call the page made carried the token as a bearer header, none in its URL.
    for (const call of adminCalls.filter((c) => c.authorization === `Bearer ${TOKEN}`)) {
      expect(call.url).not.toContain(TOKEN);
    }
    await page.screenshot({ path: artifact('live-overrides.png'), fullPage: true });

    await page.click('[data-table=overrides] tr[data-override-id=acme] button[name=override-delete]');
    await page.waitForFunction(
      () => document.querySelector('[data-table=overrides] tr[data-override-id=acme]') === null,
      undefined,
      { timeout: 10_000 },
    );
    expect(await message()).toBe('Deleted the tenant override.');
    expect((await admin('GET', '/v1/admin/overrides/tenant/acme')).status).toBe(404);
    expect(adminCalls.some((c) => c.method === 'DELETE' && c.url.endsWith('/v1/admin/overrides/tenant/acme'))).toBe(
      true,
    );
  });

  it("shows the API's validation errors as text, and stores nothing", async () => {
    await page.selectOption('select[name=override-scope]', 'key');
    await page.fill('input[name=override-id]', 'api|tenant=acme');
    await page.fill(
      'textarea[name=override-policies]',
      '{ "algorithm": "fixed-window", "limit": -1, "windowMs": 1000 }',
    );
    await page.fill('input[name=override-expires-minutes]', '');
    await page.click('button[name=override-set]');
    await page.waitForFunction(() => document.querySelector('[data-overrides-message]')?.className === 'error');
    expect(await message()).toMatch(/^400 Bad Request: .*limit/);
    // Text that is not JSON is refused in the page, before any call.
    const calls = adminCalls.length;
    await page.fill('textarea[name=override-policies]', '{ limit: 5');
    await page.click('button[name=override-set]');
    expect(await message()).toMatch(/^The policies are not JSON/);
    expect(adminCalls.length).toBe(calls);
    const list = (await admin('GET', '/v1/admin/overrides')).body as { overrides: unknown[] };
    expect(list.overrides).toEqual([]);
  });

  it('shows a key holding markup as text: nothing of it runs or becomes an element', async () => {
    await admin('PUT', `/v1/admin/overrides/key/${encodeURIComponent(HOSTILE)}`, {
      policies: [{ algorithm: 'gcra', limit: 100, periodMs: 1000 }],
      note: '<b>bold</b><script>window.__pwned=2</script>',
    });
    await useToken(TOKEN);
    expect(await listed()).toEqual([['key', HOSTILE]]);
    const cells = await page.$eval('[data-table=overrides] tr[data-override-id]', (row) => ({
      text: row.textContent,
      images: row.querySelectorAll('img').length,
      bolds: row.querySelectorAll('b, script').length,
    }));
    expect(cells.text).toContain(HOSTILE);
    expect(cells.text).toContain('<b>bold</b><script>window.__pwned=2</script>');
    expect(cells.images).toBe(0);
    expect(cells.bolds).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();

    // Deleted through the page, the hostile id goes to the API intact (URL-encoded, decoded there).
    await page.click('[data-table=overrides] tr[data-override-id] button[name=override-delete]');
    await page.waitForFunction(() => document.querySelector('[data-table=overrides] tr[data-override-id]') === null);
    expect((await admin('GET', `/v1/admin/overrides/key/${encodeURIComponent(HOSTILE)}`)).status).toBe(404);
    expect(session.errors).toEqual([]);
  });

  it('pages the list as the API pages it', async () => {
    // One more than a page of the panel: 21 overrides, listed 20 then 1.
    for (let i = 0; i < 21; i++) {
      const stored = await admin('PUT', `/v1/admin/overrides/plan/plan-${String(i).padStart(2, '0')}`, {
        policies: { algorithm: 'fixed-window', limit: 10 + i, windowMs: 60_000 },
      });
      expect(stored.status).toBe(200);
    }
    await useToken(TOKEN);
    const first = await listed();
    expect(first).toHaveLength(20);
    expect(await page.textContent('[data-overrides-page]')).toMatch(/Page 1: 20 overrides, more on the next page/);
    expect(await page.$eval('button[name=overrides-previous]', (b) => (b as HTMLButtonElement).disabled)).toBe(true);
    await page.click('button[name=overrides-next]');
    await page.waitForFunction(() => /Page 2/.test(document.querySelector('[data-overrides-page]')?.textContent ?? ''));
    const second = await listed();
    expect(second).toEqual([['plan', 'plan-20']]);
    expect(await page.$eval('button[name=overrides-next]', (b) => (b as HTMLButtonElement).disabled)).toBe(true);
    expect(adminCalls.at(-1)?.url).toMatch(/[?&]cursor=/);
    await page.click('button[name=overrides-previous]');
    await page.waitForFunction(() => /Page 1/.test(document.querySelector('[data-overrides-page]')?.textContent ?? ''));
    expect(await listed()).toEqual(first);
    expect(new Set([...first, ...second].map(([, id]) => id)).size).toBe(21);
    // On a 390 px phone the panel, its table and its form fit: no sideways scrolling.
    await page.setViewportSize({ width: 390, height: 844 });
    // The live charts redraw at the new width on their next frame (on a loaded machine, seconds later).
    await page
      .waitForFunction(() => document.documentElement.scrollWidth <= 390, undefined, { timeout: 20_000 })
      .catch(() => {});
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    await page.screenshot({ path: artifact('live-overrides-390.png'), fullPage: true });
    expect(wide).toBeLessThanOrEqual(390);
    expect(session.errors).toEqual([]);
  });
});
