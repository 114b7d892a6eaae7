import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifact, browserAvailable, openPage, type PageSession } from './browser.js';

// The page at a desktop width (1440 px) and a phone's (390 px): its layout asserted as properties (no
// horizontal scrolling, a header of two lines at most, nothing cut or broken inside a word, both sides'
// rows aligned) rather than compared with stored pictures, which would differ with every font and
// Chromium version; the screenshots are kept as artifacts (.artifacts/web/) for a person to look at.
// And each of the page's faults that a newcomer met, fixed (issue #27).
const enabled = browserAvailable();

/** Waits until the page has redrawn after an edit and answered for the instant. */
async function redrawn(page: Page, before: string): Promise<string> {
  await page.waitForFunction((v) => {
    const root = document.getElementById('simulator') as HTMLElement;
    return root.dataset.version !== v && root.dataset.probedVersion === root.dataset.version;
  }, before);
  return page.$eval('#simulator', (el) => (el as HTMLElement).dataset.version as string);
}

const version = (page: Page) => page.$eval('#simulator', (el) => (el as HTMLElement).dataset.version as string);

/** Elements whose content is wider than their box (cut, or scrolled sideways), by selector. */
function overflowing(page: Page, selector: string): Promise<string[]> {
  return page.$$eval(selector, (elements) =>
    elements
      .filter((el) => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'auto')
      .map((el) => `${el.tagName.toLowerCase()}.${el.className}: ${el.scrollWidth} > ${el.clientWidth}`),
  );
}

