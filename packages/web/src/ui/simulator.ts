import type { Algorithm } from 'floodgate';
import { isFloodgateError } from 'floodgate';
import type { HeaderFormat } from 'floodgate/http';
import { binCalls } from '../sim/bins.js';
import { type Probe, probe, SIM_START_MS, type SideInput, type Simulation, simulate } from '../sim/simulate.js';
import type { Readout } from '../sim/state.js';
import { fmt } from '../sim/state.js';
import type { Traffic, TrafficKind } from '../sim/traffic.js';
import { CountsChart, LevelChart } from './charts.js';
import { debounce, h } from './dom.js';
import type { Values } from './fields.js';
import {
  ALGORITHMS,
  missingField,
  type PolicyFormState,
  policyFormState,
  readPolicy,
  renderPolicyForm,
} from './policy-form.js';
import { PRESETS, type Preset } from './presets.js';
import { PATTERNS, readTraffic, renderTrafficForm, type TrafficFormState, trafficFormState } from './traffic-form.js';

const START_US = SIM_START_MS * 1000;
const HEADER_FORMATS: readonly HeaderFormat[] = ['ietf', 'draft-7', 'draft-6', 'legacy'];
/** Most window boundaries drawn: past that they would only grey the chart. */
const MAX_BOUNDARIES = 300;

/** Everything the simulator shows follows from this; it is kept in the URL so a view can be shared. */
interface SimulatorState {
  a: PolicyFormState;
  b: PolicyFormState;
  traffic: TrafficFormState;
  /** The chosen instant, seconds after the start. */
  instantS: number;
  headers: HeaderFormat;
}

function fromPreset(preset: Preset): SimulatorState {
  return {
    a: policyFormState(preset.a.algorithm, preset.a.values, preset.a.common),
    b: policyFormState(preset.b.algorithm, preset.b.values, preset.b.common),
    traffic: trafficFormState(preset.traffic.kind, preset.traffic.values, preset.traffic.common),
    instantS: 5,
    headers: 'ietf',
  };
}

/**
 * The state in the URL's fragment, when there is a readable one: the compact form that {@link stateToUrl}
 * writes, or the JSON of earlier versions of the page (links already shared keep working).
 */
function stateFromUrl(): SimulatorState | undefined {
  const match = /^#sim=(.+)$/.exec(location.hash);
  if (match === null) return undefined;
  const fresh = fromPreset(PRESETS[0] as Preset);
  const text = match[1] as string;
  if (!text.startsWith('%7B')) return compactState(text, fresh);
  try {
    const parsed = JSON.parse(decodeURIComponent(text)) as SimulatorState;
    // Merge over a fresh state so a link from an older page still opens with every field present.
    return {
      a: { ...fresh.a, ...parsed.a, values: { ...fresh.a.values, ...parsed.a?.values } },
      b: { ...fresh.b, ...parsed.b, values: { ...fresh.b.values, ...parsed.b?.values } },
      traffic: { ...fresh.traffic, ...parsed.traffic, values: { ...fresh.traffic.values, ...parsed.traffic?.values } },
      instantS: typeof parsed.instantS === 'number' ? parsed.instantS : fresh.instantS,
      headers: HEADER_FORMATS.includes(parsed.headers) ? parsed.headers : 'ietf',
    };
  } catch {
    return undefined;
  }
}

/**
 * The state as a short query string for the fragment: each side's algorithm and the values it shows, the
 * traffic's pattern and its values, the instant and the header format (`a=gcra&a.limit=10&…`). Only what
 * is on screen goes in (not the values kept for the other algorithms), so a link is a few hundred bytes.
 */
export function stateToUrl(state: SimulatorState): string {
  const params = new URLSearchParams();
  const put = (prefix: string, kind: string, values: Values, common: Values) => {
    params.set(prefix, kind);
    for (const [name, value] of [...Object.entries(values), ...Object.entries(common)]) {
      if (value === '' || value === false) continue;
      params.set(`${prefix}.${name}`, value === true ? '1' : value);
    }
  };
  put('a', state.a.algorithm, state.a.values[state.a.algorithm], state.a.common);
  put('b', state.b.algorithm, state.b.values[state.b.algorithm], state.b.common);
  put('t', state.traffic.kind, state.traffic.values[state.traffic.kind], state.traffic.common);
  params.set('at', String(state.instantS));
  if (state.headers !== 'ietf') params.set('h', state.headers);
  return params.toString();
}

