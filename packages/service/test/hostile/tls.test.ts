import { connect as connectTcp, createServer, type Socket } from 'node:net';
import { connect as connectTls } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Service, startService } from '../../src/service.js';
import { TEST_CONFIG } from '../helpers.js';
import { makePki, type TestPki } from '../tls-certs.js';

// What a client controls on a TLS port before any HTTP is spoken: whether it speaks TLS at all, how far
// it takes the handshake and how fast, the protocols it offers, and renegotiation (TLS 1.2). Each is cut
// by the server within a bound, counted, and decides nothing.

const HANDSHAKE_TIMEOUT_MS = 400;

let pki: TestPki;
let service: Service;
const sockets: Socket[] = [];

beforeAll(async () => {
  pki = makePki();
  const tls = { certFile: pki.server.cert, keyFile: pki.server.key, handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS };
  service = await startService({
    config: TEST_CONFIG,
    store: 'memory',
    httpPort: 0,
    grpcPort: 0,
    logger: process.env.LOGLEVEL ?? 'silent',
    drainTimeoutMs: 1000,
    grpcTls: tls,
    httpTls: tls,
    watch: false,
  });
});
afterEach(() => {
  for (const socket of sockets.splice(0)) socket.destroy();
});
afterAll(async () => {
  await service?.close();
  pki?.remove();
});

interface Outcome {
  /** How long the server took to close the connection, ms. */
  closedAfterMs: number;
  /** Bytes the server sent. */
  received: Buffer;
}

/** Connects, sends `bytes` (if any), and waits for the server to close (failing after `limitMs`). */
function raw(port: number, bytes: Buffer | undefined, limitMs: number): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = connectTcp({ host: '127.0.0.1', port });
    sockets.push(socket);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => reject(new Error(`the server kept the connection past ${limitMs} ms`)), limitMs);
    socket.on('connect', () => {
      if (bytes !== undefined) socket.write(bytes);
    });
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ closedAfterMs: performance.now() - started, received: Buffer.concat(chunks) });
    });
  });
}

/** The first bytes a real TLS client sends: its ClientHello, captured from node:tls. */
function clientHello(): Promise<Buffer> {
  return new Promise((resolve) => {
    const capture = createServer((socket) => {
      socket.once('data', (chunk: Buffer) => {
        resolve(chunk);
        socket.destroy();
        capture.close();
      });
    });
    capture.listen(0, '127.0.0.1', () => {
      const address = capture.address() as { port: number };
      const client = connectTls({
        host: '127.0.0.1',
        port: address.port,
        servername: 'localhost',
        ALPNProtocols: ['h2'],
      });
      client.on('error', () => {});
    });
  });
}

