import { type ClientHttp2Session, type ClientHttp2Stream, connect, type IncomingHttpHeaders } from 'node:http2';
import type { Store } from 'floodgate';
import { afterEach, describe, expect, it } from 'vitest';
import { Writer } from '../src/grpc/codec.js';
import { parseGrpcTimeout } from '../src/grpc/server.js';
import { type Service, startService } from '../src/service.js';
import { TEST_CONFIG } from './helpers.js';

// Calls over a raw HTTP/2 client, so a test can do what no gRPC library does: open a call and never end
// its request.

const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

/** A framed ShouldRateLimit request for one descriptor. */
function request(value: string): Buffer {
  const w = new Writer();
  w.string(1, 'api');
  const descriptor = w.open(2);
  const entry = w.open(1);
  w.string(1, 'remote_address');
  w.string(2, value);
  w.close(entry);
  w.close(descriptor);
  return w.framed();
}

interface Answer {
  status: number;
  message: string;
}

interface OpenCall {
  stream: ClientHttp2Stream;
  /** The gRPC status, from trailers or a trailers-only response. */
  answer: Promise<Answer>;
  /** The stream closed, both ways. */
  closed: Promise<void>;
}

/** Opens a call; `body` undefined leaves the request open (no END_STREAM, no message). */
function call(session: ClientHttp2Session, body: Buffer | undefined, headers: Record<string, string> = {}): OpenCall {
  const stream = session.request(
    { ':method': 'POST', ':path': SHOULD_RATE_LIMIT, 'content-type': 'application/grpc', te: 'trailers', ...headers },
    { endStream: false },
  );
  stream.on('error', () => {});
  const answer = new Promise<Answer>((resolve, reject) => {
    const read = (h: IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) {
        resolve({ status: Number(h['grpc-status']), message: decodeURIComponent(String(h['grpc-message'] ?? '')) });
      }
    };
    stream.on('response', read);
    stream.on('trailers', read);
    stream.on('close', () => reject(new Error(`stream closed without a status (rst code ${stream.rstCode})`)));
  });
  answer.catch(() => {});
  stream.resume();
  const closed = new Promise<void>((resolve) => stream.on('close', () => resolve()));
  if (body !== undefined) stream.end(body);
  return { stream, answer, closed };
}

const hung: Store = {
  name: 'hung',
  hasOwnClock: false,
  decide: () => new Promise(() => {}),
  reset: () => new Promise(() => {}),
};

let service: Service | undefined;
let session: ClientHttp2Session | undefined;

async function start(options: { grpcReadTimeoutMs?: number; store?: Store; drainTimeoutMs?: number } = {}) {
  service = await startService({
    config: TEST_CONFIG,
    store: options.store ?? 'memory',
    httpPort: 0,
    grpcPort: 0,
    logger: 'silent',
    storeTimeoutMs: 0,
    drainTimeoutMs: options.drainTimeoutMs ?? 30_000,
    ...(options.grpcReadTimeoutMs === undefined ? {} : { grpcReadTimeoutMs: options.grpcReadTimeoutMs }),
  });
  session = connect(`http://127.0.0.1:${service.grpcPort}`);
  session.on('error', () => {});
  return { service, session };
}

afterEach(async () => {
  session?.destroy();
  session = undefined;
  await service?.close();
  service = undefined;
});

async function inFlight(s: Service): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${s.httpPort}/metrics`)).text();
  const match = /floodgate_in_flight_requests\{api="grpc"\} (\d+)/.exec(text);
  return Number(match?.[1]);
}

describe('gRPC deadlines', () => {
  it('parses grpc-timeout in each unit, and ignores a malformed one', () => {
    expect(parseGrpcTimeout('2H')).toBe(7_200_000);
    expect(parseGrpcTimeout('3M')).toBe(180_000);
    expect(parseGrpcTimeout('4S')).toBe(4000);
    expect(parseGrpcTimeout('250m')).toBe(250);
    expect(parseGrpcTimeout('1500u')).toBe(1.5);
    expect(parseGrpcTimeout('99999999n')).toBeCloseTo(99.999999);
    expect(parseGrpcTimeout('0m')).toBe(0);
    for (const bad of [undefined, '', '5', 'm', '123456789S', '1.5S', '-1S', '5s', '5 S']) {
      expect(parseGrpcTimeout(bad)).toBeUndefined();
    }
  });

  it('answers DEADLINE_EXCEEDED to a call whose request never ends, and closes its stream', async () => {
    const { service: s, session: c } = await start({ grpcReadTimeoutMs: 200 });
    const open = call(c, undefined);
    expect(await open.answer).toEqual({
      status: 4,
      message: 'the request message did not arrive within 200 ms',
    });
    await open.closed;
    expect(await inFlight(s)).toBe(0);
    // The session still serves.
    expect((await call(c, request('192.0.2.1')).answer).status).toBe(0);
  });

  it('honours grpc-timeout while the request is still arriving', async () => {
    const { session: c } = await start();
    const open = call(c, undefined, { 'grpc-timeout': '100m' });
    expect(await open.answer).toEqual({ status: 4, message: 'deadline exceeded (grpc-timeout)' });
    await open.closed;
  });

  it('honours grpc-timeout while the store decides', async () => {
    const { service: s, session: c } = await start({ store: hung });
    const slow = call(c, request('192.0.2.2'), { 'grpc-timeout': '100m' });
    expect(await slow.answer).toEqual({ status: 4, message: 'deadline exceeded (grpc-timeout)' });
    await slow.closed;
    expect(await inFlight(s)).toBe(0);
    const metrics = await (await fetch(`http://127.0.0.1:${s.httpPort}/metrics`)).text();
    expect(metrics).toMatch(
      /floodgate_request_errors_total\{api="grpc",method="ShouldRateLimit",code="DEADLINE_EXCEEDED"\} 1/,
    );
  });

  it('answers at once within a generous grpc-timeout', async () => {
    const { session: c } = await start();
    expect((await call(c, request('192.0.2.3'), { 'grpc-timeout': '5S' }).answer).status).toBe(0);
  });

  it('counts calls still arriving as in flight, and does not wait for them on shutdown', async () => {
    const { service: s, session: c } = await start({ drainTimeoutMs: 30_000 });
    const hanging = Array.from({ length: 5 }, () => call(c, undefined));
    // Streams of a session reach the server in order: once a later call is answered, all five are open.
    expect((await call(c, request('192.0.2.4')).answer).status).toBe(0);
    expect(await inFlight(s)).toBe(5);
    const started = performance.now();
    await s.close();
    service = undefined;
    expect(performance.now() - started).toBeLessThan(5000);
    for (const h of hanging) {
      expect(await h.answer).toEqual({ status: 14, message: 'the service is shutting down' });
      await h.closed;
    }
  });
});
