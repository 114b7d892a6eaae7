import { h } from './dom.js';

/** One input of a form: a number, a choice, a flag or a name. */
export interface Field {
  readonly name: string;
  readonly label: string;
  readonly kind: 'number' | 'choice' | 'flag' | 'text';
  /** Choices of a `choice` field. */
  readonly choices?: readonly string[];
  /** Shown in an empty input: the value the library uses when the field is left out. */
  readonly placeholder?: string;
  readonly step?: string;
  readonly title?: string;
}

/** Values of a form as typed: numbers stay text until read, so an empty field means "left out". */
export type Values = Record<string, string | boolean>;

/** Renders fields into labelled inputs that write into `values` and call `changed`. */
export function renderFields(fields: readonly Field[], values: Values, changed: () => void): HTMLElement[] {
  return fields.map((field) => {
    const value = values[field.name];
    let input: HTMLInputElement | HTMLSelectElement;
    if (field.kind === 'choice') {
      input = h(
        'select',
        { name: field.name },
        ...(field.choices ?? []).map((choice) => h('option', { value: choice, selected: choice === value }, choice)),
      );
    } else if (field.kind === 'flag') {
      input = h('input', { type: 'checkbox', name: field.name, checked: value === true });
    } else {
      input = h('input', {
        type: field.kind === 'number' ? 'number' : 'text',
        name: field.name,
        value: typeof value === 'string' ? value : '',
        placeholder: field.placeholder,
        step: field.step ?? 'any',
        min: field.kind === 'number' ? '0' : undefined,
        size: field.kind === 'text' ? 12 : undefined,
      });
    }
    const update = () => {
      values[field.name] = input instanceof HTMLInputElement && input.type === 'checkbox' ? input.checked : input.value;
      changed();
    };
    input.addEventListener('input', update);
    input.addEventListener('change', update);
    return h(
      'label',
      { class: field.kind === 'flag' ? 'field flag' : 'field', title: field.title },
      h('span', {}, field.label),
      input,
    );
  });
}

/** Reads the fields into plain data: numbers parsed, empty inputs left out, flags as booleans. */
export function readFields(fields: readonly Field[], values: Values): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const value = values[field.name];
    if (field.kind === 'flag') {
      out[field.name] = value === true;
    } else if (typeof value === 'string' && value.trim() !== '') {
      // A number that does not parse stays as text, so the library's validation names it.
      out[field.name] = field.kind === 'number' && Number.isFinite(Number(value)) ? Number(value) : value;
    }
  }
  return out;
}
