import type { OverrideScope, OverridesPage, StoredOverride } from 'floodgate/overrides';
import { h } from './dom.js';

/** Where the admin token is kept for the tab's life: never in the URL, never in localStorage. */
const TOKEN_KEY = 'floodgate-admin-token';
/** Overrides on one page of the list (the API's `limit`). */
export const OVERRIDES_PAGE_SIZE = 20;
/** Longest id shown in full: keys may be long. */
const ID_CHARS = 120;
const SCOPES: readonly OverrideScope[] = ['key', 'tenant', 'plan'];

/** An answer of the admin API that is not a success, as text for people. */
class AdminCallError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The text of a failed answer: its problem document's status, title, detail and field, when it has one. */
async function failure(response: Response): Promise<AdminCallError> {
  let text = `the service answered ${response.status}`;
  try {
    const body = (await response.json()) as { title?: unknown; detail?: unknown; field?: unknown };
    const title = typeof body.title === 'string' ? ` ${body.title}` : '';
    const detail = typeof body.detail === 'string' ? `: ${body.detail}` : '';
    const field = typeof body.field === 'string' ? ` (field ${body.field})` : '';
    text = `${response.status}${title}${detail}${field}`;
  } catch {
    // Not JSON: the status alone says it.
  }
  if (response.status === 401 || response.status === 403) text += '. Check the admin token.';
  return new AdminCallError(response.status, text);
}