describe.skipIf(!enabled)('the page at 1440 px and at 390 px', () => {
  let session: PageSession;
  let page: Page;

  beforeAll(async () => {
    session = await openPage('domains: [{ domain: api, descriptors: [] }]');
    page = session.page;
  });
  afterAll(() => session?.close());

  for (const width of [1440, 390]) {
    it(`lays out at ${width} px: no sideways scrolling, a short header, no word broken, every value on a line`, async () => {
      await page.setViewportSize({ width, height: 900 });
      await page.goto(session.url);
      await page.waitForSelector('#simulator[data-probed-version="1"]');
      await page.screenshot({ path: artifact(`page-${width}.png`), fullPage: true });
      const layout = await page.evaluate(() => {
        const header = document.querySelector('header.top') as HTMLElement;
        // 'normal' line height: measure one line of the tagline's font instead.
        const probe = document.createElement('span');
        probe.textContent = 'x';
        (header.querySelector('.tagline') as HTMLElement).append(probe);
        const lineHeight = probe.getBoundingClientRect().height;
        probe.remove();
        const tagline = (header.querySelector('.tagline') as HTMLElement).getBoundingClientRect();
        const sides = [...document.querySelectorAll('.side')].map((el) => el.getBoundingClientRect());
        const charts = [...document.querySelectorAll('[data-chart=counts]')].map((el) => el.getBoundingClientRect());
        const breaking = [...document.querySelectorAll('pre, td, th, code')]
          .map((el) => getComputedStyle(el))
          .filter((style) => style.wordBreak === 'break-all').length;
        return {
          scrollWidth: document.documentElement.scrollWidth,
          headerHeight: header.getBoundingClientRect().height,
          taglineLines: Math.round(tagline.height / lineHeight),
          sides: sides.map((r) => ({ left: Math.round(r.left), top: Math.round(r.top) })),
          chartTops: charts.map((r) => Math.round(r.top)),
          breaking,
        };
      });
      // Nothing wider than the window.
      expect(layout.scrollWidth).toBeLessThanOrEqual(width);
      // The header: one line on a desktop; name and tabs, then the tagline in at most 3 lines, on a phone
      // (it was squeezed into a six-line column beside the name).
      expect(layout.taglineLines).toBeLessThanOrEqual(width >= 1000 ? 1 : 3);
      expect(layout.headerHeight).toBeLessThan(width >= 1000 ? 60 : 120);
      // No text is broken anywhere inside a word on purpose, and a readout's value keeps its unit.
      expect(layout.breaking).toBe(0);
      // A readout's value on one line: its cell no taller than its name's shortest neighbour.
      const values = await page.$$eval(
        'table.readout td',
        (cells) => cells.filter((td) => getComputedStyle(td).whiteSpace !== 'nowrap').length,
      );
      expect(values).toBe(0);
      expect(await overflowing(page, '.side, .probe, table.readout, .toolbar')).toEqual([]);
      if (width >= 1000) {
        // Side by side, their charts at the same height.
        expect(layout.sides[0]?.top).toBe(layout.sides[1]?.top);
        expect(layout.sides[0]?.left).toBeLessThan(layout.sides[1]?.left as number);
        expect(layout.chartTops[0]).toBe(layout.chartTops[1]);
      } else {
        // One above the other.
        expect(layout.sides[0]?.left).toBe(layout.sides[1]?.left);
        expect(layout.sides[0]?.top).toBeLessThan(layout.sides[1]?.top as number);
      }
      expect(session.errors).toEqual([]);
    });
  }

  it('an invalid policy: its error on its side only, the valid side shows no empty error bar', async () => {
    await page.setViewportSize({ width: 1440, height: 900 });
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    const before = await version(page);
    await page.fill('[data-side=b] input[name=limit]', '-1');
    await redrawn(page, before);
    const errors = await page.$$eval('.side .error', (els) =>
      els.map((el) => ({ text: el.textContent, background: getComputedStyle(el).backgroundColor })),
    );
    expect(errors[1]?.text).toContain('policy.limit must be');
    expect(errors[0]).toEqual({ text: '', background: 'rgba(0, 0, 0, 0)' });
    expect(await page.textContent('[data-probe=a] h3')).toContain('a request at 5 s receives');
    expect(await page.textContent('[data-probe=b] [data-no-answer]')).toContain('policy is not valid');
    await page.screenshot({ path: artifact('page-invalid-policy.png'), fullPage: true });
  });

  it('an empty field says it is empty, not "got undefined"', async () => {
    const before = await version(page);
    await page.fill('[data-side=b] input[name=limit]', '');
    await redrawn(page, before);
    const text = await page.textContent('[data-side=b] .error');
    expect(text).toBe('policy.limit is empty: enter a number');
  });

  it('invalid traffic: the probes say the traffic is at fault, and the instant stays where it was', async () => {
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    const instant = await page.inputValue('input[name=instant]');
    const max = await page.getAttribute('input[name=instant]', 'max');
    const before = await version(page);
    await page.fill('[data-traffic] input[name=durationS]', '');
    await redrawn(page, before);
    for (const side of ['a', 'b']) {
      const said = await page.textContent(`[data-probe=${side}] [data-no-answer]`);
      expect(said).toContain('traffic is not valid: traffic: duration must be');
      expect(said).not.toContain('policy');
    }
    expect(await page.inputValue('input[name=instant]')).toBe(instant);
    expect(await page.getAttribute('input[name=instant]', 'max')).toBe(max);
    expect(await page.textContent('[data-instant]')).toBe(`${instant} s`);
  });

  it("a preset's title is whole, and goes once the comparison is edited", async () => {
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    const preset = page.locator('select[name=preset]');
    let v = await version(page);
    await preset.selectOption('4');
    v = await redrawn(page, v);
    const fits = await preset.evaluate((select) => {
      const option = (select as HTMLSelectElement).selectedOptions[0] as HTMLOptionElement;
      const probe = document.createElement('span');
      probe.style.font = getComputedStyle(select).font;
      probe.textContent = option.text;
      document.body.append(probe);
      const width = probe.getBoundingClientRect().width;
      probe.remove();
      return width < select.clientWidth;
    });
    expect(fits).toBe(true);
    await page.fill('[data-side=a] input[name=capacity]', '12');
    await redrawn(page, v);
    expect(await preset.inputValue()).toBe('');
  });

  it('the queue-vs-meter preset charts the delays of the queue', async () => {
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    const v = await version(page);
    await page.selectOption('select[name=preset]', '4');
    await redrawn(page, v);
    const delays = (await page.$eval(
      '[data-side=a] [data-chart=delays]',
      (el) => (el as HTMLElement & { plotted: unknown }).plotted,
    )) as { level: number[]; ceiling: number };
    // Admitted requests of a burst wait longer and longer, up to the queue's longest wait (1 s).
    expect(Math.max(...delays.level)).toBeGreaterThan(500);
    expect(Math.max(...delays.level)).toBeLessThanOrEqual(delays.ceiling);
    expect(new Set(delays.level).size).toBeGreaterThan(5);
    // The meter admits without waiting: no delay chart on its side.
    expect(await page.isHidden('[data-side=b] [data-chart=delays]')).toBe(true);
    await page.screenshot({ path: artifact('page-queue-vs-meter.png'), fullPage: true });
  });

  it('GCRA states each value once, and the leaky bucket is read in its own terms', async () => {
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    let v = await version(page);
    await page.selectOption('select[name=preset]', '1'); // GCRA vs a token bucket
    v = await redrawn(page, v);
    const gcra = await page.$$eval('[data-probe=a] table.readout tr', (rows) =>
      rows.map((row) => [row.querySelector('th')?.textContent, row.querySelector('td')?.textContent]),
    );
    const values = gcra.map(([, value]) => value);
    expect(gcra.length).toBeGreaterThan(2);
    expect(new Set(gcra.map(([name]) => name)).size).toBe(gcra.length);
    expect(values.filter((value, i) => value === values[i - 1]).length).toBe(0);
    await page.selectOption('select[name=preset]', '4'); // leaky buckets
    await redrawn(page, v);
    const leaky = await page.$$eval('[data-probe=b] table.readout th', (cells) => cells.map((c) => c.textContent));
    expect(leaky).toEqual(expect.arrayContaining(['bucket level', 'capacity', 'leaks', 'empty in']));
    expect(leaky.join(' ')).not.toMatch(/TAT|emission|τ/);
  });

  it('keeps a comparison in a short URL that opens the same view', async () => {
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    const v = await version(page);
    await page.selectOption('select[name=preset]', '2');
    await redrawn(page, v);
    const link = page.url();
    expect(link.length).toBeLessThan(400);
    expect(link).not.toContain('%7B');
    const other = await session.browser.newPage({ viewport: { width: 1440, height: 900 } });
    try {
      await other.goto(link);
      await other.waitForSelector('#simulator[data-probed-version="1"]');
      for (const side of ['a', 'b']) {
        const read = (p: Page) =>
          p.$eval(`[data-side=${side}]`, (el) => ({ ...(el as HTMLElement).dataset, version: '' }));
        expect(await read(other)).toEqual(await read(page));
      }
    } finally {
      await other.close();
    }
  });

  it('the live view says its time in 24 hours, as its axes do', async () => {
    await page.goto(`${session.url}#live`);
    await page.waitForFunction(() => /updated/.test(document.querySelector('.live-status')?.textContent ?? ''));
    const status = (await page.textContent('.live-status')) as string;
    expect(status).toMatch(/updated ([01]\d|2[0-3]):[0-5]\d:[0-5]\d,/);
    expect(status).not.toMatch(/AM|PM/);
  });
});
