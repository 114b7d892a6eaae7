// A flood of fresh descriptor values through `floodgate serve`'s HTTP API (the built CLI, its own
// process, memory store), against keys at their limit: how many more calls do those keys get admitted
// once the flood has gone through?
//
//   npm run build && node --import tsx packages/service/bench/key-flood.ts
//
// Defaults are the full-size attack: maxKeys 1,000,000, 100 victims at 1 per hour, 2,000,000 fresh keys
// sent as 64 descriptors per request (8 requests in flight), then 2 calls per victim. An exact store
// admits 0 of those 200 calls. FLOOD_MAX_KEYS, FLOOD_KEYS, FLOOD_VICTIMS, FLOOD_WHEN_FULL and
// FLOOD_CLI (another build's dist/cli.js) change the run.
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnServe } from './serve.js';

const MAX_KEYS = Number(process.env.FLOOD_MAX_KEYS ?? 1_000_000);
const FLOOD = Number(process.env.FLOOD_KEYS ?? 2_000_000);
const VICTIMS = Number(process.env.FLOOD_VICTIMS ?? 100);
const WHEN_FULL = process.env.FLOOD_WHEN_FULL;
const PER_REQUEST = 64;
const IN_FLIGHT = 8;
const CLI = process.env.FLOOD_CLI ?? fileURLToPath(new URL('../dist/cli.js', import.meta.url));

const configFile = join(tmpdir(), `floodgate-key-flood-${randomBytes(4).toString('hex')}.yaml`);
writeFileSync(
  configFile,
  `domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: fixed-window, name: per-user, limit: 1, windowMs: 3600000, align: first-request }
      - key: session
        policies:
          - { algorithm: fixed-window, name: per-session, limit: 10, windowMs: 7200000, align: first-request }
`,
);

async function start(store: string): Promise<{ child: ChildProcess; base: string }> {
  const { child, log } = await spawnServe(CLI, [
    '--config',
    configFile,
    '--store',
    store,
    '--port',
    '0',
    '--no-grpc',
    '--no-watch',
  ]);
  return { child, base: `http://127.0.0.1:${log.http.split(':').pop()}` };
}

async function decide(base: string, descriptors: unknown[]): Promise<{ status: number; code: unknown }> {
  const response = await fetch(`${base}/v1/decide`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ domain: 'api', descriptors }),
  });
  const body = (await response.json()) as { code?: unknown };
  return { status: response.status, code: body.code };
}

const user = (v: number) => ({ entries: [{ key: 'user', value: `victim-${v}` }] });

async function main(): Promise<void> {
  const store = `memory:?maxKeys=${MAX_KEYS}${WHEN_FULL === undefined ? '' : `&whenFull=${WHEN_FULL}`}`;
  const { child, base } = await start(store);
  try {
    for (let v = 0; v < VICTIMS; v++) await decide(base, [user(v)]);
    const started = performance.now();
    let next = 0;
    const statuses = new Map<number, number>();
    const worker = async () => {
      while (next < FLOOD) {
        const first = next;
        next += PER_REQUEST;
        const descriptors = [];
        for (let i = first; i < Math.min(first + PER_REQUEST, FLOOD); i++) {
          descriptors.push({ entries: [{ key: 'session', value: `fresh-${i}` }] });
        }
        const { status } = await decide(base, descriptors);
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    const seconds = (performance.now() - started) / 1000;
    let admitted = 0;
    for (let v = 0; v < VICTIMS; v++) {
      for (let i = 0; i < 2; i++) if ((await decide(base, [user(v)])).code === 'OK') admitted++;
    }
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const pick = (name: string) => metrics.split('\n').find((l) => l.startsWith(`${name} `)) ?? `${name} -`;
    console.log(
      `${store}: ${VICTIMS} victims at 1 per hour, ${FLOOD} fresh keys in ${Math.ceil(FLOOD / PER_REQUEST)} requests of ${PER_REQUEST} ` +
        `(${seconds.toFixed(0)} s, statuses ${JSON.stringify([...statuses])}): ${admitted} more admissions of ${2 * VICTIMS} calls`,
    );
    for (const name of [
      'floodgate_memory_store_keys',
      'floodgate_memory_store_forced_evictions_total',
      'floodgate_memory_store_refused_keys_total',
    ]) {
      console.log(`  ${pick(name)}`);
    }
  } finally {
    child.kill('SIGTERM');
    rmSync(configFile, { force: true });
  }
}

await main();
