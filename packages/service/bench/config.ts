// Time and peak memory of checking and loading a large config, each size in a fresh process:
//
//   npm run bench:config       (builds, then runs this file)
//
// Configs of BENCH_RULES rules (default 5000,14000,29000: up to the 2 MiB bound) are written one key
// per line, about 70 bytes a rule, each rule naming a shared policy. For each: `floodgate check-config`
// (the built CLI's main(), in a child process that reports its own peak RSS and CPU time), then the
// service started on that file (HTTP on a free port, no gRPC) and reloaded with one rule changed, and
// a minute of live-stats samples taken at once (the service samples every second, keeping 61).
// On a busy machine wall times swing with what else runs; CPU time and peak RSS stay put. BENCH_DIST
// points at another build's dist folder, to compare with an earlier version.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SIZES = (process.env.BENCH_RULES ?? '5000,14000,29000').split(',').map(Number);
const DIST = process.env.BENCH_DIST ?? fileURLToPath(new URL('../dist/', import.meta.url));

function config(rules: number, variant = ''): string {
  let text =
    'policies:\n  per-user: { algorithm: gcra, limit: 10, periodMs: 60000 }\ndomains:\n  - domain: api\n    descriptors:\n';
  for (let i = 0; i < rules; i++) {
    text += `      - key: user\n        value: "u${String(i).padStart(5, '0')}${i === 0 ? variant : ''}"\n        policies: [per-user]\n`;
  }
  return text;
}

/** Runs `code` (an ES module body) in a fresh Node process; it prints one JSON line. */
function child(code: string): Record<string, number | string> {
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', code], { encoding: 'utf8' });
  if (run.status !== 0)
    throw new Error(`child failed (${run.signal ?? run.status}): ${run.error?.message ?? run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').pop() as string) as Record<string, number | string>;
}

const USAGE = `const u = process.resourceUsage();`;
const REPORT = `maxRssMb: Math.round(u.maxRSS / 1024), cpuS: Number(((u.userCPUTime + u.systemCPUTime) / 1e6).toFixed(2))`;

const dir = mkdtempSync(join(tmpdir(), 'floodgate-bench-config-'));
try {
  console.log('rules   bytes      check-config            start                  reload     samples+61');
  for (const rules of SIZES) {
    const file = join(dir, `rules-${rules}.yaml`);
    const text = config(rules);
    writeFileSync(file, text);
    const changed = join(dir, `rules-${rules}-changed.yaml`);
    writeFileSync(changed, config(rules, '-changed'));
    const check = child(`
      import { main } from ${JSON.stringify(join(DIST, 'cli.js'))};
      const t = performance.now();
      const code = await main(['check-config', ${JSON.stringify(file)}], { out() {}, err: (s) => process.stderr.write(s), env: {} });
      const ms = Math.round(performance.now() - t); ${USAGE}
      console.log(JSON.stringify({ code, ms, ${REPORT} }));`);
    const serve = child(`
      import { copyFileSync } from 'node:fs';
      import { startService } from ${JSON.stringify(join(DIST, 'service.js'))};
      let t = performance.now();
      const service = await startService({ configFile: ${JSON.stringify(file)}, httpPort: 0, grpcPort: false, watch: false, logger: 'silent' });
      const startMs = Math.round(performance.now() - t);
      copyFileSync(${JSON.stringify(changed)}, ${JSON.stringify(file)});
      t = performance.now();
      const reloaded = service.reload();
      const reloadMs = Math.round(performance.now() - t);
      const before = process.memoryUsage().heapUsed;
      for (let i = 0; i < 61; i++) service.stats.sample(Date.now());
      const samplesMb = Math.round((process.memoryUsage().heapUsed - before) / 1e6);
      await service.close(); ${USAGE}
      console.log(JSON.stringify({ startMs, reloadMs, ok: String(reloaded.ok), samplesMb, ${REPORT} }));`);
    console.log(
      `${String(rules).padEnd(7)} ${String(text.length).padEnd(10)} ` +
        `${`${check.ms} ms ${check.cpuS} s CPU ${check.maxRssMb} MB`.padEnd(23)} ` +
        `${`${serve.startMs} ms, peak ${serve.maxRssMb} MB`.padEnd(22)} ` +
        `${`${serve.reloadMs} ms`.padEnd(10)} ${serve.samplesMb} MB`,
    );
    if (check.code !== 0 || serve.ok !== 'true') console.log('  (the config was refused)');
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
