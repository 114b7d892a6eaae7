import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root. */
export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The TypeScript compiler the repository builds with. */
export const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

/**
 * The first line of a page's context block: names its examples use without creating them (the reader's
 * own store, app or handler), declared once, visibly, and put before each example of that page when it
 * is checked.
 */
export const CONTEXT_MARK = '// The examples on this page assume';

/** The visible sentence that exempts the block after it from checking, with its reason. */
const SKIP = /^_Not type-checked: (.+)_$/;

/** One fenced TypeScript block of a Markdown page. */
export interface Snippet {
  /** The page, relative to the repository's root. */
  readonly page: string;
  /** The 1-based line of the block's first line of code. */
  readonly line: number;
  /** The title of the section the block is in (its heading's text). */
  readonly heading: string;
  readonly code: string;
  /** The page's context block, when this block is not it. */
  readonly context: string | undefined;
  /** Why the block is not checked, as the page says; undefined when it is checked. */
  readonly skip: string | undefined;
}

/** Every Markdown page whose TypeScript is checked: the READMEs and the guides. */
export function pages(): string[] {
  const found = ['README.md'];
  for (const dir of readdirSync(join(ROOT, 'packages'))) {
    const readme = join('packages', dir, 'README.md');
    try {
      readFileSync(join(ROOT, readme));
      found.push(readme);
    } catch {
      // A package without a README (the private web page).
    }
  }
  for (const name of readdirSync(join(ROOT, 'docs')).sort()) {
    if (name.endsWith('.md')) found.push(join('docs', name));
  }
  return found;
}

/** The TypeScript blocks (```ts or ```typescript) of one page's text. */
export function snippetsOf(page: string, text: string): Snippet[] {
  const lines = text.split('\n');
  const blocks: { line: number; heading: string; code: string; skip: string | undefined }[] = [];
  let heading = '';
  for (let i = 0; i < lines.length; i++) {
    const title = /^#+ (.*)$/.exec(lines[i] as string);
    if (title !== null) heading = (title[1] as string).trim();
    const fence = /^(\s*)(```+|~~~+)\s*(\w*)/.exec(lines[i] as string);
    if (fence === null) continue;
    const [, indent = '', marks = '```', lang = ''] = fence;
    let end = i + 1;
    while (end < lines.length && !(lines[end] as string).trimStart().startsWith(marks)) end++;
    if (lang === 'ts' || lang === 'typescript') {
      let before = i - 1;
      while (before >= 0 && (lines[before] as string).trim() === '') before--;
      const skip = before >= 0 ? SKIP.exec((lines[before] as string).trim())?.[1] : undefined;
      const code = lines
        .slice(i + 1, end)
        .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l))
        .join('\n');
      blocks.push({ line: i + 2, heading, code, skip });
    }
    i = end;
  }
  const contexts = blocks.filter((b) => b.code.startsWith(CONTEXT_MARK));
  if (contexts.length > 1) throw new Error(`${page}: more than one block starts with "${CONTEXT_MARK}"`);
  const context = contexts[0]?.code;
  return blocks.map((b) => ({ page, ...b, context: b.code === context ? undefined : context }));
}

/** A compiler error, placed in the page it comes from. */
export interface SnippetError {
  readonly page: string;
  readonly line: number;
  readonly column: number;
  readonly message: string;
}

/** What {@link typeCheck} found and wrote. */
export interface Checked {
  readonly errors: SnippetError[];
  /** With `emit`, the JavaScript of each snippet (in the order given; undefined for a skipped one). */
  readonly emitted: (string | undefined)[];
}

/**
 * Type-checks snippets with the repository's strict settings, each as a module of its own (its page's
 * context before it), in `dir` where `node_modules` resolves the packages to check against; with `emit`,
 * writes their JavaScript too. Returns the errors, placed in their pages.
 */
export function typeCheck(snippets: readonly Snippet[], dir: string, emit = false): Checked {
  const emitted: (string | undefined)[] = [];
  const src = join(dir, 'snippets');
  mkdirSync(src, { recursive: true });
  const files = new Map<string, { snippet: Snippet; offset: number }>();
  snippets.forEach((snippet, i) => {
    emitted.push(undefined);
    if (snippet.skip !== undefined) return;
    const name = `s${i}-${snippet.page.replace(/[^A-Za-z0-9]+/g, '-')}-${snippet.line}.ts`;
    if (emit) emitted[i] = join(dir, 'out', name.replace(/\.ts$/, '.js'));
    const head = snippet.context === undefined ? '' : `${snippet.context}\n`;
    writeFileSync(join(src, name), `${head}${snippet.code}\nexport {};\n`);
    files.set(name, { snippet, offset: head === '' ? 0 : head.split('\n').length - 1 });
  });
  const base = JSON.parse(readFileSync(join(ROOT, 'tsconfig.base.json'), 'utf8')) as {
    compilerOptions: Record<string, unknown>;
  };
  writeFileSync(join(dir, 'package.json'), '{ "private": true, "type": "module" }\n');
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        ...base.compilerOptions,
        // As a NestJS project compiles (its decorators are the legacy kind); code without decorators is
        // checked the same either way.
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        noEmit: !emit,
        outDir: 'out',
        rootDir: 'snippets',
        declaration: false,
        declarationMap: false,
        sourceMap: false,
      },
      include: ['snippets'],
    }),
  );
  let output = '';
  try {
    execFileSync(process.execPath, [TSC, '-p', dir, '--pretty', 'false'], { encoding: 'utf8', cwd: dir });
  } catch (error) {
    output = String((error as { stdout?: unknown }).stdout ?? error);
  }
  const errors: SnippetError[] = [];
  let last: SnippetError | undefined;
  for (const text of output.split('\n')) {
    const m = /^(?:.*[/\\])?([^/\\()]+\.ts)\((\d+),(\d+)\): error (TS\d+: .*)$/.exec(text);
    if (m === null) {
      // Continuation lines of a message (an elaborated type error) belong to the error before them.
      if (last !== undefined && text.startsWith(' ')) last = { ...last, message: `${last.message}\n${text}` };
      if (last !== undefined) errors[errors.length - 1] = last;
      continue;
    }
    const [, name = '', line = '0', column = '0', message = ''] = m;
    const file = files.get(name);
    last =
      file === undefined
        ? { page: relative(ROOT, join(src, name)), line: Number(line), column: Number(column), message }
        : {
            page: file.snippet.page,
            line: file.snippet.line + Number(line) - 1 - file.offset,
            column: Number(column),
            message,
          };
    errors.push(last);
  }
  if (output !== '' && errors.length === 0) throw new Error(`tsc failed without errors to place:\n${output}`);
  return { errors, emitted };
}

/** Links `dir/node_modules` to the repository's, so snippets there resolve the workspace's packages. */
export function linkRepositoryModules(dir: string): void {
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
}

/** Errors as a report, one per line: `page:line:column message`. */
export function formatErrors(errors: readonly SnippetError[]): string {
  return errors.map((e) => `${e.page}:${e.line}:${e.column} ${e.message}`).join('\n');
}
