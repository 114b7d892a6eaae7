// The gRPC server under hostile HTTP/2 clients (python3-h2, see test/hostile/h2-attack.py), full size:
// for each attack, the service's RSS before and at most, the p99 of normal calls made during it
// (node:http2, 100 calls/s on a connection of their own), and how the attack's connections ended.
//
//   npm run build && node --import tsx packages/service/bench/h2-attacks.ts
//
// H2_ATTACK_CLI runs another build of the CLI (to measure an older version the same way); H2_ATTACKS
// picks attacks by name (comma-separated). Needs /usr/bin/python3 with python3-h2.
import { attack, measure, serve } from '../test/hostile/h2-harness.js';

const cli = process.env.H2_ATTACK_CLI;
const only = process.env.H2_ATTACKS?.split(',');

const attacks: Array<[string, string[], (port: number) => Promise<unknown>]> = [
  ['no attack (baseline), 10 s', [], () => new Promise((resolve) => setTimeout(() => resolve('-'), 10_000))],
  ['PING flood, 50 connections that never read, 10 s', [], (port) => attack('flood', port, 'ping', 50, 10)],
  ['SETTINGS flood, 50 connections that never read, 10 s', [], (port) => attack('flood', port, 'settings', 50, 10)],
  ['1,000 connections sending a frame 1 byte/s, 15 s', [], (port) => attack('slowloris', port, 1000, 15)],
  ['400 unfinished 240 kB header blocks, held 15 s', [], (port) => attack('headerblock', port, 400, 240, 15)],
  ['1,000 connections that open no stream, 40 s', [], (port) => attack('nostream', port, 1000, 40)],
  ['rapid reset, 200,000 streams on one connection', [], (port) => attack('rapidreset', port, 200_000)],
];

const rows: string[] = [];
for (const [name, args, run] of attacks) {
  if (only !== undefined && !only.some((o) => name.toLowerCase().includes(o.toLowerCase()))) continue;
  const running = await serve(args, cli);
  try {
    const m = await measure(running, () => run(running.grpcPort));
    const rssAfter = running.rssMb();
    rows.push(
      `| ${name} | ${m.rssBeforeMb.toFixed(0)} → ${m.rssMaxMb.toFixed(0)} (${rssAfter.toFixed(0)} after) | ${m.p99Ms.toFixed(1)} | ${m.failed}/${m.calls} | ${m.cpuSeconds.toFixed(1)} s in ${m.seconds.toFixed(0)} s | ${JSON.stringify(m.result)} |`,
    );
    console.log(rows.at(-1));
  } finally {
    await running.stop();
  }
}
console.log('\n| attack | service RSS MB | p99 of normal calls, ms | failed calls | service CPU | outcome |');
console.log('| --- | --- | ---: | ---: | ---: | --- |');
for (const row of rows) console.log(row);
