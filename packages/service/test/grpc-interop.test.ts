import { connect } from 'node:http2';
import { type ChannelOptions, credentials, type ServiceError, status } from '@grpc/grpc-js';
import { memoryStore, type Store } from 'floodgate';
import { afterEach, describe, expect, it } from 'vitest';
import { Writer } from '../src/grpc/codec.js';
import { type Service, startService } from '../src/service.js';
import { loadServiceProtos, TEST_CONFIG } from './helpers.js';

// gRPC clients as Envoy, grpc-go and grpc-js use them: keepalive pings, many calls on one channel,
// cancellation, deadlines, messages near the limit; and a request body in several DATA frames.

type Unary = (
  request: unknown,
  options: { deadline?: Date },
  callback: (error: ServiceError | null, response: Record<string, unknown>) => void,
) => { cancel(): void };
interface Client {
  ShouldRateLimit: Unary;
  Check: Unary;
  close(): void;
  getChannel(): { getConnectivityState(connect: boolean): number };
}

function clients(port: number, options: ChannelOptions) {
  const loaded = loadServiceProtos<Client>();
  const address = `127.0.0.1:${port}`;
  return {
    rls: new loaded.RateLimitService(address, credentials.createInsecure(), options),
    health: new loaded.Health(address, credentials.createInsecure(), options),
  };
}

function unary(
  client: Client,
  method: 'ShouldRateLimit' | 'Check',
  request: unknown,
  options: { deadline?: Date } = {},
): { promise: Promise<Record<string, unknown>>; cancel(): void } {
  let call: { cancel(): void } | undefined;
  const promise = new Promise<Record<string, unknown>>((resolve, reject) => {
    call = client[method](request, options, (error, response) => (error === null ? resolve(response) : reject(error)));
  });
  promise.catch(() => {});
  return { promise, cancel: () => call?.cancel() };
}

async function code(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
    return status.OK;
  } catch (error) {
    return (error as ServiceError).code;
  }
}

function entries(value: string) {
  return { entries: [{ key: 'remote_address', value }] };
}

/** A memory store whose decisions wait `delayMs`. */
function slowStore(delayMs: number): Store {
  const inner = memoryStore();
  return new Proxy(inner, {
    get(target, key, receiver) {
      if (key === 'decide') {
        const decide = target.decide as (...a: unknown[]) => Promise<unknown>;
        return async (...args: unknown[]) => {
          await new Promise((resolve) => setTimeout(resolve, delayMs));
          return decide.apply(target, args);
        };
      }
      // Without decideSync the engine takes the asynchronous path.
      if (key === 'decideSync') return undefined;
      return Reflect.get(target, key, receiver);
    },
  });
}

let service: Service | undefined;
let open: Client[] = [];

async function start(store: string | Store = 'memory', storeTimeoutMs?: number) {
  service = await startService({
    ...(storeTimeoutMs === undefined ? {} : { storeTimeoutMs }),
    config: TEST_CONFIG,
    store,
    httpPort: 0,
    grpcPort: 0,
    logger: process.env.LOGLEVEL ?? 'silent',
    drainTimeoutMs: 2000,
  });
  return service;
}

afterEach(async () => {
  for (const c of open) c.close();
  open = [];
  await service?.close();
  service = undefined;
});

