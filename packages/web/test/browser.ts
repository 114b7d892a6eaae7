import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium, type Page } from 'playwright-core';
import { build } from 'vite';
import { type Service, type ServiceOptions, startService } from '../../service/src/service.js';

/** Debian's Chromium: `.ci/run` installs it (`apt-get install -y chromium`). */
export const CHROMIUM = '/usr/bin/chromium';

/** Where screenshots go: gitignored, kept by CI as test artifacts. */
export const ARTIFACTS = fileURLToPath(new URL('../../../.artifacts/web/', import.meta.url));

/**
 * True when the browser is there. Without it the end-to-end tests fail under CI (a missing browser must
 * not pass as green) and are skipped loudly elsewhere.
 */
export function browserAvailable(): boolean {
  if (existsSync(CHROMIUM)) return true;
  const message = `${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium)`;
  if (process.env.CI === 'true') throw new Error(message);
  console.warn(`\n*** SKIPPING the web page's end-to-end tests: ${message} ***\n`);
  return false;
}

/** Launches headless Chromium with no network of its own (no updates, no sync, no QUIC). */
export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** Builds the page with Vite into a fresh temporary folder; returns it and a function removing it. */
export async function buildPage(): Promise<{ dir: string; remove: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-web-'));
  await build({
    configFile: fileURLToPath(new URL('../vite.config.ts', import.meta.url)),
    logLevel: 'warn',
    build: { outDir: dir, emptyOutDir: true },
  });
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The path of a screenshot under {@link ARTIFACTS}, creating the folder. */
export function artifact(name: string): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return join(ARTIFACTS, name);
}

/** A freshly built page served by a service on a free port, and a browser tab at 1366 × 768 (a laptop). */
export interface PageSession {
  readonly service: Service;
  readonly browser: Browser;
  readonly page: Page;
  /** The page's address. */
  readonly url: string;
  /** Errors thrown in the page so far. */
  readonly errors: string[];
  close(): Promise<void>;
}

/**
 * Builds the page, serves it with `floodgate serve`'s code at `/` under `config` (and `options`, such as
 * an admin token), and opens a tab.
 */
export async function openPage(config: string, options: Pick<ServiceOptions, 'admin'> = {}): Promise<PageSession> {
  const built = await buildPage();
  const opened: { service?: Service; browser?: Browser } = {};
  const close = async () => {
    await opened.browser?.close();
    await opened.service?.close();
    built.remove();
  };
  try {
    opened.service = await startService({
      config,
      store: 'memory',
      httpPort: 0,
      grpcPort: false,
      logger: 'silent',
      staticDir: built.dir,
      ...options,
    });
    opened.browser = await launchBrowser();
    const page = await opened.browser.newPage({ viewport: { width: 1366, height: 768 } });
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    const { service, browser } = opened;
    return { service, browser, page, url: `http://127.0.0.1:${service.httpPort}/`, errors, close };
  } catch (error) {
    await close();
    throw error;
  }
}
