import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

// Without `@opentelemetry/api` (an optional peer), floodgate decides as always: a process whose module
// resolution refuses the package builds limiters, permits and middleware and reports no telemetry.

const dir = mkdtempSync(join(tmpdir(), 'floodgate-no-otel-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const src = (path: string) => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

describe('without @opentelemetry/api installed', () => {
  it('decides, waits and grants permits, and says telemetry is off', () => {
    writeFileSync(
      join(dir, 'refuse.mjs'),
      `export async function resolve(specifier, context, next) {
  if (specifier === '@opentelemetry/api') throw Object.assign(new Error('Cannot find package'), { code: 'ERR_MODULE_NOT_FOUND' });
  return next(specifier, context);
}\n`,
    );
    writeFileSync(
      join(dir, 'hook.mjs'),
      `import { register } from 'node:module';\nregister(${JSON.stringify(new URL(`file://${join(dir, 'refuse.mjs')}`).href)});\n`,
    );
    writeFileSync(
      join(dir, 'main.mts'),
      `import { createServer } from 'node:http';
import { concurrency, createLimiter, createPermits, fixedWindow, memoryPermitStore, telemetryReady } from ${JSON.stringify(src('index.ts'))};
import { rateLimit } from ${JSON.stringify(src('http/node.ts'))};
let refused = false;
try { await import('@opentelemetry/api'); } catch { refused = true; }
const limiter = createLimiter({ policies: fixedWindow({ limit: 1, windowMs: 60_000 }) });
const out = [refused, await telemetryReady(), (await limiter.limit('k')).allowed, limiter.limitSync('k').allowed];
out.push((await limiter.acquire('other', { timeoutMs: 10 })).allowed);
const permits = createPermits({ store: memoryPermitStore(), policy: concurrency({ limit: 1, leaseMs: 1000 }) });
const p = await permits.limit('k');
out.push(p.allowed, await p.permit?.release());
const limit = rateLimit({ policies: fixedWindow({ limit: 1, windowMs: 60_000 }), key: () => 'one' });
const server = createServer(limit.wrap((_req, res) => res.end('ok'))).listen(0, '127.0.0.1');
await new Promise((done) => server.once('listening', done));
const url = 'http://127.0.0.1:' + server.address().port;
out.push((await fetch(url)).status, (await fetch(url)).status);
server.close();
console.log(JSON.stringify(out));
`,
    );
    const output = execFileSync(
      process.execPath,
      ['--no-warnings', '--import', 'tsx', '--import', join(dir, 'hook.mjs'), join(dir, 'main.mts')],
      { encoding: 'utf8', cwd: fileURLToPath(new URL('../..', import.meta.url)), timeout: 60_000 },
    );
    expect(JSON.parse(output)).toEqual([true, false, true, false, true, true, true, 200, 429]);
  }, 90_000);
});
