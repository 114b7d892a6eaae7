import type { Traffic, TrafficKind, TrafficPattern } from '../sim/traffic.js';
import { h } from './dom.js';
import { type Field, readFields, renderFields, type Values } from './fields.js';

const PATTERN_FIELDS: Record<TrafficKind, readonly Field[]> = {
  steady: [{ name: 'ratePerSecond', label: 'requests/s', kind: 'number' }],
  bursts: [
    { name: 'size', label: 'burst size', kind: 'number', step: '1' },
    { name: 'everyMs', label: 'every (ms)', kind: 'number' },
  ],
  'on-off': [
    { name: 'ratePerSecond', label: 'requests/s when on', kind: 'number' },
    { name: 'onMs', label: 'on (ms)', kind: 'number' },
    { name: 'offMs', label: 'off (ms)', kind: 'number' },
  ],
  stampede: [
    { name: 'size', label: 'requests each side', kind: 'number', step: '1' },
    { name: 'windowMs', label: 'boundary every (ms)', kind: 'number' },
    { name: 'spreadMs', label: 'spread (ms)', kind: 'number' },
  ],
  random: [
    { name: 'ratePerSecond', label: 'mean requests/s', kind: 'number' },
    { name: 'seed', label: 'seed', kind: 'number', step: '1' },
  ],
};

const DESCRIPTIONS: Record<TrafficKind, string> = {
  steady: 'one request at a fixed interval',
  bursts: 'many requests at once, at a fixed interval',
  'on-off': 'an attacker who hammers, pauses, and hammers again',
  stampede: 'clients that pile up on each side of a clock boundary (the top of the minute)',
  random: 'Poisson arrivals, the same for the same seed',
};

const COMMON_FIELDS: readonly Field[] = [
  { name: 'durationS', label: 'duration (s)', kind: 'number' },
  { name: 'cost', label: 'cost each', kind: 'number', placeholder: '1' },
];

export const PATTERNS = Object.keys(PATTERN_FIELDS) as TrafficKind[];

const DEFAULTS: Record<TrafficKind, Values> = {
  steady: { ratePerSecond: '15' },
  bursts: { size: '20', everyMs: '3000' },
  'on-off': { ratePerSecond: '40', onMs: '2000', offMs: '4000' },
  stampede: { size: '10', windowMs: '5000', spreadMs: '200' },
  random: { ratePerSecond: '12', seed: '42' },
};

/** What the traffic form holds. */
export interface TrafficFormState {
  kind: TrafficKind;
  values: Record<TrafficKind, Values>;
  common: Values;
}

/** A fresh traffic form state. */
export function trafficFormState(kind: TrafficKind, values: Values = {}, common: Values = {}): TrafficFormState {
  const all = Object.fromEntries(PATTERNS.map((k) => [k, { ...DEFAULTS[k] }])) as Record<TrafficKind, Values>;
  Object.assign(all[kind], values);
  return { kind, values: all, common: { durationS: '20', cost: '', ...common } };
}

/** The traffic a form describes; throws an Error naming the field when a value is unusable. */
export function readTraffic(state: TrafficFormState): Traffic {
  const fields = readFields(PATTERN_FIELDS[state.kind], state.values[state.kind]);
  for (const field of PATTERN_FIELDS[state.kind]) {
    const value = fields[field.name];
    const mayBeZero = field.name === 'spreadMs' || field.name === 'offMs' || field.name === 'seed';
    if (typeof value !== 'number' || !(mayBeZero ? value >= 0 : value > 0)) {
      throw new Error(`traffic: ${field.label} must be a number ${mayBeZero ? '≥ 0' : 'above 0'}`);
    }
  }
  const common = readFields(COMMON_FIELDS, state.common);
  const durationS = common.durationS;
  if (typeof durationS !== 'number' || !(durationS > 0) || durationS > 86_400) {
    throw new Error('traffic: duration must be a number of seconds above 0, at most a day');
  }
  const cost = common.cost ?? 1;
  if (typeof cost !== 'number' || !(cost >= 0)) throw new Error('traffic: cost must be a number ≥ 0');
  return { pattern: { kind: state.kind, ...fields } as TrafficPattern, durationMs: durationS * 1000, cost };
}

/** Renders the traffic form into `root`. */
export function renderTrafficForm(root: HTMLElement, state: TrafficFormState, changed: () => void): void {
  const select = h(
    'select',
    { name: 'pattern' },
    ...PATTERNS.map((k) => h('option', { value: k, selected: k === state.kind }, k)),
  );
  select.addEventListener('change', () => {
    state.kind = select.value as TrafficKind;
    renderTrafficForm(root, state, changed);
    changed();
  });
  root.replaceChildren(
    h('label', { class: 'field', title: DESCRIPTIONS[state.kind] }, h('span', {}, 'traffic'), select),
    ...renderFields(PATTERN_FIELDS[state.kind], state.values[state.kind], changed),
    ...renderFields(COMMON_FIELDS, state.common, changed),
    h('span', { class: 'hint' }, DESCRIPTIONS[state.kind]),
  );
}
