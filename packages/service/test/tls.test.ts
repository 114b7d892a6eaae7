import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, existsSync, writeFileSync } from 'node:fs';
import { connect as connectHttp2 } from 'node:http2';
import { Agent, request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { connect as connectTls, type TLSSocket } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { credentials, type ServiceError, status } from '@grpc/grpc-js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT, main } from '../src/cli.js';
import { type Service, type ServiceOptions, startService } from '../src/service.js';
import { TlsError, type TlsOptions } from '../src/tls.js';
import { loadServiceProtos, TEST_CONFIG, waitFor } from './helpers.js';
import { makePki, type Pair, type TestPki } from './tls-certs.js';

// TLS and mutual TLS on both ports, with clients that do not share our code: @grpc/grpc-js, node:https,
// node:http2 and bare node:tls sockets. The certificates are made for the run by `openssl`.

let pki: TestPki;
const services: Service[] = [];
const cleanups: (() => void)[] = [];

beforeAll(() => {
  pki = makePki();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  await Promise.all(services.splice(0).map((s) => s.close()));
});
afterAll(() => pki?.remove());

async function start(options: Partial<ServiceOptions>): Promise<Service> {
  const service = await startService({
    config: TEST_CONFIG,
    store: 'memory',
    httpPort: 0,
    grpcPort: 0,
    logger: process.env.LOGLEVEL ?? 'silent',
    drainTimeoutMs: 1000,
    ...options,
  });
  services.push(service);
  return service;
}

function serverTls(extra: Partial<TlsOptions> = {}, pair: Pair = pki.server): TlsOptions {
  return { certFile: pair.cert, keyFile: pair.key, ...extra };
}

type Unary = (
  request: unknown,
  callback: (error: ServiceError | null, response: Record<string, unknown>) => void,
) => void;
interface Client {
  ShouldRateLimit: Unary;
  close(): void;
}

/** A grpc-js client of the rate limit service over TLS, trusting the test CA, with a client certificate or not. */
function grpcTlsClient(port: number, client?: Pair): Client {
  const { RateLimitService } = loadServiceProtos<Client>();
  const channel = credentials.createSsl(
    pki.read(pki.ca.cert),
    client === undefined ? null : pki.read(client.key),
    client === undefined ? null : pki.read(client.cert),
  );
  const rls = new RateLimitService(`127.0.0.1:${port}`, channel);
  cleanups.push(() => rls.close());
  return rls;
}

function shouldRateLimit(client: Client, address: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    client.ShouldRateLimit(
      { domain: 'api', descriptors: [{ entries: [{ key: 'remote_address', value: address }] }] },
      (error, response) => (error === null ? resolve(response) : reject(error)),
    );
  });
}

async function grpcCode(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
    return status.OK;
  } catch (error) {
    return (error as ServiceError).code;
  }
}

/** Four calls for one address: the test config admits three. */
async function fourCalls(client: Client, address: string): Promise<unknown[]> {
  const codes: unknown[] = [];
  for (let i = 0; i < 4; i++) codes.push((await shouldRateLimit(client, address)).overall_code);
  return codes;
}

interface Handshake {
  /** The handshake completed on the client's side. */
  secure: boolean;
  alpn: string | false | null | undefined;
  fingerprint256: string | undefined;
  /** Bytes the server sent after the handshake before the connection ended (HTTP/2 SETTINGS when admitted). */
  received: number;
  error: string | undefined;
  /** The server ended the connection (the client waits `waitMs` after its handshake before it ends it). */
  closedByServer: boolean;
}

/**
 * Opens a bare TLS connection, waits up to `waitMs` after the handshake for what the server sends (an
 * HTTP/2 server speaks first: SETTINGS), and reports what happened.
 */