async function metric(s: Service, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${s.httpPort}/metrics`)).text();
  return Number(pattern.exec(text)?.[1] ?? 0);
}
const IN_FLIGHT = /floodgate_in_flight_requests\{api="grpc"\} (\d+)/;
const ABANDONED = /floodgate_grpc_abandoned_calls (\d+)/;

describe('gRPC interop with @grpc/grpc-js', () => {
  it('keeps a channel with keepalive pings (also without calls) and answers on it', async () => {
    const s = await start();
    const { rls, health } = clients(s.grpcPort, {
      'grpc.keepalive_time_ms': 100,
      'grpc.keepalive_timeout_ms': 500,
      'grpc.keepalive_permit_without_calls': 1,
    });
    open.push(rls, health);
    expect(
      (await unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries('198.51.100.1')] }).promise)
        .overall_code,
    ).toBe('OK');
    await new Promise((r) => setTimeout(r, 1500));
    // 2 = READY
    expect(rls.getChannel().getConnectivityState(false)).toBe(2);
    expect(
      (await unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries('198.51.100.1')] }).promise)
        .overall_code,
    ).toBe('OK');
    expect((await unary(health, 'Check', { service: '' }).promise).status).toBe('SERVING');
    expect(await code(unary(health, 'Check', { service: 'nope' }).promise)).toBe(status.NOT_FOUND);
  });

  it('answers 3000 concurrent calls on one channel (past the 1000-stream limit) with a slow store', async () => {
    const s = await start(slowStore(50));
    const { rls } = clients(s.grpcPort, {});
    open.push(rls);
    const calls = Array.from(
      { length: 3000 },
      (_, i) =>
        unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries(`10.0.${i >> 8}.${i & 255}`)] }).promise,
    );
    const codes = await Promise.all(calls.map(code));
    expect(codes.filter((c) => c !== status.OK)).toEqual([]);
    expect(await metric(s, IN_FLIGHT)).toBe(0);
  });

  it('cancelled calls leave nothing in flight, and the channel goes on', async () => {
    const s = await start(slowStore(200));
    const { rls } = clients(s.grpcPort, {});
    open.push(rls);
    const calls = Array.from({ length: 50 }, (_, i) =>
      unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries(`10.1.0.${i}`)] }),
    );
    await expect.poll(() => metric(s, IN_FLIGHT)).toBe(50);
    for (const c of calls) c.cancel();
    expect((await Promise.all(calls.map((c) => code(c.promise)))).every((c) => c === status.CANCELLED)).toBe(true);
    await expect.poll(() => metric(s, IN_FLIGHT)).toBe(0);
    expect(
      (await unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries('10.1.1.1')] }).promise).overall_code,
    ).toBe('OK');
  });

  it('answers DEADLINE_EXCEEDED past a grpc-js deadline, and leaves nothing in flight', async () => {
    const s = await start(slowStore(300));
    const { rls } = clients(s.grpcPort, {});
    open.push(rls);
    const c = unary(
      rls,
      'ShouldRateLimit',
      { domain: 'api', descriptors: [entries('10.2.0.1')] },
      { deadline: new Date(Date.now() + 100) },
    );
    expect(await code(c.promise)).toBe(status.DEADLINE_EXCEEDED);
    await expect.poll(() => metric(s, IN_FLIGHT)).toBe(0);
    const ok = unary(
      rls,
      'ShouldRateLimit',
      { domain: 'api', descriptors: [entries('10.2.0.2')] },
      { deadline: new Date(Date.now() + 5000) },
    );
    expect(await code(ok.promise)).toBe(status.OK);
  });

  it('accepts a message of exactly 1 MiB, refuses one a byte over, several at once', async () => {
    const s = await start();
    const { rls } = clients(s.grpcPort, { 'grpc.max_send_message_length': 4 * 1024 * 1024 });
    open.push(rls);
    const serialize = (
      rls.constructor as unknown as { service: { ShouldRateLimit: { requestSerialize(r: unknown): Buffer } } }
    ).service.ShouldRateLimit.requestSerialize;
    // 64 descriptors of 16 entries: the largest request the engine takes is about 2 MiB.
    const sized = (bytes: number, tag: string) => {
      const make = (pad: number) => ({
        domain: 'api',
        descriptors: Array.from({ length: 64 }, (_, d) => ({
          entries: Array.from({ length: 16 }, (_, e) => ({
            key: `k${d}-${e}-${tag}-`.padEnd(16, 'k'),
            value: 'v'.repeat(d === 0 && e < 2 ? 1000 - Math.min(1000, Math.max(0, pad - 1000 * e)) : 1000),
          })),
        })),
      });
      let pad = serialize(make(0)).length - bytes - 4;
      while (serialize(make(pad)).length > bytes) pad++;
      const request = make(pad);
      expect(serialize(request).length).toBe(bytes);
      return request;
    };
    const exact = sized(1024 * 1024, 'a');
    const over = sized(1024 * 1024 + 1, 'b');
    const codes = await Promise.all([
      ...Array.from({ length: 4 }, () => code(unary(rls, 'ShouldRateLimit', exact).promise)),
      ...Array.from({ length: 4 }, () => code(unary(rls, 'ShouldRateLimit', over).promise)),
    ]);
    expect(codes).toEqual([0, 0, 0, 0, 8, 8, 8, 8]);
    expect(
      await code(unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries('10.3.0.1')] }).promise),
    ).toBe(0);
  });
});

describe('gRPC interop: shutdown with calls on the wire', () => {
  it('answers the calls being decided, then refuses new ones', async () => {
    const s = await start(slowStore(300));
    const { rls, health } = clients(s.grpcPort, {});
    open.push(rls, health);
    expect((await unary(health, 'Check', { service: '' }).promise).status).toBe('SERVING');
    const calls = Array.from(
      { length: 200 },
      (_, i) => unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries(`10.4.0.${i}`)] }).promise,
    );
    await expect.poll(() => metric(s, IN_FLIGHT)).toBe(200);
    const closing = s.close();
    service = undefined;
    await closing;
    expect((await Promise.all(calls.map(code))).filter((c) => c !== 0)).toEqual([]);
    expect(
      await code(unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries('10.4.1.1')] }).promise),
    ).toBe(status.UNAVAILABLE);
  });

  it('keeps the connection through a burst of 1500 cancellations (calls timed out on a slow store)', async () => {
    // Slow enough that no call is answered before the test cancels them all, even on a busy machine where
    // opening 1,500 calls and cancelling them takes seconds; the store timeout well above that delay, so
    // that a loaded machine does not turn the delay into store timeouts.
    const s = await start(slowStore(5000), 15_000);
    const { rls } = clients(s.grpcPort, {});
    open.push(rls);
    const keep = unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries('10.5.9.9')] });
    // The call to keep is on the server before the burst: among the first of the stream limit, whatever
    // order a busy client sends the rest in.
    await expect.poll(() => metric(s, IN_FLIGHT), { timeout: 4000 }).toBeGreaterThanOrEqual(1);
    const calls = Array.from({ length: 1500 }, (_, i) =>
      unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries(`10.5.${i >> 8}.${i & 255}`)] }),
    );
    // The first 1000 (the stream limit) are being decided; the rest wait on the client.
    await expect.poll(() => metric(s, IN_FLIGHT), { timeout: 4000 }).toBeGreaterThanOrEqual(1000);
    for (const c of calls) c.cancel();
    expect((await Promise.all(calls.map((c) => code(c.promise)))).every((c) => c === status.CANCELLED)).toBe(true);
    expect(await code(keep.promise)).toBe(status.OK);
    // The cancelled calls are no longer in flight, but their work holds their places under the stream
    // limit until the store answers; then the places are free: 999 new calls at once are all admitted
    // and answered.
    await expect.poll(() => metric(s, IN_FLIGHT), { timeout: 4000 }).toBe(0);
    // All the places but the kept call's: its 999 companions under the limit were opened after it.
    expect(await metric(s, ABANDONED)).toBe(999);
    await expect.poll(() => metric(s, ABANDONED), { timeout: 15_000 }).toBe(0);
    const again = Array.from(
      { length: 999 },
      (_, i) =>
        unary(rls, 'ShouldRateLimit', { domain: 'api', descriptors: [entries(`10.6.${i >> 8}.${i & 255}`)] }).promise,
    );
    expect((await Promise.all(again.map(code))).filter((c) => c !== status.OK)).toEqual([]);
  });
});

describe('node:http2 client sending a body in several DATA frames', () => {
  it('reads a request written in pieces over several turns', async () => {
    const s = await start();
    const w = new Writer();
    w.string(1, 'api');
    const d = w.open(2);
    const e = w.open(1);
    w.string(1, 'remote_address');
    w.string(2, '203.0.113.7');
    w.close(e);
    w.close(d);
    const body = w.framed();
    const session = connect(`http://127.0.0.1:${s.grpcPort}`);
    try {
      for (const cut of [1, 3, 5, 7, body.length - 1]) {
        const stream = session.request({
          ':method': 'POST',
          ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
          'content-type': 'application/grpc',
          te: 'trailers',
        });
        const result = new Promise<{ status: string | undefined; data: number }>((resolve, reject) => {
          let data = 0;
          let grpcStatus: string | undefined;
          stream.on('response', (h) => {
            if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
          });
          stream.on('trailers', (h) => {
            grpcStatus = String(h['grpc-status']);
          });
          stream.on('data', (chunk: Buffer) => {
            data += chunk.length;
          });
          stream.on('close', () => resolve({ status: grpcStatus, data }));
          stream.on('error', reject);
        });
        stream.write(body.subarray(0, cut));
        await new Promise((r) => setTimeout(r, 20));
        stream.write(body.subarray(cut, cut + 1));
        await new Promise((r) => setTimeout(r, 20));
        stream.end(body.subarray(cut + 1));
        const r = await result;
        expect(r.status).toBe('0');
        expect(r.data).toBeGreaterThan(5);
      }
    } finally {
      session.close();
    }
  });
});
