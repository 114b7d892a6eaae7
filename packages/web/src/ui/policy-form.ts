import type { Algorithm, PolicyInput } from 'floodgate';
import { h } from './dom.js';
import { type Field, readFields, renderFields, type Values } from './fields.js';

/** The options of each algorithm, as the library names them, in the order people read them. */
export const ALGORITHM_FIELDS: Record<Algorithm, readonly Field[]> = {
  gcra: [
    { name: 'limit', label: 'limit', kind: 'number' },
    { name: 'periodMs', label: 'periodMs', kind: 'number' },
    { name: 'burst', label: 'burst', kind: 'number', placeholder: '= limit' },
  ],
  'token-bucket': [
    { name: 'capacity', label: 'capacity', kind: 'number' },
    { name: 'refillAmount', label: 'refillAmount', kind: 'number' },
    { name: 'refillIntervalMs', label: 'refillIntervalMs', kind: 'number' },
    { name: 'refill', label: 'refill', kind: 'choice', choices: ['continuous', 'interval'] },
  ],
  'leaky-bucket': [
    { name: 'capacity', label: 'capacity', kind: 'number' },
    { name: 'leakPerSecond', label: 'leakPerSecond', kind: 'number' },
    { name: 'mode', label: 'mode', kind: 'choice', choices: ['meter', 'queue'] },
  ],
  'fixed-window': [
    { name: 'limit', label: 'limit', kind: 'number' },
    { name: 'windowMs', label: 'windowMs', kind: 'number' },
    { name: 'align', label: 'align', kind: 'choice', choices: ['clock', 'first-request'] },
  ],
  'sliding-window': [
    { name: 'limit', label: 'limit', kind: 'number' },
    { name: 'windowMs', label: 'windowMs', kind: 'number' },
    {
      name: 'precisionMs',
      label: 'precisionMs',
      kind: 'number',
      placeholder: 'none (weighted counter)',
      title: 'bucketed window: counts per bucket of this many ms, summed over the window',
    },
  ],
  'sliding-log': [
    { name: 'limit', label: 'limit', kind: 'number' },
    { name: 'windowMs', label: 'windowMs', kind: 'number' },
    { name: 'minGapMs', label: 'minGapMs', kind: 'number', placeholder: '0 (off)' },
    { name: 'countDenied', label: 'countDenied', kind: 'flag', title: 'denied attempts are logged too' },
  ],
};

/** Options every policy has. */
const COMMON_FIELDS: readonly Field[] = [
  {
    name: 'blockMs',
    label: 'blockMs',
    kind: 'number',
    placeholder: '0 (off)',
    title: 'penalty box: once denied, the key stays denied this long',
  },
  { name: 'name', label: 'name', kind: 'text', placeholder: 'derived' },
];

export const ALGORITHMS = Object.keys(ALGORITHM_FIELDS) as Algorithm[];

/** Starting values of each algorithm: ten a second, one way or another. */
export const DEFAULT_VALUES: Record<Algorithm, Values> = {
  gcra: { limit: '10', periodMs: '1000', burst: '' },
  'token-bucket': { capacity: '10', refillAmount: '10', refillIntervalMs: '1000', refill: 'continuous' },
  'leaky-bucket': { capacity: '10', leakPerSecond: '10', mode: 'meter' },
  'fixed-window': { limit: '10', windowMs: '1000', align: 'clock' },
  'sliding-window': { limit: '10', windowMs: '1000', precisionMs: '' },
  'sliding-log': { limit: '10', windowMs: '1000', minGapMs: '', countDenied: false },
};

/** What a side's form holds: the chosen algorithm and the values typed for each (kept across switches). */
export interface PolicyFormState {
  algorithm: Algorithm;
  values: Record<Algorithm, Values>;
  common: Values;
}

/** A fresh form state for an algorithm, with its defaults. */
export function policyFormState(algorithm: Algorithm, values: Values = {}, common: Values = {}): PolicyFormState {
  const all = Object.fromEntries(ALGORITHMS.map((a) => [a, { ...DEFAULT_VALUES[a] }])) as Record<Algorithm, Values>;
  Object.assign(all[algorithm], values);
  return { algorithm, values: all, common: { blockMs: '', name: '', ...common } };
}

/** The policy a form describes, as data for the library to validate. */
export function readPolicy(state: PolicyFormState): PolicyInput {
  return {
    algorithm: state.algorithm,
    ...readFields(ALGORITHM_FIELDS[state.algorithm], state.values[state.algorithm]),
    ...readFields(COMMON_FIELDS, state.common),
  } as PolicyInput;
}

/** Renders a side's policy form into `root`; `changed` runs on every edit. */
export function renderPolicyForm(root: HTMLElement, state: PolicyFormState, changed: () => void): void {
  const select = h(
    'select',
    { name: 'algorithm' },
    ...ALGORITHMS.map((a) => h('option', { value: a, selected: a === state.algorithm }, a)),
  );
  select.addEventListener('change', () => {
    state.algorithm = select.value as Algorithm;
    renderPolicyForm(root, state, changed);
    changed();
  });
  root.replaceChildren(
    h('label', { class: 'field' }, h('span', {}, 'algorithm'), select),
    ...renderFields(ALGORITHM_FIELDS[state.algorithm], state.values[state.algorithm], changed),
    ...renderFields(COMMON_FIELDS, state.common, changed),
  );
}

/**
 * The first option the form requires that is empty, as `policy.<name>`: a number field without a default
 * (no placeholder). The library would call it `undefined`; the page says it is empty.
 */
export function missingField(state: PolicyFormState): string | undefined {
  const values = state.values[state.algorithm];
  const field = ALGORITHM_FIELDS[state.algorithm].find(
    (f) => f.kind === 'number' && f.placeholder === undefined && String(values[f.name] ?? '').trim() === '',
  );
  return field === undefined ? undefined : `policy.${field.name}`;
}