function readStoredToken(): string {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

function storeToken(token: string): void {
  try {
    if (token === '') sessionStorage.removeItem(TOKEN_KEY);
    else sessionStorage.setItem(TOKEN_KEY, token);
  } catch {
    // Storage refused (private mode, a policy): the token lives in memory only.
  }
}

/** A policy in one line: its name, algorithm and numbers (`burst-raise: gcra limit=100 periodMs=1000`). */
export function policySummary(policy: unknown): string {
  if (typeof policy !== 'object' || policy === null) return String(policy);
  const fields = Object.entries(policy as Record<string, unknown>).filter(
    ([name, value]) => name !== 'name' && name !== 'algorithm' && value !== undefined && typeof value !== 'object',
  );
  const { name, algorithm } = policy as { name?: unknown; algorithm?: unknown };
  const head = [typeof name === 'string' ? `${name}:` : '', typeof algorithm === 'string' ? algorithm : '']
    .filter((s) => s !== '')
    .join(' ');
  return [head, ...fields.map(([k, v]) => `${k}=${String(v)}`)].filter((s) => s !== '').join(' ');
}

/** A path segment for an override id: any string, URL-encoded (the API decodes it). */
function targetPath(scope: OverrideScope, id: string): string {
  return `v1/admin/overrides/${scope}/${encodeURIComponent(id)}`;
}

/** A failed check of the form, in the page, before any call. */
type FormRead = { ok: true; scope: OverrideScope; id: string; body: unknown } | { ok: false; error: string };

/** The form that sets an override: scope, id, policies as JSON, an expiry in minutes, a note. */
function overrideForm(): { form: HTMLFormElement; read(): FormRead } {
  const scopeSelect = h(
    'select',
    { name: 'override-scope' },
    ...SCOPES.map((scope) => h('option', { value: scope }, scope)),
  );
  const idInput = h('input', { type: 'text', name: 'override-id', size: 24, placeholder: 'api|tenant=acme' });
  const policiesInput = h('textarea', {
    name: 'override-policies',
    rows: 3,
    cols: 48,
    spellcheck: 'false',
    placeholder: '[{ "algorithm": "fixed-window", "name": "per-tenant", "limit": 100, "windowMs": 3600000 }]',
  });
  const expiresInput = h('input', {
    type: 'number',
    name: 'override-expires-minutes',
    min: '1',
    step: '1',
    placeholder: 'never',
  });
  const noteInput = h('input', { type: 'text', name: 'override-note', size: 24, maxlength: 256 });
  const form = h(
    'form',
    { class: 'override-form', 'data-override-form': '' },
    h('label', { class: 'field' }, 'scope', scopeSelect),
    h('label', { class: 'field' }, 'key, tenant or plan', idInput),
    h(
      'label',
      { class: 'field wide-text' },
      'policies (JSON: one policy or a list, as the admin API takes them)',
      policiesInput,
    ),
    h('label', { class: 'field' }, 'expires in (minutes)', expiresInput),
    h('label', { class: 'field' }, 'note', noteInput),
    h('button', { type: 'submit', name: 'override-set' }, 'Set override'),
  );
  const read = (): FormRead => {
    let policies: unknown;
    try {
      policies = JSON.parse(policiesInput.value);
    } catch (error) {
      return {
        ok: false,
        error: `The policies are not JSON: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
    const body: { policies: unknown; expiresAt?: number; note?: string } = { policies };
    if (expiresInput.value.trim() !== '') {
      const minutes = Number(expiresInput.value);
      if (!Number.isFinite(minutes) || minutes <= 0) {
        return {
          ok: false,
          error: `expires in (minutes) must be a positive number, got ${JSON.stringify(expiresInput.value)}`,
        };
      }
      body.expiresAt = Date.now() + Math.round(minutes * 60_000);
    }
    if (noteInput.value !== '') body.note = noteInput.value;
    // The id goes as typed: the API checks it (1 to 1024 characters) and says so.
    return { ok: true, scope: scopeSelect.value as OverrideScope, id: idInput.value, body };
  };
  return { form, read };
}

/** Fills the overrides table, a row each, every value as text; `remove` deletes a row's override. */
function overrideRows(
  table: HTMLElement,
  overrides: readonly StoredOverride[],
  remove: (scope: OverrideScope, id: string) => void,
): void {
  table.replaceChildren(
    h(
      'tr',
      {},
      h('th', {}, 'scope'),
      h('th', {}, 'key, tenant or plan'),
      h('th', {}, 'policies'),
      h('th', {}, 'expires'),
      h('th', {}, 'note'),
      h('th', {}, ''),
    ),
    ...overrides.map((o) =>
      h(
        'tr',
        { 'data-override-scope': o.scope, 'data-override-id': o.id },
        h('td', {}, o.scope),
        h('td', { title: o.id }, h('code', {}, o.id.length > ID_CHARS ? `${o.id.slice(0, ID_CHARS)}…` : o.id)),
        h('td', {}, ...o.policies.map((p) => h('div', {}, h('code', {}, policySummary(p))))),
        h('td', {}, o.expiresAt === undefined ? 'never' : new Date(o.expiresAt).toISOString()),
        h('td', {}, o.note ?? ''),
        h(
          'td',
          {},
          h('button', { type: 'button', name: 'override-delete', onclick: () => remove(o.scope, o.id) }, 'Delete'),
        ),
      ),
    ),
  );
}

/** The panel's state: the token, the page shown, and what it says. */
class OverridesPanel {
  token = readStoredToken();
  /** Cursors of the pages before the one shown ('' is the first). */
  private readonly cursors: string[] = [];
  private cursor = '';
  private next: string | undefined;
  /** A success said by a change stays through the reload that follows it. */
  private keepMessage = false;
  readonly message = h('p', { class: 'hint', 'data-overrides-message': '', role: 'status' });
  readonly table = h('table', { class: 'live-table', 'data-table': 'overrides' });
  readonly pageInfo = h('span', { class: 'hint', 'data-overrides-page': '' });
  readonly previous = h('button', { type: 'button', name: 'overrides-previous', disabled: true }, '← Previous');
  readonly nextButton = h('button', { type: 'button', name: 'overrides-next', disabled: true }, 'Next →');

  constructor(private readonly panel: HTMLElement) {
    this.previous.addEventListener('click', () => {
      this.cursor = this.cursors.pop() ?? '';
      void this.load();
    });
    this.nextButton.addEventListener('click', () => {
      if (this.next === undefined) return;
      this.cursors.push(this.cursor);
      this.cursor = this.next;
      void this.load();
    });
  }

  say(text: string, tone: 'hint' | 'error' | 'ok' = 'hint'): void {
    this.message.className = tone === 'error' ? 'error' : tone === 'ok' ? 'hint ok' : 'hint';
    this.message.textContent = text;
  }

  useToken(token: string): Promise<void> {
    this.token = token;
    storeToken(token);
    this.cursors.length = 0;
    this.cursor = '';
    this.next = undefined;
    return this.load();
  }

  private async call(method: string, path: string, body?: unknown): Promise<unknown> {
    const response = await fetch(path, {
      method,
      cache: 'no-store',
      headers: {
        Authorization: `Bearer ${this.token}`,
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw await failure(response);
    return response.json();
  }

  private clear(state: string): void {
    this.table.replaceChildren();
    this.pageInfo.textContent = '';
    this.previous.disabled = true;
    this.nextButton.disabled = true;
    this.panel.dataset.overridesState = state;
  }

  /** Lists the page shown; without a token, says it is needed and calls nothing. */
  async load(): Promise<void> {
    const keep = this.keepMessage;
    this.keepMessage = false;
    if (this.token === '') {
      this.clear('no-token');
      this.say(
        "The overrides need the admin token (the service's FLOODGATE_ADMIN_TOKEN or a line of its token file). It is kept in this tab only, never in the address.",
      );
      return;
    }
    this.panel.dataset.overridesState = 'loading';
    const query = new URLSearchParams({ limit: String(OVERRIDES_PAGE_SIZE) });
    if (this.cursor !== '') query.set('cursor', this.cursor);
    try {
      const page = (await this.call('GET', `v1/admin/overrides?${query.toString()}`)) as OverridesPage;
      this.next = page.cursor;
      overrideRows(this.table, page.overrides, (scope, id) => void this.remove(scope, id));
      this.previous.disabled = this.cursors.length === 0;
      this.nextButton.disabled = this.next === undefined;
      const n = page.overrides.length;
      this.pageInfo.textContent = `Page ${this.cursors.length + 1}: ${n} override${n === 1 ? '' : 's'}${this.next === undefined ? '' : ', more on the next page'}.`;
      this.panel.dataset.overridesState = 'listed';
      if (!keep) this.say(n === 0 && this.cursors.length === 0 ? 'No overrides are stored.' : '');
    } catch (error) {
      this.clear('failed');
      this.say(error instanceof Error ? error.message : String(error), 'error');
    }
  }

  async set(read: FormRead): Promise<void> {
    if (this.token === '') return this.load();
    if (!read.ok) {
      this.say(read.error, 'error');
      return;
    }
    try {
      await this.call('PUT', targetPath(read.scope, read.id), read.body);
    } catch (error) {
      this.say(error instanceof Error ? error.message : String(error), 'error');
      return;
    }
    this.say(`Set the ${read.scope} override.`, 'ok');
    this.keepMessage = true;
    await this.useToken(this.token);
  }

  async remove(scope: OverrideScope, id: string): Promise<void> {
    try {
      const answer = (await this.call('DELETE', targetPath(scope, id))) as { removed?: boolean };
      this.say(answer.removed === false ? `No ${scope} override to delete.` : `Deleted the ${scope} override.`, 'ok');
    } catch (error) {
      this.say(error instanceof Error ? error.message : String(error), 'error');
      return;
    }
    this.keepMessage = true;
    await this.load();
  }
}

/**
 * Mounts the overrides panel: an admin token field, the stored overrides page by page, a form that sets
 * one and a button per row that deletes it. It makes no admin call until a token is given; the token is
 * sent as `Authorization: Bearer` and kept in the tab's sessionStorage, never in the URL.
 */
export function mountOverrides(panel: HTMLElement): void {
  const state = new OverridesPanel(panel);
  const tokenInput = h('input', {
    type: 'password',
    name: 'admin-token',
    autocomplete: 'off',
    spellcheck: 'false',
    size: 28,
    placeholder: 'admin bearer token',
    value: state.token,
  });
  const tokenForm = h(
    'form',
    { class: 'token-form', 'data-token-form': '' },
    h('label', { class: 'field' }, 'admin token', tokenInput),
    h('button', { type: 'submit', name: 'token-use' }, 'Use token'),
    h(
      'button',
      {
        type: 'button',
        name: 'token-forget',
        onclick: () => {
          tokenInput.value = '';
          void state.useToken('');
        },
      },
      'Forget',
    ),
  );
  tokenForm.addEventListener('submit', (event) => {
    event.preventDefault();
    void state.useToken(tokenInput.value.trim());
  });
  const { form, read } = overrideForm();
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void state.set(read());
  });
  panel.replaceChildren(
    h('h2', {}, 'Overrides'),
    tokenForm,
    state.message,
    state.table,
    h('p', { class: 'pager' }, state.previous, ' ', state.nextButton, ' ', state.pageInfo),
    h('h3', {}, 'Set an override'),
    form,
  );
  void state.load();
}