/** Reads {@link stateToUrl}'s form over a fresh state; anything unknown is left at its default. */
function compactState(text: string, fresh: SimulatorState): SimulatorState | undefined {
  const params = new URLSearchParams(text);
  const side = (prefix: 'a' | 'b'): PolicyFormState => {
    const algorithm = params.get(prefix);
    const base = fresh[prefix];
    if (algorithm === null || !(ALGORITHMS as readonly string[]).includes(algorithm)) return base;
    const chosen = algorithm as Algorithm;
    const state = policyFormState(chosen);
    for (const [key, value] of params) {
      if (!key.startsWith(`${prefix}.`)) continue;
      const name = key.slice(2);
      const target = name in state.common ? state.common : state.values[chosen];
      target[name] = typeof target[name] === 'boolean' ? value === '1' : value;
    }
    return state;
  };
  const kind = params.get('t');
  let traffic = fresh.traffic;
  if (kind !== null && (PATTERNS as readonly string[]).includes(kind)) {
    traffic = trafficFormState(kind as TrafficKind);
    for (const [key, value] of params) {
      if (!key.startsWith('t.')) continue;
      const name = key.slice(2);
      (name in traffic.common ? traffic.common : traffic.values[traffic.kind])[name] = value;
    }
  }
  const at = Number(params.get('at'));
  const headers = params.get('h') as HeaderFormat | null;
  return {
    a: side('a'),
    b: side('b'),
    traffic,
    instantS: Number.isFinite(at) && at >= 0 ? at : fresh.instantS,
    headers: headers !== null && HEADER_FORMATS.includes(headers) ? headers : 'ietf',
  };
}

/** Clock-aligned window boundaries of the policy (or of a stampede), seconds after the start. */
function boundaries(sim: Simulation, traffic: Traffic): number[] {
  const policy = sim.policy;
  let windowMs: number | undefined;
  if ((policy.algorithm === 'fixed-window' && policy.align === 'clock') || policy.algorithm === 'sliding-window') {
    windowMs = policy.windowMs;
  } else if (traffic.pattern.kind === 'stampede') {
    windowMs = traffic.pattern.windowMs;
  }
  if (windowMs === undefined) return [];
  const windowUs = Math.round(windowMs * 1000);
  if (sim.durationUs / windowUs > MAX_BOUNDARIES) return [];
  const out: number[] = [];
  for (let t = (windowUs - (START_US % windowUs)) % windowUs; t <= sim.durationUs; t += windowUs) out.push(t / 1e6);
  return out;
}

/** One side of the comparison: its form, summary, charts and the response at the instant. */
class Side {
  readonly element: HTMLElement;
  readonly probeElement: HTMLElement;
  private readonly form = h('div', { class: 'policy-form' });
  /** Always in the layout (empty when there is nothing to say), so both sides' rows stay aligned. */
  private readonly error = h('p', { class: 'error', role: 'alert' });
  private readonly summary = h('p', { class: 'summary' });
  private readonly counts: CountsChart;
  private readonly level: LevelChart;
  private readonly levelTitle = h('h3', {});
  /** Queue mode: when each admitted request may proceed (an empty row for other policies). */
  private readonly delays: LevelChart;
  private readonly delayTitle = h('h3', { 'data-delays-title': '' });
  private readonly delayElement = h('div', { class: 'chart', 'data-chart': 'delays' });
  /** Why there is no simulation: the policy's own error. */
  problem: string | undefined;
  simulation: Simulation | undefined;

  constructor(
    readonly id: 'a' | 'b',
    readonly state: PolicyFormState,
    changed: () => void,
    pick: (s: number) => void,
  ) {
    const countsElement = h('div', { class: 'chart', 'data-chart': 'counts' });
    const levelElement = h('div', { class: 'chart', 'data-chart': 'level' });
    this.element = h(
      'article',
      { class: 'side', 'data-side': id },
      h('header', {}, h('h2', {}, `Policy ${id.toUpperCase()}`), this.form),
      this.error,
      this.summary,
      h('h3', {}, 'Admitted and denied requests'),
      countsElement,
      this.levelTitle,
      levelElement,
      this.delayTitle,
      this.delayElement,
    );
    this.probeElement = h('article', { class: 'probe', 'data-probe': id });
    renderPolicyForm(this.form, state, changed);
    this.counts = new CountsChart(countsElement, pick);
    this.level = new LevelChart(levelElement, pick);
    this.delays = new LevelChart(this.delayElement, pick);
  }

