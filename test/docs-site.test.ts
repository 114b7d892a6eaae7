import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, extname, join, normalize, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserAvailable, launchBrowser } from '../packages/web/test/browser.js';
import { pages, ROOT } from './snippets.js';

// The documentation site as `npm run docs` builds it from docs/ (VitePress, with TypeDoc's reference):
// every page there, every link between its pages and every anchor resolving, and the pages working in a
// real browser. The TypeScript of its pages is compiled by docs.test.ts.
const DIST = join(ROOT, 'docs', '.vitepress', 'dist');
/** Where the site is served from (the config's `base`: the repository's GitHub Pages). */
const BASE = '/floodgate/';

/** Every file under `dir`, relative to it. */
function walk(dir: string, under = ''): string[] {
  return readdirSync(join(dir, under), { withFileTypes: true }).flatMap((entry) => {
    const path = join(under, entry.name);
    return entry.isDirectory() ? walk(dir, path) : [path];
  });
}

let html: string[] = [];

beforeAll(() => {
  // VitePress and TypeDoc on a busy two-core machine: minutes.
  execFileSync('npm', ['run', 'docs'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  html = walk(DIST).filter((file) => file.endsWith('.html'));
}, 900_000);

/** The file a link leads to, and its anchor, or undefined for a link out of the site. */
function target(page: string, href: string): { file: string; anchor: string | undefined } | undefined {
  if (/^[a-z]+:/i.test(href) || href.startsWith('//')) return undefined;
  const [path = '', anchor] = href.split('#');
  let file: string;
  if (path === '') file = page;
  else if (path.startsWith('/')) {
    if (!path.startsWith(BASE)) return { file: `(outside the base) ${path}`, anchor };
    file = path.slice(BASE.length);
  } else file = normalize(join(dirname(page), path));
  if (file === '' || file.endsWith('/')) file = `${file}index.html`;
  return { file: decodeURIComponent(file), anchor: anchor === undefined ? undefined : decodeURIComponent(anchor) };
}

describe('the docs site', () => {
  it('has a page for each guide in docs/, the new guides and the generated reference', () => {
    const guides = pages()
      .filter((page) => page.startsWith('docs/'))
      .map((page) => relative('docs', page).replace(/\.md$/, '.html'));
    expect(guides).toEqual(
      expect.arrayContaining([
        'choose-an-algorithm.html',
        'choose-a-store.html',
        'deploy.html',
        'migrating-from-express-rate-limit.html',
        'migrating-from-rate-limiter-flexible.html',
        'migrating-from-nestjs-throttler.html',
        'migrating-from-envoy-ratelimit.html',
      ]),
    );
    expect(html.filter((file) => guides.includes(file)).sort()).toEqual(guides.sort());
    // TypeDoc's pages: one per module, and one per exported function, type and interface.
    const reference = html.filter((file) => file.startsWith('reference/'));
    expect(reference).toEqual(
      expect.arrayContaining(['reference/index.html', 'reference/index/functions/createLimiter.html']),
    );
    expect(reference.length).toBeGreaterThan(100);
  });

  it('has no broken internal link or anchor', () => {
    const ids = new Map<string, Set<string>>();
    const idsOf = (file: string): Set<string> => {
      let found = ids.get(file);
      if (found === undefined) {
        const text = readFileSync(join(DIST, file), 'utf8');
        found = new Set([...text.matchAll(/\sid="([^"]+)"/g)].map((m) => decodeURIComponent(m[1] as string)));
        ids.set(file, found);
      }
      return found;
    };
    const broken: string[] = [];
    let links = 0;
    for (const page of html) {
      const text = readFileSync(join(DIST, page), 'utf8');
      for (const match of text.matchAll(/<a\s[^>]*href="([^"]*)"/g)) {
        const href = (match[1] as string).replaceAll('&amp;', '&');
        const to = target(page, href);
        if (to === undefined) continue;
        links++;
        if (!existsSync(join(DIST, to.file))) broken.push(`${page}: ${href} (no ${to.file})`);
        else if (to.anchor !== undefined && to.anchor !== '' && to.file.endsWith('.html')) {
          if (!idsOf(to.file).has(to.anchor)) broken.push(`${page}: ${href} (no #${to.anchor} in ${to.file})`);
        }
      }
    }
    expect(links).toBeGreaterThan(1000);
    expect(broken).toEqual([]);
  });

  it("the packages' READMEs link to what npm users can reach: absolute URLs, or files the package ships", () => {
    for (const dir of ['floodgate', 'service']) {
      const text = readFileSync(join(ROOT, 'packages', dir, 'README.md'), 'utf8');
      const manifest = JSON.parse(readFileSync(join(ROOT, 'packages', dir, 'package.json'), 'utf8')) as {
        files: string[];
        homepage: string;
        repository: { url: string; directory: string };
        bugs: { url: string };
      };
      expect(manifest.homepage).toBe('https://floodgate-dev.github.io/floodgate/');
      expect(manifest.repository).toEqual({
        type: 'git',
        url: 'git+https://github.com/floodgate-dev/floodgate.git',
        directory: `packages/${dir}`,
      });
      expect(manifest.bugs.url).toBe('https://github.com/floodgate-dev/floodgate/issues');
      const relativeLinks = [...text.matchAll(/\]\(([^)]+)\)/g)]
        .map((m) => m[1] as string)
        .filter((href) => !/^https?:\/\//.test(href) && !href.startsWith('#'));
      for (const href of relativeLinks) {
        const shipped = manifest.files.some((f) => !f.startsWith('!') && (href === f || href.startsWith(`${f}/`)));
        expect(shipped, `packages/${dir}/README.md links to ${href}, which the package does not ship`).toBe(true);
      }
      // Site links lead to pages the site has.
      for (const m of text.matchAll(/https:\/\/floodgate-dev\.github\.io\/floodgate\/([^)\s>#]*)/g)) {
        const path = m[1] === '' || (m[1] as string).endsWith('/') ? `${m[1]}index.html` : (m[1] as string);
        expect(existsSync(join(DIST, path)), `packages/${dir}/README.md: ${m[0]}`).toBe(true);
      }
    }
  });
});

describe.runIf(browserAvailable())('the docs site in Chromium', () => {
  let server: Server;
  let origin = '';

  beforeAll(async () => {
    const types: Record<string, string> = {
      '.html': 'text/html',
      '.js': 'text/javascript',
      '.css': 'text/css',
      '.svg': 'image/svg+xml',
      '.json': 'application/json',
      '.woff2': 'font/woff2',
    };
    server = createServer((request, response) => {
      const path = decodeURIComponent(new URL(request.url ?? '/', 'http://x').pathname);
      let file = path.startsWith(BASE) ? path.slice(BASE.length) : '\0';
      if (file === '' || file.endsWith('/')) file += 'index.html';
      const full = normalize(join(DIST, file));
      if (!full.startsWith(DIST) || !existsSync(full)) {
        response.writeHead(404).end();
        return;
      }
      response.writeHead(200, { 'content-type': types[extname(full)] ?? 'application/octet-stream' });
      response.end(readFileSync(full));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server?.close(() => resolve())));

  it('shows the home page, a guide with its sidebar, navigates between pages, and logs no error', async () => {
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.on('console', (message) => {
        if (message.type() === 'error') errors.push(message.text());
      });
      page.on('response', (response) => {
        if (response.status() >= 400) errors.push(`${response.status()} ${response.url()}`);
      });
      await page.goto(`${origin}${BASE}`);
      await page.getByRole('link', { name: 'Get started' }).first().click();
      await page.waitForURL(/getting-started\.html$/);
      await page.locator('h1', { hasText: 'Getting started' }).first().waitFor();
      // The sidebar leads to every guide; following it is a client-side navigation.
      await page.locator('.VPSidebar').getByRole('link', { name: 'Deploy the service' }).click();
      await page.waitForURL(/deploy\.html$/);
      // The URL changes before the page's content does: wait for the new heading.
      await page.locator('h1', { hasText: 'Deploy the service' }).first().waitFor();
      expect(await page.locator('pre code').count()).toBeGreaterThan(3);
      // A guide's link to another guide, and the generated reference.
      await page.goto(`${origin}${BASE}choose-a-store.html`);
      await page.locator('.vp-doc a[href*="failure-modes"]').first().click();
      await page.waitForURL(/failure-modes\.html/);
      await page.goto(`${origin}${BASE}reference/index/functions/createLimiter.html`);
      expect(await page.locator('h1').first().textContent()).toContain('createLimiter');
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 120_000);
});