function handshake(
  port: number,
  options: { alpn?: string[]; client?: Pair; waitMs?: number } = {},
): Promise<Handshake> {
  return new Promise((resolve) => {
    const result: Handshake = {
      secure: false,
      alpn: undefined,
      fingerprint256: undefined,
      received: 0,
      error: undefined,
      closedByServer: false,
    };
    const socket = connectTls({
      host: '127.0.0.1',
      port,
      servername: 'localhost',
      ca: pki.read(pki.ca.cert),
      ...(options.alpn === undefined ? {} : { ALPNProtocols: options.alpn }),
      ...(options.client === undefined
        ? {}
        : { cert: pki.read(options.client.cert), key: pki.read(options.client.key) }),
    });
    let timer: NodeJS.Timeout | undefined;
    let waited = false;
    const done = () => {
      clearTimeout(timer);
      result.closedByServer = !waited;
      socket.destroy();
      resolve(result);
    };
    socket.on('secureConnect', () => {
      result.secure = true;
      result.alpn = socket.alpnProtocol;
      result.fingerprint256 = socket.getPeerX509Certificate()?.fingerprint256;
      timer = setTimeout(() => {
        waited = true;
        done();
      }, options.waitMs ?? 300);
    });
    socket.on('data', (chunk: Buffer) => {
      result.received += chunk.length;
    });
    socket.on('error', (error: Error & { code?: string }) => {
      result.error = error.code ?? error.message;
    });
    socket.on('close', done);
  });
}

async function metricsText(service: Service): Promise<string> {
  return service.metrics.registry.metrics();
}

/** An HTTPS request; `agent` keeps a connection for several requests. */
function https(
  port: number,
  path: string,
  options: { body?: unknown; client?: Pair; agent?: Agent } = {},
): Promise<{ status: number; body: string; fingerprint256: string | undefined; socket: TLSSocket }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: options.body === undefined ? 'GET' : 'POST',
        servername: 'localhost',
        ca: pki.read(pki.ca.cert),
        headers: { 'content-type': 'application/json' },
        ...(options.client === undefined
          ? {}
          : { cert: pki.read(options.client.cert), key: pki.read(options.client.key) }),
        ...(options.agent === undefined ? { agent: false } : { agent: options.agent }),
      },
      (res) => {
        // Taken now: a kept-alive socket goes back to its agent once the response ends.
        const socket = res.socket as TLSSocket;
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            body,
            fingerprint256: socket.getPeerX509Certificate()?.fingerprint256,
            socket,
          });
        });
      },
    );
    req.on('error', reject);
    req.end(options.body === undefined ? undefined : JSON.stringify(options.body));
  });
}

async function httpsError(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
  throw new Error('expected the request to fail');
}

const decide = (address: string) => ({
  domain: 'api',
  descriptors: [{ entries: [{ key: 'remote_address', value: address }] }],
});

describe('gRPC over TLS', () => {
  it('answers ShouldRateLimit to grpc-js over TLS, counting exactly, with ALPN h2', async () => {
    const service = await start({ grpcTls: serverTls() });
    const client = grpcTlsClient(service.grpcPort);
    expect(await fourCalls(client, '192.0.2.1')).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    const shake = await handshake(service.grpcPort, { alpn: ['h2'] });
    expect(shake).toMatchObject({ secure: true, alpn: 'h2', fingerprint256: pki.fingerprint(pki.server.cert) });
    // The server speaks first on an admitted connection: its SETTINGS.
    expect(shake.received).toBeGreaterThan(0);
  });

  it('refuses a cleartext gRPC client on the TLS port', async () => {
    const service = await start({ grpcTls: serverTls() });
    const { RateLimitService } = loadServiceProtos<Client>();
    const plain = new RateLimitService(`127.0.0.1:${service.grpcPort}`, credentials.createInsecure());
    cleanups.push(() => plain.close());
    expect(await grpcCode(shouldRateLimit(plain, '192.0.2.1'))).toBe(status.UNAVAILABLE);
    expect(await metricsText(service)).toMatch(
      /floodgate_tls_refused_connections_total\{api="grpc",reason="handshake"\} [1-9]/,
    );
  });

  it('refuses a TLS client that does not choose h2: at the handshake when it offers other protocols, after it when it offers none', async () => {
    const service = await start({ grpcTls: serverTls() });
    const http11 = await handshake(service.grpcPort, { alpn: ['http/1.1'] });
    expect(http11.secure).toBe(false);
    expect(http11.error).toBe('ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL');
    const none = await handshake(service.grpcPort, { waitMs: 5000 });
    expect(none.secure).toBe(true);
    expect(none.alpn).toBe(false);
    // Closed before a byte of HTTP/2.
    expect(none).toMatchObject({ received: 0, closedByServer: true });
    const metrics = await metricsText(service);
    expect(metrics).toMatch(/floodgate_tls_refused_connections_total\{api="grpc",reason="alpn"\} 1/);
    expect(metrics).toMatch(/floodgate_tls_refused_connections_total\{api="grpc",reason="handshake"\} 1/);
  });
});

