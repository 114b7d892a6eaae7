import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  CONTEXT_MARK,
  formatErrors,
  linkRepositoryModules,
  pages,
  ROOT,
  type Snippet,
  snippetsOf,
  typeCheck,
} from './snippets.js';

// Every TypeScript example of the READMEs and the guides compiles under the repository's strict settings,
// against the built packages (`npm test` builds first), as a reader would copy it.
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function workDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-snippets-'));
  dirs.push(dir);
  linkRepositoryModules(dir);
  return dir;
}

const all: Snippet[] = pages().flatMap((page) => snippetsOf(page, readFileSync(join(ROOT, page), 'utf8')));

describe('the TypeScript examples of the docs', () => {
  it('are found in the README and the guides', () => {
    const perPage = new Set(all.map((s) => s.page));
    expect([...perPage]).toEqual(expect.arrayContaining(['README.md', 'docs/waiting.md']));
    expect(all.length).toBeGreaterThanOrEqual(26);
  });

  it('compile with strict settings against the built packages', () => {
    const { errors } = typeCheck(all, workDir());
    expect(formatErrors(errors)).toBe('');
  }, 120_000);

  it('are all checked but those whose page says why not', () => {
    const skipped = all.filter((s) => s.skip !== undefined).map((s) => `${s.page}:${s.line} ${s.skip}`);
    // Each exemption is a visible sentence on its page; this list makes a new one a deliberate change.
    expect(skipped).toEqual([]);
  });
});

describe('the check itself', () => {
  const page = [
    '# A page',
    '',
    '```ts',
    `${CONTEXT_MARK}:`,
    "declare const store: import('floodgate').Store;",
    '```',
    '',
    '```ts',
    "import { createLimiter, gcra } from 'floodgate';",
    '',
    'const limiter = createLimiter({ store, policies: gcra({ limit: 1, periodMs: 1000 }) });',
    'const n: number = limiter;',
    '```',
    '',
    '_Not type-checked: a sketch._',
    '',
    '```ts',
    'this is not TypeScript',
    '```',
    '',
    '```sh',
    'echo not TypeScript either',
    '```',
  ].join('\n');

  it('places an error at its line in the page, after the page context', () => {
    const snippets = snippetsOf('docs/page.md', page);
    expect(snippets.map((s) => [s.line, s.skip])).toEqual([
      [4, undefined],
      [9, undefined],
      [18, 'a sketch.'],
    ]);
    const { errors } = typeCheck(snippets, workDir());
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ page: 'docs/page.md', line: 12, column: 7 });
    expect(errors[0]?.message).toMatch(/^TS2322: Type 'Limiter' is not assignable to type 'number'/);
  }, 60_000);

  it('finds an undeclared name', () => {
    const { errors } = typeCheck(snippetsOf('README.md', '```ts\nawait limiter.limit(clientId);\n```\n'), workDir());
    expect(errors.map((e) => [e.line, e.message.slice(0, 6)])).toEqual([
      [2, 'TS2304'],
      [2, 'TS2304'],
    ]);
  }, 60_000);
});