  /** Re-renders the form (after a preset replaced the state). */
  renderForm(changed: () => void): void {
    renderPolicyForm(this.form, this.state, changed);
  }

  /** Runs the simulation and redraws; shows the library's validation error instead when there is one. */
  run(traffic: Traffic | undefined, version: number): void {
    let simulation: Simulation | undefined;
    let message: string | undefined;
    // An empty input is a value not given yet: say so in the page's words, not the library's
    // "got undefined" (the library leaves out options it does not receive).
    const missing = missingField(this.state);
    if (missing !== undefined) {
      message = `${missing} is empty: enter a number`;
    } else if (traffic !== undefined) {
      try {
        simulation = simulate({ policy: readPolicy(this.state) } satisfies SideInput, traffic);
      } catch (error) {
        if (!isFloodgateError(error)) throw error;
        message = error.message;
      }
    }
    this.simulation = simulation;
    this.problem = message;
    this.error.textContent = message ?? '';
    this.element.dataset.version = String(version);
    if (simulation === undefined || traffic === undefined) {
      this.element.dataset.valid = 'false';
      return;
    }
    this.element.dataset.valid = 'true';
    this.element.dataset.policy = simulation.policy.name;
    this.element.dataset.requests = String(simulation.calls.length);
    this.element.dataset.admitted = String(simulation.admitted);
    this.element.dataset.denied = String(simulation.denied);
    const share = simulation.calls.length === 0 ? 0 : (100 * simulation.admitted) / simulation.calls.length;
    this.summary.replaceChildren(
      h('code', {}, simulation.policy.name),
      ': ',
      h('b', { class: 'admitted', 'data-count': 'admitted' }, String(simulation.admitted)),
      ' admitted, ',
      h('b', { class: 'denied', 'data-count': 'denied' }, String(simulation.denied)),
      ` denied of ${simulation.calls.length} requests (${Math.round(share)}% admitted)`,
      delaySummary(simulation),
    );
    const lines = boundaries(simulation, traffic);
    this.counts.update(binCalls(simulation), lines);
    const curve = simulation.curve;
    const denied: (number | null)[] = curve.level.map(() => null);
    // Each call adds two points (before, after); a denial is marked at the point after it.
    let point = 0;
    for (const call of simulation.calls) {
      while (point < curve.atUs.length && curve.atUs[point] !== call.atUs) point++;
      point++;
      if (!call.allowed && point < curve.atUs.length) denied[point] = call.level;
      point++;
    }
    this.levelTitle.textContent = `State: ${simulation.scale.label}`;
    this.level.update({
      label: simulation.scale.axis,
      ceiling: simulation.scale.ceiling,
      ceilingLabel: simulation.scale.ceilingLabel,
      atS: curve.atUs.map((us) => us / 1e6),
      level: curve.level,
      denied,
      blocked: curve.blocked,
      boundariesS: lines,
    });
    this.drawDelays(simulation, lines);
  }

  /**
   * A queue (the leaky bucket's `mode: 'queue'`) admits requests that must wait: their waits are what
   * tells it from a meter, so they get a chart of their own, against the longest wait the policy allows.
   */
  private drawDelays(simulation: Simulation, boundariesS: readonly number[]): void {
    const policy = simulation.policy;
    const queued = policy.algorithm === 'leaky-bucket' && policy.mode === 'queue';
    this.element.dataset.queue = String(queued);
    this.delayTitle.textContent = queued ? 'Wait before each admitted request proceeds (delayMs)' : '';
    this.delayElement.hidden = !queued;
    if (!queued) return;
    const admitted = simulation.calls.filter((call) => call.allowed);
    this.delays.update({
      label: 'wait (ms)',
      ceiling: (policy.capacity / policy.leakPerSecond) * 1000,
      ceilingLabel: 'longest wait: capacity ÷ leakPerSecond',
      atS: admitted.map((call) => call.atUs / 1e6),
      level: admitted.map((call) => call.delayMs),
      denied: admitted.map(() => null),
      blocked: admitted.map(() => 0),
      boundariesS,
    });
  }

  set instant(s: number) {
    this.counts.instant = s;
    this.level.instant = s;
    if (!this.delayElement.hidden) this.delays.instant = s;
  }