describe('gRPC over mutual TLS', () => {
  const mutual = () => serverTls({ clientCaFile: pki.ca.cert });

  it('answers a grpc-js client with a certificate from the client CA', async () => {
    const service = await start({ grpcTls: mutual() });
    expect(await fourCalls(grpcTlsClient(service.grpcPort, pki.client), '192.0.2.1')).toEqual([
      'OK',
      'OK',
      'OK',
      'OVER_LIMIT',
    ]);
  });

  it('refuses at the handshake a client without a certificate, and one with a certificate from another CA', async () => {
    const service = await start({ grpcTls: mutual() });
    expect(await grpcCode(shouldRateLimit(grpcTlsClient(service.grpcPort), '192.0.2.1'))).toBe(status.UNAVAILABLE);
    expect(await grpcCode(shouldRateLimit(grpcTlsClient(service.grpcPort, pki.otherClient), '192.0.2.1'))).toBe(
      status.UNAVAILABLE,
    );
    // Bare sockets: in TLS 1.3 the client's side completes before the server checks its certificate,
    // so what shows the refusal is the alert, and that no HTTP/2 byte ever comes.
    const without = await handshake(service.grpcPort, { alpn: ['h2'] });
    expect(without.received).toBe(0);
    expect(without.error).toBe('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED');
    const other = await handshake(service.grpcPort, { alpn: ['h2'], client: pki.otherClient, waitMs: 5000 });
    expect(other).toMatchObject({ received: 0, closedByServer: true });
    // No call was decided: the address still has its whole quota.
    expect(await fourCalls(grpcTlsClient(service.grpcPort, pki.client), '192.0.2.1')).toEqual([
      'OK',
      'OK',
      'OK',
      'OVER_LIMIT',
    ]);
    const refused = /floodgate_tls_refused_connections_total\{api="grpc",reason="handshake"\} (\d+)/.exec(
      await metricsText(service),
    );
    expect(Number(refused?.[1])).toBeGreaterThanOrEqual(4);
  });

  it('with clientSan, admits only certificates that carry that name', async () => {
    const service = await start({
      grpcTls: serverTls({ clientCaFile: pki.ca.cert, clientSan: 'spiffe://floodgate.test/envoy' }),
    });
    expect((await shouldRateLimit(grpcTlsClient(service.grpcPort, pki.client), '192.0.2.1')).overall_code).toBe('OK');
    expect(await grpcCode(shouldRateLimit(grpcTlsClient(service.grpcPort, pki.intruder), '192.0.2.1'))).toBe(
      status.UNAVAILABLE,
    );
    const intruder = await handshake(service.grpcPort, { alpn: ['h2'], client: pki.intruder, waitMs: 5000 });
    expect(intruder).toMatchObject({ received: 0, closedByServer: true });
    expect(await metricsText(service)).toMatch(
      /floodgate_tls_refused_connections_total\{api="grpc",reason="client_san"\} [1-9]/,
    );
  });
});

