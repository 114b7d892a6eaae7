import { definePolicy, type PolicyInput } from 'floodgate';
import { headerWriter } from 'floodgate/http';
import { compilePolicy, type Decision, decide, emptyEvaluation, type State, toDecision } from 'floodgate/model';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIM_START_MS } from '../src/sim/simulate.js';
import { arrivals, type Traffic } from '../src/sim/traffic.js';
import { artifact, browserAvailable, openPage, type PageSession } from './browser.js';

const START_US = SIM_START_MS * 1000;
const enabled = browserAvailable();

/** The model alone over the traffic: each call's decision and the state it leaves. */
function modelRun(input: PolicyInput, traffic: Traffic) {
  const c = compilePolicy(definePolicy(input));
  let state: State | undefined;
  const times = arrivals(traffic, START_US);
  const calls = times.map((t) => {
    const evaluations = [emptyEvaluation()];
    const allowed = decide([c], [state], START_US + t, traffic.cost ?? 1, { commit: true }, evaluations);
    const next = evaluations[0]?.next;
    if (next !== undefined) state = [...next];
    return { atUs: t, decision: toDecision([c], evaluations, allowed), state };
  });
  return { c, calls };
}

/** The model's decision for one more request at `atUs` (after the traffic up to it). */
function modelProbe(input: PolicyInput, traffic: Traffic, atUs: number): Decision {
  const { c, calls } = modelRun(input, traffic);
  const state = calls.filter((call) => call.atUs <= atUs).at(-1)?.state;
  const evaluations = [emptyEvaluation()];
  const allowed = decide([c], [state], START_US + atUs, traffic.cost ?? 1, { commit: false }, evaluations);
  return toDecision([c], evaluations, allowed);
}

interface Plotted {
  binS: number;
  startS: number[];
  admitted: number[];
  denied: number[];
}
interface PlottedLevel {
  atS: number[];
  level: number[];
  ceiling: number;
}

const plotted = <T>(page: Page, side: 'a' | 'b', chart: 'counts' | 'level'): Promise<T> =>
  page.$eval(
    `[data-side=${side}] [data-chart=${chart}]`,
    (el) => (el as HTMLElement & { plotted: unknown }).plotted,
  ) as Promise<T>;

/** Waits until the page has redrawn after an edit and answered for the instant. */
async function redrawn(page: Page, before: string): Promise<string> {
  await page.waitForFunction((v) => {
    const root = document.getElementById('simulator') as HTMLElement;
    return root.dataset.version !== v && root.dataset.probedVersion === root.dataset.version;
  }, before);
  return page.$eval('#simulator', (el) => (el as HTMLElement).dataset.version as string);
}

/** The model's admitted and denied counts, binned as the page says it bins. */
function expectedBins(input: PolicyInput, traffic: Traffic, binS: number, bins: number) {
  const admitted = new Array<number>(bins).fill(0);
  const denied = new Array<number>(bins).fill(0);
  for (const call of modelRun(input, traffic).calls) {
    const i = Math.min(bins - 1, Math.floor(call.atUs / (binS * 1e6)));
    if (call.decision.allowed) admitted[i] = (admitted[i] as number) + 1;
    else denied[i] = (denied[i] as number) + 1;
  }
  return { admitted, denied };
}

