// Stalled TLS handshakes against the gRPC port: the service's RSS while one client opens many connections
// that stop halfway through their ClientHello, and how long the service takes to cut them.
//
//   node --import tsx packages/service/bench/tls-handshakes.ts            # the default limit (512)
//   MAX_HANDSHAKES=1000000000 node --import tsx packages/service/bench/tls-handshakes.ts   # no limit
//
// CONNECTIONS (5000) and HANDSHAKE_TIMEOUT_MS (10000) override. The service runs in a child process
// (its RSS is its own), on certificates made with openssl in a temporary folder.
import { execFileSync, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket, connect as tcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { fileURLToPath } from 'node:url';

const CONFIG = `domains:
  - domain: api
    descriptors:
      - key: a
        policies: [{ algorithm: gcra, limit: 10, periodMs: 1000 }]
`;

type Message = { port: number } | { rssMb: number };

if (process.argv[2] === 'service') {
  const { startService } = await import('../src/service.js');
  const dir = process.argv[3] as string;
  const maxHandshakes = process.env.MAX_HANDSHAKES;
  const service = await startService({
    config: CONFIG,
    httpPort: false,
    grpcPort: 0,
    logger: 'silent',
    grpcTls: {
      certFile: join(dir, 'cert.pem'),
      keyFile: join(dir, 'key.pem'),
      handshakeTimeoutMs: Number(process.env.HANDSHAKE_TIMEOUT_MS ?? 10_000),
      ...(maxHandshakes === undefined ? {} : { maxHandshakes: Number(maxHandshakes) }),
    },
  });
  let peak = process.memoryUsage().rss;
  const sample = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 50);
  process.send?.({ port: service.grpcPort } satisfies Message);
  process.on('message', () => process.send?.({ rssMb: Math.round(peak / 1e6) } satisfies Message));
  process.on('disconnect', () => {
    clearInterval(sample);
    void service.close().then(() => process.exit(0));
  });
} else {
  const connections = Number(process.env.CONNECTIONS ?? 5000);
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-tls-bench-'));
  execFileSync(
    'openssl',
    [
      ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
      ...['-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '1', '-subj', '/CN=localhost'],
    ],
    { stdio: 'ignore' },
  );
  const child = fork(fileURLToPath(import.meta.url), ['service', dir], { execArgv: ['--import', 'tsx'] });
  const next = () => new Promise<Message>((resolve) => child.once('message', (m) => resolve(m as Message)));
  const { port } = (await next()) as { port: number };
  child.send('rss');
  const baseline = ((await next()) as { rssMb: number }).rssMb;

  // A real client's first flight, cut in half.
  const hello = await new Promise<Buffer>((resolve) => {
    const capture = createServer((socket) =>
      socket.once('data', (chunk: Buffer) => {
        resolve(chunk);
        socket.destroy();
        capture.close();
      }),
    );
    capture.listen(0, '127.0.0.1', () => {
      const { port: capturePort } = capture.address() as { port: number };
      tlsConnect({ host: '127.0.0.1', port: capturePort, servername: 'localhost', ALPNProtocols: ['h2'] }).on(
        'error',
        () => {},
      );
    });
  });
  const half = hello.subarray(0, hello.length >> 1);
  const closedAfter: number[] = [];
  const sockets: Socket[] = [];
  const started = performance.now();
  for (let i = 0; i < connections; i++) {
    const opened = performance.now();
    const socket = tcp({ host: '127.0.0.1', port });
    socket.on('connect', () => socket.write(half));
    socket.on('error', () => {});
    socket.on('close', () => closedAfter.push(performance.now() - opened));
    sockets.push(socket);
    // Batches, so the listen backlog does not overflow into SYN retries.
    if (i % 200 === 199) await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const openedInMs = performance.now() - started;
  const deadline = performance.now() + 60_000;
  while (closedAfter.length < connections && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  child.send('rss');
  const peak = ((await next()) as { rssMb: number }).rssMb;
  closedAfter.sort((a, b) => a - b);
  const at = (q: number) =>
    Math.round(closedAfter[Math.min(closedAfter.length - 1, Math.floor(q * closedAfter.length))] ?? 0);
  console.log(
    JSON.stringify({
      maxHandshakes: process.env.MAX_HANDSHAKES ?? 'default (512)',
      connections,
      openedInMs: Math.round(openedInMs),
      rssBaselineMb: baseline,
      rssPeakMb: peak,
      cutByTheService: closedAfter.length,
      closedAfterMs: { min: at(0), median: at(0.5), max: at(1) },
    }),
  );
  for (const socket of sockets) socket.destroy();
  child.disconnect();
  rmSync(dir, { recursive: true, force: true });
}
