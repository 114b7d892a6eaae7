import type uPlot from 'uplot';
import type { DecisionRate, PolicyRate, LiveStats as ServiceLiveStats } from '../../../service/src/stats.js';
import { COLORS, type Frame, frameOf, legendNumber, legendValue, type PlottedElement } from './charts.js';
import { h } from './dom.js';
import { mountOverrides } from './overrides.js';

/** What `GET /v1/stats` answers (the service's own types, so a change of the API breaks this build). */
export interface LiveStats {
  store: string;
  windowSeconds: number;
  /** Every decision once, whatever its number of policies. */
  decisions: DecisionRate;
  policies: PolicyRate[];
  health: { up: boolean; breaker: string } & Omit<ServiceLiveStats, 'deniedKeys' | 'deniedKeysTotal' | 'deniedTenants'>;
  deniedKeys: ServiceLiveStats['deniedKeys'];
  deniedKeysTotal: number;
  /** The most denied tenants (a descriptor's `tenant` entry); absent from services older than this page. */
  deniedTenants?: ServiceLiveStats['deniedTenants'];
}

/** How often the page asks the service, and how much history it keeps (5 minutes). */
const POLL_MS = 1000;
const HISTORY = 300;
/** Longest key shown in full: descriptor keys may be long. */
const KEY_CHARS = 120;

/** The label of a policy in the live view: `domain / rule / policy`. */
export function policyLabel(p: Pick<PolicyRate, 'domain' | 'rule' | 'policy'>): string {
  return `${p.domain} / ${p.rule} / ${p.policy}`;
}

/** A time of day as the charts' axes show it: 24-hour, to the second, whatever the browser's locale. */
export function clockTime(date: Date): string {
  // Built by hand: a locale's own 24-hour form may say 24:05 for 00:05.
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** Clock time for the x axis, in whole seconds. */
function clockTicks(_u: uPlot, values: number[]): string[] {
  return values.map((v) => clockTime(new Date(v * 1000)));
}

/** Whole-second tick steps: a poll a second never needs finer. */
const SECOND_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300];

class RateChart {
  private readonly frame: Frame;
  constructor(
    private readonly element: PlottedElement,
    series: uPlot.Series[],
    yLabel: string,
    /** Latencies span decades (µs for the memory store, ms for a network one): a log scale shows both. */
    log = false,
  ) {
    this.frame = frameOf(
      'live',
      element,
      {
        scales: {
          x: { time: true },
          y: log
            ? { distr: 3, log: 10, range: (_u, min, max) => [Math.min(0.001, min || 0.001), Math.max(1, max * 2)] }
            : { range: (_u, _min, max) => [0, Math.max(1, max * 1.15)] },
        },
        axes: [
          { size: 30, values: clockTicks, incrs: SECOND_STEPS },
          { label: yLabel, size: 60, grid: { stroke: 'rgba(0, 0, 0, 0.07)', width: 1 } },
        ],
        // Off the cursor, the legend shows the latest second.
        series: [
          {
            label: 'time',
            value: legendValue(
              (u, i) => clockTicks(u, [u.data[0][i] as number])[0] as string,
              (u) => (u.data[0].length === 0 ? '–' : `${clockTicks(u, [u.data[0].at(-1) as number])[0]} (latest)`),
            ),
          },
          ...series.map((s, n) => ({
            ...s,
            value: legendValue(
              (u, i) => legendNumber(u.data[n + 1]?.[i]),
              (u) => legendNumber(u.data[n + 1]?.at(-1)),
            ),
          })),
        ],
      },
      220,
      () => {},
    );
  }

  update(data: uPlot.AlignedData): void {
    this.element.plotted = data;
    this.frame.plot.setData(data);
  }
}

/** Fills a table of the most denied keys (or tenants), each with its count, its error and a bar. */
function deniedTable(table: HTMLElement, what: 'key' | 'tenant', rows: ServiceLiveStats['deniedKeys']): void {
  const top = rows[0]?.count ?? 1;
  table.replaceChildren(
    h('tr', {}, h('th', {}, what), h('th', { class: 'num' }, 'denied'), h('th', {}, '')),
    ...rows.map((k) =>
      h(
        'tr',
        { [`data-denied-${what}`]: k.key, 'data-count': k.count },
        h('td', { title: k.key }, h('code', {}, k.key.length > KEY_CHARS ? `${k.key.slice(0, KEY_CHARS)}…` : k.key)),
        h('td', { class: 'num' }, k.error > 0 ? `${k.count} (±${k.error})` : String(k.count)),
        h('td', { class: 'bar' }, h('span', { style: `width: ${Math.round((100 * k.count) / top)}%` })),
      ),
    ),
  );
}

