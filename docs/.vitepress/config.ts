import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitepress';

/** The repository on GitHub: links to files outside docs/ (examples, sources) lead there. */
export const REPOSITORY = 'https://github.com/floodgate-dev/floodgate';
/** Where the site is published (GitHub Pages of the repository). */
export const SITE = 'https://floodgate-dev.github.io/floodgate/';

/** Tags that stay HTML in a page's prose; anything else in angle brackets is a placeholder (`<key>`). */
const HTML_TAG =
  /^<\/?(a|abbr|b|br|code|del|details|div|em|i|img|kbd|p|pre|s|small|span|strong|sub|summary|sup|table|tbody|td|th|thead|tr|u)(\s[^>]*)?\/?>$/i;

/** GitHub's anchor of a heading: lower case, punctuation dropped (`_` and `-` kept), spaces as `-`. */
export function githubSlug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

const docs = fileURLToPath(new URL('..', import.meta.url));

/** The TypeDoc pages (generated into docs/reference by `npm run docs`), one sidebar entry per module. */
function referenceItems(): { text: string; link: string }[] {
  const dir = `${docs}reference`;
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => ({
      text: entry.name === 'index' ? 'floodgate' : `floodgate/${entry.name}`,
      link: `/reference/${entry.name}/`,
    }))
    .sort((a, b) => a.text.localeCompare(b.text));
}

export default defineConfig({
  title: 'floodgate',
  description: 'Exact, fast rate limiting for TypeScript: a library and a drop-in envoyproxy/ratelimit service.',
  base: '/floodgate/',
  head: [['link', { rel: 'icon', type: 'image/svg+xml', href: '/floodgate/favicon.svg' }]],
  cleanUrls: false,
  // Pages mention the local service (http://localhost:8080/); every other dead link fails the build.
  ignoreDeadLinks: 'localhostLinks',
  lastUpdated: false,
  // The pages are the repository's docs/ folder as GitHub shows it: the architecture notes for
  // contributors stay there too, reachable from the contributing section.
  srcExclude: ['**/README.md'],
  markdown: {
    // GitHub's heading anchors, so a link such as stores.md#postgresql-floodgatepostgres works on GitHub and
    // on the site alike.
    anchor: { slugify: githubSlug },
    config(md) {
      // The pages are read on GitHub too, where `<key>` in prose is text; here it would be a Vue element
      // (and break the build). Inline HTML stays HTML only for real HTML tags and comments.
      md.core.ruler.push('placeholders-as-text', (state) => {
        const keep = (html: string) => /^<!--/.test(html) || HTML_TAG.test(html);
        for (const token of state.tokens) {
          if (token.type === 'html_block' && !keep(token.content.trim())) {
            token.type = 'paragraph_text';
          }
          for (const child of token.children ?? []) {
            if (child.type === 'html_inline' && !keep(child.content)) child.type = 'text';
          }
        }
      });
      md.renderer.rules.paragraph_text = (tokens, idx) => `<p>${md.utils.escapeHtml(tokens[idx]?.content ?? '')}</p>`;
      // A page links to the repository's other files relatively (../packages/…), which works on GitHub;
      // on the site such a link leads to the file on GitHub instead.
      const open = md.renderer.rules.link_open;
      md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
        const token = tokens[idx];
        const href = token?.attrGet('href');
        if (token !== undefined && href?.startsWith('../')) {
          const path = href.replace(/^(\.\.\/)+/, '');
          const kind = path.endsWith('/') || !/\.[a-z]+($|#)/.test(path) ? 'tree' : 'blob';
          token.attrSet('href', `${REPOSITORY}/${kind}/main/${path}`);
        }
        return open === undefined ? self.renderToken(tokens, idx, options) : open(tokens, idx, options, env, self);
      };
    },
  },
  themeConfig: {
    nav: [
      { text: 'Guides', link: '/getting-started' },
      { text: 'API', link: '/api' },
      { text: 'Service', link: '/service' },
      { text: 'Reference', link: '/reference/' },
      { text: 'Changelog', link: `${REPOSITORY}/blob/main/CHANGELOG.md` },
    ],
    sidebar: [
      {
        text: 'Start',
        items: [
          { text: 'Getting started', link: '/getting-started' },
          { text: 'Choose an algorithm', link: '/choose-an-algorithm' },
          { text: 'Choose a store', link: '/choose-a-store' },
          { text: 'HTTP middleware', link: '/middleware' },
          { text: 'NestJS', link: '/nestjs' },
        ],
      },
      {
        text: 'Guides',
        items: [
          { text: 'Algorithms in depth', link: '/algorithms' },
          { text: 'Stores and atomicity', link: '/stores' },
          { text: 'Waiting instead of failing', link: '/waiting' },
          { text: 'Stored overrides', link: '/overrides' },
          { text: 'Concurrency limits', link: '/concurrency' },
          { text: 'Telemetry', link: '/telemetry' },
          { text: 'Failure modes', link: '/failure-modes' },
          { text: 'Headers and client keys', link: '/headers' },
          { text: 'Clocks', link: '/clocks' },
          { text: 'Security: hostile clients', link: '/security' },
        ],
      },
      {
        text: 'The service',
        items: [
          { text: 'floodgate serve', link: '/service' },
          { text: 'Deploy the service', link: '/deploy' },
          { text: 'The web page', link: '/web-page' },
        ],
      },
      {
        text: 'Migrating',
        items: [
          { text: 'From express-rate-limit', link: '/migrating-from-express-rate-limit' },
          { text: 'From rate-limiter-flexible', link: '/migrating-from-rate-limiter-flexible' },
          { text: 'From @nestjs/throttler', link: '/migrating-from-nestjs-throttler' },
          { text: 'From envoyproxy/ratelimit', link: '/migrating-from-envoy-ratelimit' },
        ],
      },
      {
        text: 'Reference',
        items: [
          { text: 'API by export', link: '/api' },
          { text: 'Generated (TypeDoc)', link: '/reference/', items: referenceItems() },
          { text: 'Benchmarks', link: '/benchmarks' },
          { text: 'Architecture', link: '/architecture' },
        ],
      },
    ],
    socialLinks: [{ icon: 'github', link: REPOSITORY }],
    search: { provider: 'local' },
    editLink: { pattern: `${REPOSITORY}/edit/main/docs/:path` },
  },
});