describe('HTTP API over HTTPS', () => {
  it('answers decisions over HTTPS, counting exactly', async () => {
    const service = await start({ httpTls: serverTls() });
    const allowed: unknown[] = [];
    for (let i = 0; i < 4; i++) {
      const answer = await https(service.httpPort, '/v1/decide', { body: decide('192.0.2.1') });
      expect(answer.status === 200 || answer.status === 429).toBe(true);
      allowed.push((JSON.parse(answer.body) as { allowed: boolean }).allowed);
    }
    expect(allowed).toEqual([true, true, true, false]);
    expect((await https(service.httpPort, '/healthz')).fingerprint256).toBe(pki.fingerprint(pki.server.cert));
    // HTTP/1.1 only: a client insisting on h2 fails its handshake.
    expect((await handshake(service.httpPort, { alpn: ['h2'] })).error).toBe(
      'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL',
    );
    // And cleartext HTTP gets nothing.
    await expect(fetch(`http://127.0.0.1:${service.httpPort}/healthz`)).rejects.toThrow();
  });

  it('over mutual TLS: answers a client certificate from the CA, refuses none and another CA', async () => {
    const service = await start({
      httpTls: serverTls({ clientCaFile: pki.ca.cert }),
      grpcTls: serverTls({ clientCaFile: pki.ca.cert }),
    });
    expect((await https(service.httpPort, '/healthz', { client: pki.client })).status).toBe(200);
    expect(await httpsError(https(service.httpPort, '/healthz'))).toMatch(
      /ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED|ECONNRESET/,
    );
    expect(await httpsError(https(service.httpPort, '/healthz', { client: pki.otherClient }))).toMatch(
      /ERR_SSL_TLSV1_ALERT_UNKNOWN_CA|ECONNRESET/,
    );
    expect(await metricsText(service)).toMatch(
      /floodgate_tls_refused_connections_total\{api="http",reason="handshake"\} 2/,
    );
  });
});