/** Mounts the live view of the running service into `root`; it polls only between `start` and `stop`. */
export function mountLive(root: HTMLElement): { start(): void; stop(): void } {
  const status = h('p', { class: 'live-status', 'data-live-status': '' }, 'Connecting to the service…');
  // "All decisions" counts each decision once: summing the policies would count a decision under three
  // policies three times when admitted (every policy admitted it) and once when denied.
  const policySelect = h('select', { name: 'live-policy' }, h('option', { value: '' }, 'all decisions'));
  const ratesElement = h('div', { class: 'chart', 'data-chart': 'rates' });
  const ratesTotals = h('p', { class: 'hint', 'data-rates-totals': '' });
  const latencyElement = h('div', { class: 'chart', 'data-chart': 'latency' });
  const policiesTable = h('table', { class: 'live-table', 'data-table': 'policies' });
  const keysTable = h('table', { class: 'live-table', 'data-table': 'denied-keys' });
  const keysNote = h('p', { class: 'hint' });
  const tenantsTable = h('table', { class: 'live-table', 'data-table': 'denied-tenants' });
  const health = h('dl', { class: 'health', 'data-health': '' });
  const overridesPanel = h('article', { class: 'panel full', 'data-panel': 'overrides' });

  root.replaceChildren(
    status,
    h(
      'div',
      { class: 'live-grid' },
      h(
        'article',
        { class: 'panel wide' },
        h('header', { class: 'panel-head' }, h('h2', {}, 'Decisions per second'), policySelect),
        ratesElement,
        ratesTotals,
      ),
      h('article', { class: 'panel' }, h('h2', {}, 'Policies'), policiesTable),
      h('article', { class: 'panel wide' }, h('h2', {}, 'Store and latency'), health, latencyElement),
      h('article', { class: 'panel' }, h('h2', {}, 'Most denied keys'), keysTable, keysNote),
      h('article', { class: 'panel' }, h('h2', {}, 'Most denied tenants'), tenantsTable),
      overridesPanel,
    ),
  );
  // Asks the admin API only once a token is given, and only when asked (not every poll).
  mountOverrides(overridesPanel);

  const rates = new RateChart(
    ratesElement,
    [
      { label: 'allowed/s', stroke: COLORS.admitted, fill: 'rgba(26, 152, 80, 0.15)', width: 2 },
      { label: 'denied/s', stroke: COLORS.denied, fill: 'rgba(215, 48, 39, 0.15)', width: 2 },
      { label: 'shadow-denied/s', stroke: '#984ea3', width: 1, dash: [4, 3] },
    ],
    'decisions per second',
  );
  const latency = new RateChart(
    latencyElement,
    [
      { label: 'p50 ms', stroke: COLORS.level, width: 2 },
      { label: 'p99 ms', stroke: COLORS.instant, width: 2 },
      { label: 'max ms', stroke: '#999999', width: 1, dash: [4, 3] },
    ],
    'ms per request (log scale)',
    true,
  );

  const history: { atS: number; stats: LiveStats }[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  let polls = 0;

  const redraw = () => {
    const chosen = policySelect.value;
    const xs = history.map((e) => e.atS);
    const rateOf = (e: LiveStats): DecisionRate | undefined =>
      chosen === '' ? e.decisions : e.policies.find((p) => policyLabel(p) === chosen);
    const pick = (e: LiveStats, field: 'allowedPerSecond' | 'deniedPerSecond' | 'shadowDeniedPerSecond') =>
      rateOf(e)?.[field] ?? 0;
    const latest = history.at(-1);
    const totals = latest === undefined ? undefined : rateOf(latest.stats);
    if (totals !== undefined) {
      ratesTotals.dataset.allowedTotal = String(totals.allowedTotal);
      ratesTotals.dataset.deniedTotal = String(totals.deniedTotal);
      ratesTotals.dataset.shadowDeniedTotal = String(totals.shadowDeniedTotal);
      ratesTotals.textContent = `${chosen === '' ? 'Every decision once' : chosen}, since the service started: ${totals.allowedTotal} allowed, ${totals.deniedTotal} denied${totals.shadowDeniedTotal > 0 ? `, ${totals.shadowDeniedTotal} denied in shadow mode` : ''}.`;
    }
    rates.update([
      xs,
      history.map((e) => pick(e.stats, 'allowedPerSecond')),
      history.map((e) => pick(e.stats, 'deniedPerSecond')),
      history.map((e) => pick(e.stats, 'shadowDeniedPerSecond')),
    ]);
    // A second without requests has no latency: a gap, not a zero (which a log scale cannot show).
    const ms = (e: LiveStats, field: 'p50Ms' | 'p99Ms' | 'maxMs') =>
      e.health.latency.count === 0 ? null : e.health.latency[field];
    latency.update([
      xs,
      history.map((e) => ms(e.stats, 'p50Ms')),
      history.map((e) => ms(e.stats, 'p99Ms')),
      history.map((e) => ms(e.stats, 'maxMs')),
    ]);
  };

  const render = (stats: LiveStats) => {
    const labels = stats.policies.map(policyLabel);
    const known = new Set([...policySelect.options].map((o) => o.value));
    for (const label of labels) if (!known.has(label)) policySelect.append(h('option', { value: label }, label));
    policiesTable.replaceChildren(
      h(
        'tr',
        {},
        h('th', {}, 'policy'),
        h('th', { class: 'num' }, 'allowed/s'),
        h('th', { class: 'num' }, 'denied/s'),
        h('th', { class: 'num' }, 'allowed'),
        h('th', { class: 'num' }, 'denied'),
      ),
      ...stats.policies.map((p) =>
        h(
          'tr',
          {
            'data-policy': policyLabel(p),
            'data-allowed-total': p.allowedTotal,
            'data-denied-total': p.deniedTotal,
          },
          h(
            'td',
            { title: policyLabel(p) },
            h('code', {}, p.policy),
            h('span', { class: 'hint' }, ` ${p.domain} / ${p.rule}`),
          ),
          h('td', { class: 'num' }, String(p.allowedPerSecond)),
          h('td', { class: 'num denied' }, String(p.deniedPerSecond + p.shadowDeniedPerSecond)),
          h('td', { class: 'num' }, String(p.allowedTotal)),
          h('td', { class: 'num denied' }, String(p.deniedTotal + p.shadowDeniedTotal)),
        ),
      ),
    );
    deniedTable(keysTable, 'key', stats.deniedKeys);
    deniedTable(tenantsTable, 'tenant', stats.deniedTenants ?? []);
    keysNote.textContent =
      stats.deniedKeys.length === 0
        ? 'No denials in the last minute.'
        : `${stats.deniedKeysTotal} denials in the last 30 to 60 s. Counted by a fixed-size sketch: counts may be over by the ± shown, and a key denied more than its share is never missed.`;
    const h0 = stats.health;
    health.dataset.up = String(h0.up);
    health.replaceChildren(
      ...definition('store', `${stats.store}`),
      ...definition('reachable', h0.up ? 'yes' : 'no', h0.up ? 'ok' : 'bad'),
      ...definition('circuit breaker', h0.breaker, h0.breaker === 'closed' ? 'ok' : 'bad'),
      ...definition(
        'store errors/s',
        `${h0.storeErrorsPerSecond} (${h0.storeErrorsTotal} in all)`,
        h0.storeErrorsPerSecond > 0 ? 'bad' : undefined,
      ),
      ...definition(
        'degraded/s',
        `${h0.degradedPerSecond} (${h0.degradedTotal} in all)`,
        h0.degradedPerSecond > 0 ? 'bad' : undefined,
      ),
      ...definition(
        'latency (engine and store)',
        h0.latency.count === 0
          ? 'none in the last second'
          : `p50 ${duration(h0.latency.p50Ms)} · p99 ${duration(h0.latency.p99Ms)} · max ${duration(h0.latency.maxMs)}`,
      ),
    );
  };

  const poll = async () => {
    const controller = new AbortController();
    const timeout = setTimeout(() => controller.abort(), 2 * POLL_MS);
    try {
      const response = await fetch('v1/stats?window=1', { signal: controller.signal, cache: 'no-store' });
      if (!response.ok) throw new Error(`the service answered ${response.status}`);
      const stats = (await response.json()) as LiveStats;
      history.push({ atS: Date.now() / 1000, stats });
      if (history.length > HISTORY) history.shift();
      render(stats);
      redraw();
      polls++;
      root.dataset.polls = String(polls);
      status.className = 'live-status ok';
      status.textContent = `Live: ${stats.store} store, updated ${clockTime(new Date())}, every ${POLL_MS / 1000} s.`;
    } catch (error) {
      status.className = 'live-status bad';
      status.textContent = `Not connected to a floodgate service (${error instanceof Error ? error.message : String(error)}). The live view needs the page to be served by \`floodgate serve\`; retrying.`;
    } finally {
      clearTimeout(timeout);
      if (running) timer = setTimeout(() => void poll(), POLL_MS);
    }
  };

  policySelect.addEventListener('change', redraw);
  return {
    start() {
      if (running) return;
      running = true;
      void poll();
    },
    stop() {
      running = false;
      clearTimeout(timer);
    },
  };
}

/** A latency for people: µs below a millisecond. */
function duration(ms: number): string {
  return ms < 1 ? `${Math.round(ms * 1000)} µs` : `${Math.round(ms * 100) / 100} ms`;
}

function definition(term: string, value: string, tone?: 'ok' | 'bad'): HTMLElement[] {
  return [h('dt', {}, term), h('dd', { class: tone ?? '' }, value)];
}
