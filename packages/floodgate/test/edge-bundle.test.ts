import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { createContext, runInContext } from 'node:vm';
import { build } from 'esbuild';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { pureSha256Base64url, sha256Base64url } from '../src/sha256.js';

// The core (`floodgate`) and the model (`floodgate/model`) run where there is no Node: Cloudflare
// Workers, Vercel Edge, browsers. Bundled for a neutral platform, where any import of a Node built-in
// fails the build, and run in a context that has only what those runtimes have: no process, no
// require, no Buffer.

const entry = (path: string) => fileURLToPath(new URL(`../src/${path}`, import.meta.url));

async function bundle(path: string): Promise<string> {
  const result = await build({
    entryPoints: [entry(path)],
    bundle: true,
    write: false,
    platform: 'neutral',
    format: 'iife',
    globalName: 'floodgate',
    logLevel: 'silent',
  });
  return (result.outputFiles[0] as { text: string }).text;
}

/** A context with the globals of an edge runtime, and none of Node's. */
function edgeContext(): Record<string, unknown> {
  const logs: unknown[] = [];
  return createContext({
    TextEncoder,
    URL,
    // Web Crypto's getRandomValues, which every edge runtime has (the memory store's summary seeds its hash).
    crypto: {
      getRandomValues: <T extends ArrayBufferView>(array: T): T => globalThis.crypto.getRandomValues(array as never),
    },
    performance: { now: () => performance.now(), timeOrigin: performance.timeOrigin },
    setTimeout,
    clearTimeout,
    queueMicrotask,
    console: { warn: (...args: unknown[]) => logs.push(args), log: (...args: unknown[]) => logs.push(args) },
    logs,
  });
}

describe('the core without Node built-ins', () => {
  it('bundles for a neutral platform and decides in a context without process or require', async () => {
    const code = await bundle('index.ts');
    expect(code).not.toMatch(/\brequire\(|from ?["']node:/);
    const context = edgeContext();
    runInContext(code, context);
    expect(runInContext('typeof process + typeof require + typeof Buffer', context)).toBe(
      'undefinedundefinedundefined',
    );
    const long = 'k'.repeat(300);
    const result = await runInContext(
      `(async () => {
        const { createLimiter, fixedWindow } = floodgate;
        const limiter = createLimiter({ policies: fixedWindow({ limit: 2, windowMs: 60000 }) });
        const out = [];
        for (let i = 0; i < 3; i++) out.push((await limiter.limit('client')).allowed);
        for (let i = 0; i < 3; i++) out.push(limiter.limitSync(${JSON.stringify(long)}).allowed);
        out.push((await limiter.status('client')).allowed);
        return out;
      })()`,
      context,
    );
    expect(result).toEqual([true, true, false, true, true, false, false]);
  });

  it('bundles the model the same way', async () => {
    const code = await bundle('model/index.ts');
    const context = edgeContext();
    runInContext(code, context);
    expect(runInContext('typeof floodgate.compilePolicy', context)).toBe('function');
  });

  it("hashes long keys as Node's crypto does, in plain code", () => {
    const cases = [
      '',
      'abc',
      'k'.repeat(55),
      'k'.repeat(56),
      'k'.repeat(64),
      'é€😀'.repeat(100),
      '\ud800 lone',
      'x'.repeat(70_000),
    ];
    for (const text of cases) {
      const expected = createHash('sha256').update(text).digest('base64url');
      expect(pureSha256Base64url(text)).toBe(expected);
      expect(sha256Base64url(text)).toBe(expected);
    }
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 600 }), (text) => {
        expect(pureSha256Base64url(text)).toBe(createHash('sha256').update(text).digest('base64url'));
      }),
      { numRuns: 100 },
    );
  });
});