  /** What the probe says when there is no answer: the traffic's problem, else this policy's. */
  renderProbe(result: Probe | undefined, trafficProblem?: string): void {
    if (result === undefined) {
      const why =
        trafficProblem !== undefined
          ? `No answer while the traffic is not valid: ${trafficProblem}`
          : `No answer while the policy is not valid${this.problem === undefined ? '' : `: ${this.problem}`}`;
      this.probeElement.dataset.status = '';
      this.probeElement.replaceChildren(
        h('h3', {}, `Policy ${this.id.toUpperCase()}`),
        h('p', { 'data-no-answer': '' }, why),
      );
      return;
    }
    const outcome = result.outcome;
    const lines = [`HTTP/1.1 ${outcome.status} ${outcome.status === 200 ? 'OK' : 'Too Many Requests'}`];
    for (let i = 0; i + 1 < outcome.headers.length; i += 2)
      lines.push(`${outcome.headers[i]}: ${outcome.headers[i + 1]}`);
    const decision = outcome.decision;
    const el = this.probeElement;
    el.dataset.status = String(outcome.status);
    el.dataset.allowed = String(decision.allowed);
    el.dataset.remaining = String(decision.remaining);
    const last = result.lastCall;
    el.replaceChildren(
      h('h3', {}, `Policy ${this.id.toUpperCase()}: a request at ${fmt(result.atUs / 1e6)} s receives`),
      h(
        'pre',
        { class: decision.allowed ? 'response allowed' : 'response denied', 'data-response': '' },
        lines.join('\n'),
      ),
      decisionLine(decision),
      readoutTable('State just before it', result.before),
      h(
        'p',
        { class: 'hint' },
        last === undefined
          ? 'No request of the traffic before this instant.'
          : `Last request of the traffic: at ${fmt(last.atUs / 1e6)} s, ${last.decision.allowed ? 'admitted' : `denied (${last.decision.reason ?? 'limit'})`}, remaining ${last.decision.remaining}.`,
      ),
      outcome.body === undefined
        ? ''
        : h('details', {}, h('summary', {}, 'Response body'), h('pre', { class: 'body' }, prettyJson(outcome.body))),
    );
  }
}

/** Queue mode admits calls that must wait: how many, and the longest wait. */
function delaySummary(simulation: Simulation): string {
  let delayed = 0;
  let longest = 0;
  for (const call of simulation.calls) {
    if (call.delayMs > 0) {
      delayed++;
      longest = Math.max(longest, call.delayMs);
    }
  }
  return delayed === 0 ? '' : `; ${delayed} of the admitted wait before proceeding, up to ${longest} ms`;
}

function decisionLine(decision: Probe['outcome']['decision']): HTMLElement {
  const parts = [
    `allowed ${decision.allowed}`,
    `remaining ${decision.remaining}`,
    `retryAfterMs ${decision.retryAfterMs}`,
    `resetAfterMs ${decision.resetAfterMs}`,
  ];
  if (decision.delayMs !== undefined) parts.push(`delayMs ${decision.delayMs}`);
  if (decision.reason !== undefined) parts.push(`reason ${decision.reason}`);
  return h('p', { class: 'decision' }, h('code', {}, parts.join(' · ')));
}

function readoutTable(title: string, readout: Readout): HTMLElement {
  return h(
    'table',
    { class: 'readout' },
    h('caption', {}, title),
    ...readout.fields.map(([name, value]) => h('tr', {}, h('th', {}, name), h('td', {}, value))),
  );
}