async function refusals(reason: string, api = 'grpc'): Promise<number> {
  const text = await service.metrics.registry.metrics();
  const match = new RegExp(`floodgate_tls_refused_connections_total\\{api="${api}",reason="${reason}"\\} (\\d+)`).exec(
    text,
  );
  return Number(match?.[1] ?? 0);
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

describe('hostile TLS clients', () => {
  it('a cleartext HTTP/2 client on the TLS gRPC port is cut at once, and hears no HTTP/2', async () => {
    const before = await refusals('handshake');
    const outcome = await raw(service.grpcPort, PREFACE, 5000);
    expect(outcome.closedAfterMs).toBeLessThan(HANDSHAKE_TIMEOUT_MS);
    // At most a TLS alert (record type 21), never an HTTP/2 frame.
    if (outcome.received.length > 0) expect(outcome.received[0]).toBe(21);
    expect(await refusals('handshake')).toBe(before + 1);
  });

  it('a cleartext HTTP/1.1 request on the HTTPS port is cut at once, unanswered', async () => {
    const outcome = await raw(service.httpPort, Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'), 5000);
    expect(outcome.closedAfterMs).toBeLessThan(HANDSHAKE_TIMEOUT_MS);
    expect(outcome.received.toString('latin1')).not.toContain('HTTP/1.1');
    expect(await refusals('handshake', 'http')).toBeGreaterThanOrEqual(1);
  });

  it('handshakes that never finish are cut at the handshake timeout: silent connections and half a ClientHello', async () => {
    const hello = await clientHello();
    expect(hello[0]).toBe(22); // a handshake record
    const before = await refusals('handshake_timeout');
    // Scaled down from a flood: 50 connections that say nothing, 50 that stop halfway through their hello.
    const outcomes = await Promise.all([
      ...Array.from({ length: 50 }, () => raw(service.grpcPort, undefined, 10_000)),
      ...Array.from({ length: 50 }, () => raw(service.grpcPort, hello.subarray(0, hello.length >> 1), 10_000)),
    ]);
    for (const outcome of outcomes) {
      expect(outcome.closedAfterMs).toBeGreaterThanOrEqual(HANDSHAKE_TIMEOUT_MS - 50);
      // A wide margin: the bound is the timeout, not the machine's speed.
      expect(outcome.closedAfterMs).toBeLessThan(HANDSHAKE_TIMEOUT_MS + 4000);
      expect(outcome.received.length).toBe(0);
    }
    expect(await refusals('handshake_timeout')).toBe(before + 100);
  });

  it('stalled handshakes past maxHandshakes end the oldest, so they cannot keep an honest client out', async () => {
    const tls = { certFile: pki.server.cert, keyFile: pki.server.key, handshakeTimeoutMs: 5000, maxHandshakes: 20 };
    const small = await startService({
      config: TEST_CONFIG,
      store: 'memory',
      httpPort: false,
      grpcPort: 0,
      logger: process.env.LOGLEVEL ?? 'silent',
      drainTimeoutMs: 500,
      grpcTls: tls,
      watch: false,
    });
    try {
      const hello = await clientHello();
      const half = hello.subarray(0, hello.length >> 1);
      // 30 stalled handshakes, one after the other: the first 10 are ended as the last 10 arrive.
      const stalled: Promise<Outcome>[] = [];
      for (let i = 0; i < 30; i++) {
        stalled.push(raw(small.grpcPort, half, 10_000));
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      const first = await Promise.all(stalled.slice(0, 10));
      for (const outcome of first) expect(outcome.closedAfterMs).toBeLessThan(3000);
      // An honest client still gets through, ending the oldest stalled handshake in its turn.
      const honest = await new Promise<string | false | null>((resolve, reject) => {
        const socket = connectTls({
          host: '127.0.0.1',
          port: small.grpcPort,
          ca: pki.read(pki.ca.cert),
          servername: 'localhost',
          ALPNProtocols: ['h2'],
        });
        sockets.push(socket);
        socket.on('secureConnect', () => resolve(socket.alpnProtocol));
        socket.on('error', reject);
      });
      expect(honest).toBe('h2');
      const text = await small.metrics.registry.metrics();
      expect(text).toMatch(/floodgate_tls_refused_connections_total\{api="grpc",reason="handshake_limit"\} 11/);
      // The 19 stalled ones left are cut at their timeout, not before.
      const rest = await Promise.all(stalled.slice(11));
      for (const outcome of rest) expect(outcome.closedAfterMs).toBeGreaterThanOrEqual(4900);
    } finally {
      await small.close();
    }
  });

  it('a stalled handshake does not hold shutdown: it is cut when the service closes', async () => {
    const tls = { certFile: pki.server.cert, keyFile: pki.server.key, handshakeTimeoutMs: 10_000 };
    const closing = await startService({
      config: TEST_CONFIG,
      store: 'memory',
      httpPort: 0,
      grpcPort: 0,
      logger: process.env.LOGLEVEL ?? 'silent',
      drainTimeoutMs: 5000,
      grpcTls: tls,
      httpTls: tls,
      watch: false,
    });
    const hello = await clientHello();
    const half = hello.subarray(0, hello.length >> 1);
    const stalled = [raw(closing.grpcPort, half, 10_000), raw(closing.httpPort, half, 10_000)];
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = performance.now();
    await closing.close();
    // Without cutting them, closing waited for the drain timeout (5 s) with these two open.
    expect(performance.now() - started).toBeLessThan(2500);
    for (const outcome of await Promise.all(stalled)) expect(outcome.closedAfterMs).toBeLessThan(2500);
  });

  it('a client that offers no ALPN and sends the HTTP/2 preface anyway is cut without an answer', async () => {
    const before = await refusals('alpn');
    const received = await new Promise<number>((resolve) => {
      let bytes = 0;
      const socket = connectTls({
        host: '127.0.0.1',
        port: service.grpcPort,
        ca: pki.read(pki.ca.cert),
        servername: 'localhost',
      });
      sockets.push(socket);
      socket.on('secureConnect', () => socket.write(PREFACE));
      socket.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
      socket.on('error', () => {});
      socket.on('close', () => resolve(bytes));
    });
    expect(received).toBe(0);
    expect(await refusals('alpn')).toBe(before + 1);
  });

  it('TLS 1.2 renegotiation is refused (the server answers no_renegotiation; without it the client got one in ms)', async () => {
    const outcome = await new Promise<string>((resolve) => {
      const socket = connectTls({
        host: '127.0.0.1',
        port: service.grpcPort,
        ca: pki.read(pki.ca.cert),
        servername: 'localhost',
        ALPNProtocols: ['h2'],
        maxVersion: 'TLSv1.2',
      });
      sockets.push(socket);
      const timer = setTimeout(() => resolve('not renegotiated'), 1500);
      socket.on('secureConnect', () => {
        expect(socket.getProtocol()).toBe('TLSv1.2');
        socket.renegotiate({}, (error) => {
          clearTimeout(timer);
          resolve(error === null ? 'renegotiated' : 'not renegotiated');
        });
      });
      socket.on('error', () => {});
      socket.resume();
    });
    expect(outcome).toBe('not renegotiated');
  });
});