describe('certificate reload', () => {
  /** Server files in a folder of their own, so a test can replace them. */
  function ownFiles(name: string, clientCa?: string): TlsOptions {
    const cert = join(pki.dir, `${name}.pem`);
    const key = join(pki.dir, `${name}.key`);
    copyFileSync(pki.server.cert, cert);
    copyFileSync(pki.server.key, key);
    if (clientCa === undefined) return { certFile: cert, keyFile: key };
    const ca = join(pki.dir, `${name}-ca.pem`);
    copyFileSync(clientCa, ca);
    return { certFile: cert, keyFile: key, clientCaFile: ca };
  }

  function healthCheck(session: ReturnType<typeof connectHttp2>): Promise<string | undefined> {
    return new Promise((resolve, reject) => {
      const stream = session.request({
        ':method': 'POST',
        ':path': '/grpc.health.v1.Health/Check',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      stream.on('trailers', (trailers) => resolve(trailers['grpc-status'] as string | undefined));
      stream.on('error', reject);
      stream.resume();
      stream.end(Buffer.from([0, 0, 0, 0, 0]));
    });
  }

  it('serves a new certificate to new connections while open ones keep working (gRPC and HTTPS)', async () => {
    const grpcFiles = ownFiles('reload-grpc');
    const httpFiles = ownFiles('reload-http');
    const service = await start({ grpcTls: grpcFiles, httpTls: httpFiles, watch: false });
    const before = pki.fingerprint(pki.server.cert);
    const after = pki.fingerprint(pki.server2.cert);
    expect(after).not.toBe(before);

    const session = connectHttp2(`https://127.0.0.1:${service.grpcPort}`, {
      ca: pki.read(pki.ca.cert),
      servername: 'localhost',
    });
    cleanups.push(() => session.destroy());
    expect(await healthCheck(session)).toBe('0');
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    cleanups.push(() => agent.destroy());
    const first = await https(service.httpPort, '/healthz', { agent });
    expect(first.fingerprint256).toBe(before);

    for (const files of [grpcFiles, httpFiles]) {
      copyFileSync(pki.server2.cert, files.certFile);
      copyFileSync(pki.server2.key, files.keyFile);
    }
    const results = service.reloadTls();
    expect(results.map((r) => [r.option, r.ok, r.changed, r.fingerprint256])).toEqual([
      ['grpcTls', true, true, after],
      ['httpTls', true, true, after],
    ]);
    // Nothing changed since: a second reload is a no-op.
    expect(service.reloadTls().map((r) => r.changed)).toEqual([false, false]);

    expect((await handshake(service.grpcPort, { alpn: ['h2'] })).fingerprint256).toBe(after);
    expect((await https(service.httpPort, '/healthz')).fingerprint256).toBe(after);
    // The open connections were left as they were: same socket, old certificate, still answered.
    expect(await healthCheck(session)).toBe('0');
    expect((session.socket as TLSSocket).getPeerX509Certificate()?.fingerprint256).toBe(before);
    const second = await https(service.httpPort, '/healthz', { agent });
    expect(second.status).toBe(200);
    // The same TLS connection, so the certificate it was opened with.
    expect(second.socket).toBe(first.socket);
    // And grpc-js, connecting now, is answered under the new certificate.
    expect((await shouldRateLimit(grpcTlsClient(service.grpcPort), '192.0.2.9')).overall_code).toBe('OK');
    expect(await metricsText(service)).toMatch(/floodgate_tls_reloads_total\{api="grpc",result="success"\} 1/);
  });

  it('keeps the certificate in use when a replacement is bad, naming the option and file', async () => {
    const files = ownFiles('bad-reload');
    const service = await start({ grpcTls: files, watch: false });
    const before = pki.fingerprint(pki.server.cert);

    writeFileSync(files.certFile, 'not a certificate\n');
    let [result] = service.reloadTls();
    expect(result).toMatchObject({ option: 'grpcTls', ok: false, changed: true, fingerprint256: before });
    expect(result?.error).toBeInstanceOf(TlsError);
    expect(result?.error).toMatchObject({
      code: 'ERR_TLS_FILE_INVALID',
      option: 'grpcTls.certFile',
      file: files.certFile,
    });

    // A certificate with another certificate's key.
    copyFileSync(pki.server2.cert, files.certFile);
    [result] = service.reloadTls();
    expect(result?.error).toMatchObject({
      code: 'ERR_TLS_FILE_INVALID',
      option: 'grpcTls.keyFile',
      file: files.keyFile,
    });
    expect(result?.error?.message).toContain('is not the key of the certificate');

    expect((await handshake(service.grpcPort, { alpn: ['h2'] })).fingerprint256).toBe(before);
    expect((await shouldRateLimit(grpcTlsClient(service.grpcPort), '192.0.2.1')).overall_code).toBe('OK');
    expect(await metricsText(service)).toMatch(/floodgate_tls_reloads_total\{api="grpc",result="failure"\} 2/);

    // Its key arrives: the pair is good now.
    copyFileSync(pki.server2.key, files.keyFile);
    [result] = service.reloadTls();
    expect(result).toMatchObject({ ok: true, changed: true, fingerprint256: pki.fingerprint(pki.server2.cert) });
  });

  it('reloads by itself when the files change, the client CA included', async () => {
    const files = ownFiles('watched', pki.ca.cert);
    const service = await start({ grpcTls: files });
    const before = pki.fingerprint(pki.server.cert);
    const after = pki.fingerprint(pki.server2.cert);
    expect((await handshake(service.grpcPort, { alpn: ['h2'], client: pki.client })).fingerprint256).toBe(before);

    // Written in place one after the other, as a certificate tool would.
    copyFileSync(pki.server2.cert, files.certFile);
    copyFileSync(pki.server2.key, files.keyFile);
    await waitFor(
      async () =>
        (await handshake(service.grpcPort, { alpn: ['h2'], client: pki.client, waitMs: 0 })).fingerprint256 === after,
    );

    // Clients of the other CA only, from now on.
    copyFileSync(pki.otherCa.cert, files.clientCaFile as string);
    await waitFor(
      async () =>
        (await handshake(service.grpcPort, { alpn: ['h2'], client: pki.otherClient, waitMs: 200 })).received > 0,
    );
    expect(await grpcCode(shouldRateLimit(grpcTlsClient(service.grpcPort, pki.client), '192.0.2.1'))).toBe(
      status.UNAVAILABLE,
    );
  });
});

describe('TLS options', () => {
  it('refuses to start on files it cannot use, with a TlsError naming the option and the file', async () => {
    const garbage = join(pki.dir, 'garbage.pem');
    writeFileSync(garbage, '-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n');
    const missing = join(pki.dir, 'missing.pem');
    const cases: [Partial<ServiceOptions>, Partial<TlsError>][] = [
      [
        { grpcTls: { certFile: missing, keyFile: pki.server.key } },
        { code: 'ERR_TLS_FILE_UNREADABLE', option: 'grpcTls.certFile', file: missing },
      ],
      [
        { httpTls: { certFile: pki.server.cert, keyFile: missing } },
        { code: 'ERR_TLS_FILE_UNREADABLE', option: 'httpTls.keyFile', file: missing },
      ],
      [
        { grpcTls: { certFile: pki.server.key, keyFile: pki.server.key } },
        { code: 'ERR_TLS_FILE_INVALID', option: 'grpcTls.certFile', reason: 'holds no PEM certificate' },
      ],
      [
        { grpcTls: { certFile: garbage, keyFile: pki.server.key } },
        { code: 'ERR_TLS_FILE_INVALID', option: 'grpcTls.certFile', file: garbage },
      ],
      [
        { grpcTls: { certFile: pki.server.cert, keyFile: pki.server.cert } },
        { code: 'ERR_TLS_FILE_INVALID', option: 'grpcTls.keyFile' },
      ],
      [
        { grpcTls: { certFile: pki.server.cert, keyFile: pki.server2.key } },
        { code: 'ERR_TLS_FILE_INVALID', option: 'grpcTls.keyFile', file: pki.server2.key },
      ],
      [
        { httpTls: { certFile: pki.server.cert, keyFile: pki.server.key, clientCaFile: pki.ca.key } },
        { code: 'ERR_TLS_FILE_INVALID', option: 'httpTls.clientCaFile', file: pki.ca.key },
      ],
      [
        { grpcTls: { certFile: pki.server.cert, keyFile: pki.server.key, clientSan: 'envoy.test' } },
        { code: 'ERR_TLS_OPTION', option: 'grpcTls.clientSan' },
      ],
      [{ grpcTls: { certFile: '', keyFile: pki.server.key } }, { code: 'ERR_TLS_OPTION', option: 'grpcTls.certFile' }],
      [
        { grpcTls: { certFile: pki.server.cert, keyFile: pki.server.key, handshakeTimeoutMs: 0 } },
        { code: 'ERR_TLS_OPTION', option: 'grpcTls.handshakeTimeoutMs' },
      ],
    ];
    for (const [options, expected] of cases) {
      const error = await start(options).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, JSON.stringify(options)).toBeInstanceOf(TlsError);
      expect(error, JSON.stringify(options)).toMatchObject(expected);
      const tlsError = error as TlsError;
      expect(tlsError.message).toContain(tlsError.option);
      expect(tlsError.message).toContain(JSON.stringify(tlsError.file));
    }
  });

  it('the command exits with the config-error code, naming the flag and the file', async () => {
    const missing = join(pki.dir, 'missing.pem');
    let err = '';
    const io = { out: () => {}, err: (text: string) => (err += text), env: {} };
    const configFile = join(pki.dir, 'floodgate.yaml');
    writeFileSync(configFile, TEST_CONFIG);
    const code = await main(
      [
        'serve',
        '-c',
        configFile,
        '--port',
        '0',
        '--grpc-port',
        '0',
        '--grpc-tls-cert',
        missing,
        '--grpc-tls-key',
        pki.server.key,
      ],
      io,
    );
    expect(code).toBe(EXIT.CONFIG);
    expect(err).toBe(`floodgate: --grpc-tls-cert ${JSON.stringify(missing)}: cannot be read (ENOENT)\n`);
    err = '';
    expect(await main(['serve', '-c', configFile, '--http-tls-cert', pki.server.cert], io)).toBe(EXIT.USAGE);
    expect(err).toContain('--http-tls-cert and --http-tls-key go together');
    err = '';
    const envoy = { ...io, env: { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: pki.server.cert } };
    expect(await main(['serve', '-c', configFile], envoy)).toBe(EXIT.USAGE);
    expect(err).toContain('--grpc-tls-cert and --grpc-tls-key go together');
  });
});

describe('floodgate serve with TLS', () => {
  const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
  const children: ChildProcess[] = [];
  afterEach(() => {
    for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  });

  function serve(args: string[], env: Record<string, string>) {
    const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--grpc-port', '0', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    children.push(child);
    const logs: Record<string, unknown>[] = [];
    let buffer = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let nl = buffer.indexOf('\n'); nl !== -1; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.startsWith('{')) logs.push(JSON.parse(line) as Record<string, unknown>);
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const log = async (msg: string, count = 1) => {
      await waitFor(() => {
        if (child.exitCode !== null) throw new Error(`floodgate exited: ${stderr}`);
        return logs.filter((l) => l.msg === msg).length >= count;
      }, 10_000);
      return logs.filter((l) => l.msg === msg)[count - 1] as Record<string, unknown>;
    };
    const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    return { child, log, exit };
  }

  it('serves both ports over mutual TLS from flags and envoyproxy/ratelimit variables, and SIGHUP reloads the certificates', async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    const configFile = join(pki.dir, 'cli.yaml');
    writeFileSync(configFile, TEST_CONFIG);
    const cert = join(pki.dir, 'cli-server.pem');
    const key = join(pki.dir, 'cli-server.key');
    copyFileSync(pki.server.cert, cert);
    copyFileSync(pki.server.key, key);
    const running = serve(
      [
        '-c',
        configFile,
        '--no-watch',
        '--http-tls-cert',
        cert,
        '--http-tls-key',
        key,
        '--http-tls-client-ca',
        pki.ca.cert,
      ],
      {
        GRPC_SERVER_USE_TLS: 'true',
        GRPC_SERVER_TLS_CERT: cert,
        GRPC_SERVER_TLS_KEY: key,
        GRPC_CLIENT_TLS_CACERT: pki.ca.cert,
        GRPC_CLIENT_TLS_SAN: 'envoy.test',
      },
    );
    const serving = await running.log('floodgate is serving');
    const port = (address: unknown) => Number(String(address).split(':').pop());
    const grpcPort = port(serving.grpc);
    const httpPort = port(serving.http);
    expect(serving.grpcTls).toBe(`mutual TLS, certificate ${pki.fingerprint(pki.server.cert)}`);
    expect(serving.httpTls).toBe(`mutual TLS, certificate ${pki.fingerprint(pki.server.cert)}`);

    expect((await shouldRateLimit(grpcTlsClient(grpcPort, pki.client), '192.0.2.1')).overall_code).toBe('OK');
    expect(await grpcCode(shouldRateLimit(grpcTlsClient(grpcPort, pki.intruder), '192.0.2.1'))).toBe(
      status.UNAVAILABLE,
    );
    expect(await grpcCode(shouldRateLimit(grpcTlsClient(grpcPort), '192.0.2.1'))).toBe(status.UNAVAILABLE);
    expect((await https(httpPort, '/healthz', { client: pki.client })).status).toBe(200);

    copyFileSync(pki.server2.cert, cert);
    copyFileSync(pki.server2.key, key);
    running.child.kill('SIGHUP');
    const reloaded = await running.log('certificates reloaded', 2);
    expect(reloaded.fingerprint256).toBe(pki.fingerprint(pki.server2.cert));
    expect((await handshake(grpcPort, { alpn: ['h2'], client: pki.client })).fingerprint256).toBe(
      pki.fingerprint(pki.server2.cert),
    );
    expect((await https(httpPort, '/healthz', { client: pki.client })).fingerprint256).toBe(
      pki.fingerprint(pki.server2.cert),
    );
    running.child.kill('SIGTERM');
    expect(await running.exit).toBe(EXIT.OK);
  });
});