function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** Mounts the simulator into `root`. */
export function mountSimulator(root: HTMLElement): void {
  const state = stateFromUrl() ?? fromPreset(PRESETS[0] as Preset);
  let version = 0;
  let probeRun = 0;
  let traffic: Traffic | undefined;

  const trafficForm = h('div', { class: 'traffic-form', 'data-traffic': '' });
  const trafficError = h('p', { class: 'error', role: 'alert', hidden: true });
  const trafficSummary = h('span', { class: 'hint', 'data-arrivals': '' });
  const presetSelect = h(
    'select',
    { name: 'preset' },
    h('option', { value: '' }, 'a ready-made comparison…'),
    ...PRESETS.map((p, i) => h('option', { value: String(i) }, p.title)),
  );
  const instant = h('input', { type: 'range', name: 'instant', min: '0', step: 'any', 'aria-label': 'instant' });
  const instantOutput = h('output', { 'data-instant': '' });
  const formatSelect = h(
    'select',
    { name: 'headers' },
    ...HEADER_FORMATS.map((f) => h('option', { value: f, selected: f === state.headers }, f)),
  );

  const pick = (s: number) => {
    if (traffic === undefined) return;
    state.instantS = Math.max(0, Math.min(traffic.durationMs / 1000, Math.round(s * 1000) / 1000));
    instant.value = String(state.instantS);
    reprobe();
  };
  const sides = [new Side('a', state.a, () => changed(), pick), new Side('b', state.b, () => changed(), pick)] as const;

  const recompute = () => {
    version++;
    try {
      traffic = readTraffic(state.traffic);
      trafficError.hidden = true;
    } catch (error) {
      traffic = undefined;
      trafficError.hidden = false;
      trafficError.textContent = error instanceof Error ? error.message : String(error);
    }
    for (const side of sides) side.run(traffic, version);
    const first = sides[0].simulation;
    trafficSummary.textContent =
      first === undefined ? '' : `${first.calls.length} requests over ${fmt(first.durationUs / 1e6)} s`;
    // Invalid traffic has no duration: the instant stays where it was until the traffic is valid again.
    if (traffic !== undefined) {
      const durationS = traffic.durationMs / 1000;
      instant.max = String(durationS);
      state.instantS = Math.min(state.instantS, durationS);
      instant.value = String(state.instantS);
    }
    root.dataset.version = String(version);
    reprobe();
  };

  const reprobe = () => {
    const run = ++probeRun;
    const atUs = Math.round(state.instantS * 1e6);
    instantOutput.textContent = `${fmt(state.instantS)} s`;
    // The fragment carries the simulator's state (a shareable link) unless another view is shown.
    if (!root.hidden) history.replaceState(null, '', `#sim=${stateToUrl(state)}`);
    for (const side of sides) side.instant = state.instantS;
    const t = traffic;
    void Promise.all(
      sides.map((side) =>
        side.simulation === undefined || t === undefined
          ? Promise.resolve(undefined)
          : probe({ policy: readPolicy(side.state) }, t, atUs, state.headers),
      ),
    ).then((results) => {
      // A newer instant was chosen while these ran: theirs wins.
      if (run !== probeRun) return;
      const trafficProblem = traffic === undefined ? trafficError.textContent : undefined;
      results.forEach((result, i) => {
        sides[i]?.renderProbe(result, trafficProblem ?? undefined);
      });
      root.dataset.probed = String(run);
      root.dataset.probedVersion = String(version);
    });
  };

  const recomputeSoon = debounce(recompute, 60);
  // An edit makes the comparison the user's own: the preset's title no longer describes it.
  const changed = () => {
    presetSelect.value = '';
    presetSelect.title = '';
    recomputeSoon();
  };
  const moved = debounce(reprobe, 30);

  presetSelect.addEventListener('change', () => {
    const preset = PRESETS[Number(presetSelect.value)];
    if (preset === undefined) return;
    const next = fromPreset(preset);
    Object.assign(state.a, next.a);
    Object.assign(state.b, next.b);
    Object.assign(state.traffic, next.traffic);
    for (const side of sides) side.renderForm(() => changed());
    renderTrafficForm(trafficForm, state.traffic, changed);
    presetSelect.title = preset.title;
    recompute();
  });
  instant.addEventListener('input', () => {
    state.instantS = Number(instant.value);
    instantOutput.textContent = `${fmt(state.instantS)} s`;
    for (const side of sides) side.instant = state.instantS;
    moved();
  });
  formatSelect.addEventListener('change', () => {
    state.headers = formatSelect.value as HeaderFormat;
    reprobe();
  });

  renderTrafficForm(trafficForm, state.traffic, changed);
  root.replaceChildren(
    h(
      'div',
      { class: 'toolbar' },
      h('label', { class: 'field preset' }, h('span', {}, 'compare'), presetSelect),
      trafficForm,
      trafficSummary,
    ),
    trafficError,
    h('div', { class: 'sides' }, ...sides.map((s) => s.element)),
    h(
      'div',
      { class: 'instant-bar' },
      h('label', { class: 'field wide' }, h('span', {}, 'instant'), instant, instantOutput),
      h('label', { class: 'field' }, h('span', {}, 'header format'), formatSelect),
      h('span', { class: 'hint' }, 'or click a chart to pick the instant; drag to zoom, double-click to reset'),
    ),
    h('div', { class: 'probes' }, ...sides.map((s) => s.probeElement)),
  );
  recompute();
}
