// The gRPC server under hostile HTTP/2 clients (python3-h2, see test/hostile/h2-attack.py), full size: each
// attack of the hostile suite's list (test/hostile/h2-attacks.ts) against our server and against the
// node:http2 reference running the same handler (test/hostile/node-h2-server.ts), one after the other in
// the same run, with normal calls (node:http2, 100 calls/s) measured during each.
//
//   npm run build && node --import tsx packages/service/bench/h2-attacks.ts
//
// H2_ATTACK_CLI runs another build of the CLI (to measure an older version the same way); H2_ATTACKS
// picks attacks by name (comma-separated). Needs /usr/bin/python3 with python3-h2.
import { ATTACKS, row, runAttack, worse } from '../test/hostile/h2-attacks.js';
import { type Running, serve, serveReference } from '../test/hostile/h2-harness.js';
import { makePki } from '../test/tls-certs.js';

const cli = process.env.H2_ATTACK_CLI;
const only = process.env.H2_ATTACKS?.split(',');
const pki = makePki();
const tls = pki.server;

const rows: string[] = [];
for (const attack of ATTACKS) {
  if (only !== undefined && !only.some((o) => attack.name.toLowerCase().includes(o.toLowerCase()))) continue;
  // Fresh servers for each attack, full size: what one leaves behind does not count against the next.
  const servers: Running[] = await Promise.all([
    serve(attack.tls === true ? ['--grpc-tls-cert', tls.cert, '--grpc-tls-key', tls.key] : [], cli),
    serveReference(attack.tls === true ? tls : undefined),
  ]);
  try {
    const ours = await runAttack(servers[0] as Running, attack, 'full');
    const reference = await runAttack(servers[1] as Running, attack, 'full');
    rows.push(row(attack, ours, reference));
    console.log(rows.at(-1), worse(attack, ours, reference).join('; '));
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}
pki.remove();
console.log('\n| attack | aims at | ours | node:http2 |\n| --- | --- | --- | --- |');
for (const line of rows) console.log(line);