describe.skipIf(!enabled)('the simulator page in Chromium', () => {
  let session: PageSession;
  let page: Page;

  beforeAll(async () => {
    // Served as users get it: by the service, at `/`.
    session = await openPage('domains: [{ domain: api, descriptors: [] }]');
    page = session.page;
    await page.goto(session.url);
    await page.waitForSelector('#simulator[data-probed-version="1"]');
    expect(session.errors).toEqual([]);
  });

  afterAll(() => session?.close());

  const stampede: Traffic = {
    pattern: { kind: 'stampede', size: 10, windowMs: 5000, spreadMs: 200 },
    durationMs: 20_000,
    cost: 1,
  };

  it('loads with the first comparison: what it draws is what the model decides', async () => {
    const fixed: PolicyInput = { algorithm: 'fixed-window', limit: 10, windowMs: 5000, align: 'clock' };
    const sliding: PolicyInput = { algorithm: 'sliding-window', limit: 10, windowMs: 5000 };
    for (const [side, policy] of [
      ['a', fixed],
      ['b', sliding],
    ] as const) {
      const counts = await plotted<Plotted>(page, side, 'counts');
      expect(counts.admitted.length).toBeGreaterThan(10);
      expect({ admitted: counts.admitted, denied: counts.denied }).toEqual(
        expectedBins(policy, stampede, counts.binS, counts.admitted.length),
      );
      const model = modelRun(policy, stampede).calls;
      const admitted = model.filter((c) => c.decision.allowed).length;
      expect(await page.$eval(`[data-side=${side}]`, (el) => (el as HTMLElement).dataset.admitted)).toBe(
        String(admitted),
      );
      expect(await page.textContent(`[data-side=${side}] [data-count=denied]`)).toBe(String(model.length - admitted));
    }
    // The fixed window lets 2 × limit through around each boundary; the sliding window does not.
    const a = Number(await page.$eval('[data-side=a]', (el) => (el as HTMLElement).dataset.admitted));
    const b = Number(await page.$eval('[data-side=b]', (el) => (el as HTMLElement).dataset.admitted));
    expect(a).toBeGreaterThan(b);
    await page.screenshot({ path: artifact('simulator.png'), fullPage: true });
  });

  it('draws every request of the run, to the end of its last bin', async () => {
    for (const side of ['a', 'b'] as const) {
      const selector = `[data-side=${side}] [data-chart=counts]`;
      const counts = await plotted<Plotted>(page, side, 'counts');
      const drawn = await page.$eval(selector, (el) => (el as HTMLElement & { drawn: unknown }).drawn);
      const { xMin, xMax } = drawn as { xMin: number; xMax: number };
      // The stampede at 20 s lands in the last bin: its requests are on the chart.
      const last = counts.admitted.length - 1;
      expect((counts.admitted[last] as number) + (counts.denied[last] as number)).toBeGreaterThan(0);
      expect(xMin).toBeLessThanOrEqual(0);
      expect(xMax).toBeGreaterThanOrEqual((counts.startS[last] as number) + counts.binS);
      expect(xMax).toBeGreaterThanOrEqual(stampede.durationMs / 1000);
    }
  });

  it('shows values in every legend before any hover: the run’s totals, the state at the chosen instant', async () => {
    const legend = (side: 'a' | 'b', chart: 'counts' | 'level') =>
      page.$$eval(`[data-side=${side}] [data-chart=${chart}] .u-legend .u-series`, (rows) =>
        rows.map((r) => [
          (r.querySelector('.u-label') as HTMLElement).textContent,
          (r.querySelector('.u-value') as HTMLElement).textContent,
        ]),
      );
    await page.mouse.move(0, 0);
    for (const side of ['a', 'b'] as const) {
      const counts = await plotted<Plotted>(page, side, 'counts');
      const sum = (list: number[]) => list.reduce((a, b) => a + b, 0);
      expect(await legend(side, 'counts')).toEqual([
        ['t (s)', 'whole run'],
        ['denied', String(sum(counts.denied))],
        ['admitted', String(sum(counts.admitted))],
      ]);
      const level = await legend(side, 'level');
      expect(level).toHaveLength(4);
      for (const [label, value] of level)
        expect({ label, value }).not.toMatchObject({ value: expect.stringMatching(/^--|^$/) });
    }
    // Over a bar: that bin's counts; off the chart again: the totals.
    const over = await page.$('[data-side=a] [data-chart=counts] .u-over');
    const box = await over?.boundingBox();
    if (box === null || box === undefined) throw new Error('the chart has no plotting area');
    await page.mouse.move(box.x + box.width * 0.26, box.y + box.height / 2);
    const hovered = await legend('a', 'counts');
    expect(hovered[0]?.[1]).toMatch(/^\d+(\.\d+)? s$/);
    const counts = await plotted<Plotted>(page, 'a', 'counts');
    const bin = counts.startS.indexOf(Number(String(hovered[0]?.[1]).slice(0, -2)));
    expect(bin).toBeGreaterThanOrEqual(0);
    expect(hovered.slice(1)).toEqual([
      ['denied', String(counts.denied[bin])],
      ['admitted', String(counts.admitted[bin])],
    ]);
    await page.mouse.move(0, 0);
    expect((await legend('a', 'counts'))[0]).toEqual(['t (s)', 'whole run']);
  });

  it('redraws with the model’s values when a parameter changes', async () => {
    let version = await page.$eval('#simulator', (el) => (el as HTMLElement).dataset.version as string);
    await page.fill('[data-side=a] input[name=limit]', '4');
    version = await redrawn(page, version);
    const fixed4: PolicyInput = { algorithm: 'fixed-window', limit: 4, windowMs: 5000 };
    const counts = await plotted<Plotted>(page, 'a', 'counts');
    expect({ admitted: counts.admitted, denied: counts.denied }).toEqual(
      expectedBins(fixed4, stampede, counts.binS, counts.admitted.length),
    );
    // The state chart: the count in the window right after each call, as the model stores it.
    const level = await plotted<PlottedLevel>(page, 'a', 'level');
    expect(level.ceiling).toBe(4);
    for (const call of modelRun(fixed4, stampede).calls) {
      const s = call.atUs / 1e6;
      const after = level.atS.indexOf(s) + 1;
      const state = call.state as State;
      const windowStart = START_US + call.atUs - ((START_US + call.atUs) % 5_000_000);
      expect(level.level[after]).toBe(state[1] === windowStart ? state[2] : 0);
    }

    // Another algorithm: GCRA, whose state is a TAT.
    await page.selectOption('[data-side=a] select[name=algorithm]', 'gcra');
    version = await redrawn(page, version);
    await page.fill('[data-side=a] input[name=limit]', '2');
    version = await redrawn(page, version);
    await page.fill('[data-side=a] input[name=burst]', '5');
    version = await redrawn(page, version);
    const gcra: PolicyInput = { algorithm: 'gcra', limit: 2, periodMs: 1000, burst: 5 };
    const tat = await plotted<PlottedLevel>(page, 'a', 'level');
    expect(tat.ceiling).toBe(2500);
    for (const call of modelRun(gcra, stampede).calls) {
      const after = tat.atS.indexOf(call.atUs / 1e6) + 1;
      const owedMs = ((call.state as State)[1] as number) / 1000 - (START_US + call.atUs) / 1000;
      expect(tat.level[after]).toBeCloseTo(Math.max(0, owedMs), 6);
    }
    const gcraCounts = await plotted<Plotted>(page, 'a', 'counts');
    expect({ admitted: gcraCounts.admitted, denied: gcraCounts.denied }).toEqual(
      expectedBins(gcra, stampede, gcraCounts.binS, gcraCounts.admitted.length),
    );

    // A policy the library refuses: its own error, naming the option.
    await page.fill('[data-side=a] input[name=limit]', '0');
    version = await redrawn(page, version);
    expect(await page.textContent('[data-side=a] .error')).toMatch(/policy\.limit/);
    await page.fill('[data-side=a] input[name=limit]', '2');
    await redrawn(page, version);
  });

  it('shows the headers a client receives at the chosen instant', async () => {
    const gcra: PolicyInput = { algorithm: 'gcra', limit: 2, periodMs: 1000, burst: 5 };
    const sliding: PolicyInput = { algorithm: 'sliding-window', limit: 10, windowMs: 5000 };
    for (const instantS of [5.1, 9.95, 12]) {
      const probed = await page.$eval('#simulator', (el) => (el as HTMLElement).dataset.probed as string);
      await page.$eval(
        'input[name=instant]',
        (el, value) => {
          const input = el as HTMLInputElement;
          input.value = value;
          input.dispatchEvent(new Event('input', { bubbles: true }));
        },
        String(instantS),
      );
      await page.waitForFunction(
        (p) => (document.getElementById('simulator') as HTMLElement).dataset.probed !== p,
        probed,
      );
      for (const [side, policy] of [
        ['a', gcra],
        ['b', sliding],
      ] as const) {
        const decision = modelProbe(policy, stampede, Math.round(instantS * 1e6));
        const headers: string[] = [];
        headerWriter({ format: 'ietf' })(decision, [definePolicy(policy)], SIM_START_MS + instantS * 1000, headers);
        if (!decision.allowed) headers.push('Retry-After', String(Math.ceil(decision.retryAfterMs / 1000)));
        const text = (await page.textContent(`[data-probe=${side}] [data-response]`)) as string;
        const lines = text.split('\n');
        expect(lines[0]).toBe(decision.allowed ? 'HTTP/1.1 200 OK' : 'HTTP/1.1 429 Too Many Requests');
        for (let i = 0; i < headers.length; i += 2) expect(lines).toContain(`${headers[i]}: ${headers[i + 1]}`);
      }
    }
    await page.screenshot({ path: artifact('simulator-instant.png'), fullPage: true });

    // A click on a chart picks the instant under the cursor.
    const probed = await page.$eval('#simulator', (el) => (el as HTMLElement).dataset.probed as string);
    const over = await page.$('[data-side=b] [data-chart=level] .u-over');
    const box = await over?.boundingBox();
    if (box === null || box === undefined) throw new Error('the chart has no plotting area');
    await page.mouse.click(box.x + box.width / 4, box.y + box.height / 2);
    await page.waitForFunction(
      (p) => (document.getElementById('simulator') as HTMLElement).dataset.probed !== p,
      probed,
    );
    const picked = Number(await page.inputValue('input[name=instant]'));
    expect(picked).toBeGreaterThan(3);
    expect(picked).toBeLessThan(7);
    expect(await page.textContent('[data-probe=b] h3')).toContain(`${picked} s`);
  });

  it('keeps a comparison in its URL: the same link opens the same view', async () => {
    const link = page.url();
    expect(link).toContain('#sim=');
    const admitted = await page.$eval('[data-side=a]', (el) => (el as HTMLElement).dataset.admitted);
    const other = await session.browser.newPage({ viewport: { width: 1366, height: 768 } });
    try {
      await other.goto(link);
      await other.waitForSelector('#simulator[data-probed-version="1"]');
      expect(await other.inputValue('[data-side=a] select[name=algorithm]')).toBe(
        await page.inputValue('[data-side=a] select[name=algorithm]'),
      );
      expect(await other.$eval('[data-side=a]', (el) => (el as HTMLElement).dataset.admitted)).toBe(admitted);
      expect(await other.inputValue('input[name=instant]')).toBe(await page.inputValue('input[name=instant]'));
    } finally {
      await other.close();
    }
  });

  it('opens every ready-made comparison and every traffic pattern without an error', async () => {
    const presets = await page.$$eval('select[name=preset] option', (options) =>
      options.map((o) => (o as HTMLOptionElement).value).filter((v) => v !== ''),
    );
    expect(presets.length).toBeGreaterThanOrEqual(4);
    let version = await page.$eval('#simulator', (el) => (el as HTMLElement).dataset.version as string);
    for (const preset of presets) {
      await page.selectOption('select[name=preset]', preset);
      version = await redrawn(page, version);
      for (const side of ['a', 'b']) {
        expect(await page.$eval(`[data-side=${side}]`, (el) => (el as HTMLElement).dataset.valid)).toBe('true');
      }
      await page.screenshot({ path: artifact(`simulator-preset-${preset}.png`), fullPage: true });
    }
    for (const pattern of ['steady', 'bursts', 'on-off', 'stampede', 'random']) {
      await page.selectOption('select[name=pattern]', pattern);
      version = await redrawn(page, version);
      const requests = Number(await page.$eval('[data-side=a]', (el) => (el as HTMLElement).dataset.requests));
      expect(requests).toBeGreaterThan(0);
    }
    expect(session.errors).toEqual([]);
  });
});
