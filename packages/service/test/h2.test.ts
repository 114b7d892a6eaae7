import { type ClientHttp2Session, connect, constants } from 'node:http2';
import { type AddressInfo, connect as netConnect, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createH2Server,
  H2Error,
  type H2Server,
  type H2ServerOptions,
  type H2Stream,
  STREAM_COST,
} from '../src/grpc/h2.js';
import { encodeIndexed, encodeLiteral } from '../src/grpc/hpack.js';

// The HTTP/2 transport of the gRPC server, against two kinds of peer: nghttp2 (node:http2's client, which
// does flow control, HPACK with Huffman and a dynamic table on its own) and a raw socket that writes
// frames by hand, for what no well-behaved client does.

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

let server: H2Server | undefined;
let port = 0;
const cleanup: Array<() => void> = [];

afterEach(async () => {
  for (const step of cleanup.splice(0)) step();
  server?.destroy();
  await new Promise<void>((resolve) => (server === undefined ? resolve() : server.server.close(() => resolve())));
  server = undefined;
});

/** Answers each request with its body reversed, so a test can tell answers apart; `hold` keeps them. */
async function start(options: Partial<H2ServerOptions> & { hold?: H2Stream[] } = {}): Promise<void> {
  const hold = options.hold;
  server = createH2Server({
    maxConcurrentStreams: 100,
    maxHeaderListSize: 8192,
    maxBodyBytes: 1024 * 1024,
    maxSessionMemory: 64 * 1024 * 1024,
    prefaceTimeoutMs: 10_000,
    onError: (error) => {
      throw error;
    },
    onStream: (stream, fields) => {
      if (fields === undefined) {
        stream.sendStatus(8, 'headers too large');
        return;
      }
      stream.handler = {
        body: (body) => {
          if (hold !== undefined) hold.push(stream);
          else stream.sendMessage(Buffer.from(body).reverse());
        },
        tooLarge: () => stream.sendStatus(8, 'too large'),
        aborted: () => {},
      };
    },
    ...options,
  });
  await new Promise<void>((resolve) => server?.server.listen(0, '127.0.0.1', resolve));
  port = (server.server.address() as AddressInfo).port;
}

function session(settings: Record<string, number> = {}): ClientHttp2Session {
  const s = connect(`http://127.0.0.1:${port}`, { settings });
  s.on('error', () => {});
  cleanup.push(() => s.destroy());
  return s;
}

interface Answer {
  status: number | undefined;
  grpcStatus: string | undefined;
  data: Buffer;
  rstCode: number;
}

function request(s: ClientHttp2Session, body: Buffer, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve) => {
    const stream = s.request({ ':method': 'POST', ':path': '/x', 'content-type': 'application/grpc', ...headers });
    const chunks: Buffer[] = [];
    let status: number | undefined;
    let grpcStatus: string | undefined;
    stream.on('response', (h) => {
      status = h[':status'];
      grpcStatus = h['grpc-status'] as string | undefined;
    });
    stream.on('trailers', (t) => {
      grpcStatus = t['grpc-status'] as string | undefined;
    });
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('error', () => {});
    stream.on('close', () => resolve({ status, grpcStatus, data: Buffer.concat(chunks), rstCode: stream.rstCode }));
    stream.end(body);
  });
}

/** The gRPC frame of `body` reversed: what the test server answers. */
function answerTo(body: Buffer): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out.writeUInt32BE(body.length, 1);
  Buffer.from(body).reverse().copy(out, 5);
  return out;
}

describe('HTTP/2 transport with nghttp2 as the client', () => {
  it('answers many concurrent requests on one connection, each with its own answer', async () => {
    await start();
    const s = session();
    const bodies = Array.from({ length: 300 }, (_, i) => Buffer.from(`request number ${i}`));
    const answers = await Promise.all(bodies.map((body) => request(s, body)));
    answers.forEach((answer, i) => {
      expect(answer.status).toBe(200);
      expect(answer.grpcStatus).toBe('0');
      expect(answer.data).toEqual(answerTo(bodies[i] as Buffer));
    });
  });

  it('reads a body of many DATA frames within the stream window it announces', async () => {
    await start();
    const body = Buffer.alloc(600_000, 'abc');
    body.write('the end', body.length - 7);
    const answer = await request(session(), body);
    expect(answer.grpcStatus).toBe('0');
    // Buffer.equals: a deep equality of 600 kB element by element takes seconds.
    expect(answer.data.equals(answerTo(body))).toBe(true);
  });

  it('holds DATA the peer has no window for, and sends it as the window opens', async () => {
    await start();
    // Every stream starts with 16 bytes of window; nghttp2 opens more as it reads.
    const s = session({ initialWindowSize: 16 });
    const bodies = Array.from({ length: 20 }, (_, i) => Buffer.alloc(5000 + i, String.fromCharCode(97 + i)));
    const answers = await Promise.all(bodies.map((body) => request(s, body)));
    answers.forEach((answer, i) => {
      expect(answer.grpcStatus).toBe('0');
      expect(answer.data).toEqual(answerTo(bodies[i] as Buffer));
    });
  });

  it('answers a body over the limit with the handler, and keeps the connection', async () => {
    await start({ maxBodyBytes: 1000 });
    const s = session();
    const big = await request(s, Buffer.alloc(50_000));
    expect(big.grpcStatus).toBe('8');
    const small = await request(s, Buffer.from('ok'));
    expect(small.data).toEqual(answerTo(Buffer.from('ok')));
  });

  it('answers a header list over the limit, and keeps the connection', async () => {
    await start({ maxHeaderListSize: 1000 });
    const s = session();
    const big = await request(s, Buffer.from('x'), { 'x-big': 'v'.repeat(2000) });
    expect(big.grpcStatus).toBe('8');
    const small = await request(s, Buffer.from('ok'));
    expect(small.data).toEqual(answerTo(Buffer.from('ok')));
  });

  it('tells the handler of a stream the peer resets before the answer', async () => {
    const aborted: number[] = [];
    server = createH2Server({
      maxConcurrentStreams: 100,
      maxHeaderListSize: 8192,
      maxBodyBytes: 1024,
      maxSessionMemory: 1024 * 1024,
      prefaceTimeoutMs: 10_000,
      onError: () => {},
      onStream: (stream) => {
        stream.handler = { body: () => {}, tooLarge: () => {}, aborted: () => aborted.push(stream.id) };
      },
    });
    await new Promise<void>((resolve) => server?.server.listen(0, '127.0.0.1', resolve));
    port = (server.server.address() as AddressInfo).port;
    const s = session();
    const stream = s.request({ ':method': 'POST', ':path': '/x', 'content-type': 'application/grpc' });
    stream.on('error', () => {});
    stream.write('partial');
    await new Promise((resolve) => setImmediate(resolve));
    stream.close(constants.NGHTTP2_CANCEL);
    await expect.poll(() => aborted).toEqual([1]);
  });

  it('sends GOAWAY on goAway, answers the streams already open, then ends the connection', async () => {
    const hold: H2Stream[] = [];
    await start({ hold });
    const s = session();
    const first = request(s, Buffer.from('one'));
    const second = request(s, Buffer.from('two'));
    await expect.poll(() => hold.length).toBe(2);
    const goaway = new Promise<number>((resolve) => s.once('goaway', (_code, lastStreamId) => resolve(lastStreamId)));
    const closed = new Promise<void>((resolve) => s.once('close', () => resolve()));
    server?.goAway();
    expect(await goaway).toBe(3);
    for (const stream of hold) stream.sendMessage(Buffer.from(`answer ${stream.id}`));
    expect((await first).grpcStatus).toBe('0');
    expect((await second).grpcStatus).toBe('0');
    await closed;
  });
});

/** One frame's bytes. */
function rawFrame(type: number, flags: number, id: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(id, 5);
  return Buffer.concat([header, payload]);
}

/** A hand-driven peer: writes frames, reads frames. */
class RawPeer {
  private buffer = Buffer.alloc(0);
  readonly frames: Array<{ type: number; flags: number; id: number; payload: Buffer }> = [];
  ended = false;
  private waiters: Array<() => void> = [];

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      while (this.buffer.length >= 9) {
        const length = this.buffer.readUIntBE(0, 3);
        if (this.buffer.length < 9 + length) break;
        this.frames.push({
          type: this.buffer[3] as number,
          flags: this.buffer[4] as number,
          id: this.buffer.readUInt32BE(5) & 0x7fffffff,
          payload: this.buffer.subarray(9, 9 + length),
        });
        this.buffer = this.buffer.subarray(9 + length);
      }
      this.wake();
    });
    socket.on('end', () => {
      this.ended = true;
      this.wake();
    });
    socket.on('close', () => {
      this.ended = true;
      this.wake();
    });
    socket.on('error', () => {});
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  static async open(prefaceAndSettings = true): Promise<RawPeer> {
    const socket = netConnect(port, '127.0.0.1');
    cleanup.push(() => socket.destroy());
    await new Promise((resolve) => socket.once('connect', resolve));
    const peer = new RawPeer(socket);
    if (prefaceAndSettings) {
      socket.write(PREFACE);
      peer.send(4, 0, 0, Buffer.alloc(0));
    }
    return peer;
  }

  send(type: number, flags: number, id: number, payload: Buffer): void {
    this.socket.write(rawFrame(type, flags, id, payload));
  }

  /** Waits for a frame matching `match`. */
  async waitFor(match: (f: RawPeer['frames'][number]) => boolean): Promise<RawPeer['frames'][number]> {
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined) return found;
      if (this.ended) throw new Error('the connection ended first');
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** Waits for the GOAWAY; resolves to its error code, after the connection ended. */
  async goaway(): Promise<number> {
    const frame = await this.waitFor((f) => f.type === 7);
    while (!this.ended) await new Promise<void>((resolve) => this.waiters.push(resolve));
    return frame.payload.readUInt32BE(4);
  }
}

const REQUEST_BLOCK = Buffer.concat([
  encodeIndexed(3), // :method POST
  encodeIndexed(6), // :scheme http
  encodeLiteral(':path', '/x'),
  encodeLiteral('content-type', 'application/grpc'),
]);

describe('HTTP/2 transport with a hand-driven peer', () => {
  it('answers PING with PING ACK and the same payload', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(6, 0, 0, Buffer.from('12345678'));
    const ack = await peer.waitFor((f) => f.type === 6);
    expect(ack.flags).toBe(1);
    expect(ack.payload.toString()).toBe('12345678');
  });

  it('reads a header block split over CONTINUATIONs, with padding, and a padded DATA', async () => {
    await start();
    const peer = await RawPeer.open();
    // HEADERS: PADDED, 3 bytes of padding; the block in three pieces.
    const a = REQUEST_BLOCK.subarray(0, 3);
    const b = REQUEST_BLOCK.subarray(3, 10);
    const c = REQUEST_BLOCK.subarray(10);
    peer.send(1, 0x8, 1, Buffer.concat([Buffer.from([3]), a, Buffer.alloc(3)]));
    peer.send(9, 0, 1, b);
    peer.send(9, 0x4, 1, c);
    peer.send(0, 0x1 | 0x8, 1, Buffer.concat([Buffer.from([2]), Buffer.from('hello'), Buffer.alloc(2)]));
    const data = await peer.waitFor((f) => f.type === 0 && f.id === 1);
    expect(data.payload).toEqual(answerTo(Buffer.from('hello')));
    const trailers = await peer.waitFor((f) => f.type === 1 && f.id === 1 && (f.flags & 1) === 1);
    expect(trailers.payload).toEqual(encodeLiteral('grpc-status', '0'));
  });

  it('counts streams reset while their work goes on against the stream limit (rapid reset)', async () => {
    const working: H2Stream[] = [];
    await start({
      maxConcurrentStreams: 2,
      onStream: (stream) => {
        stream.handler = {
          body: () => {
            // Asynchronous work that has not finished: the stream holds its place.
            stream.hold();
            working.push(stream);
          },
          tooLarge: () => {},
          aborted: () => {},
        };
      },
    });
    const peer = await RawPeer.open();
    for (const id of [1, 3, 5]) {
      peer.send(1, 0x5, id, REQUEST_BLOCK);
      peer.send(3, 0, id, Buffer.from([0, 0, 0, 8]));
    }
    const refused = await peer.waitFor((f) => f.type === 3);
    expect([refused.id, refused.payload.readUInt32BE(0)]).toEqual([5, H2Error.REFUSED_STREAM]);
    expect(working.map((s) => s.id)).toEqual([1, 3]);
    // The work of stream 1 ends: its place is free again.
    working[0]?.release();
    peer.send(1, 0x5, 7, REQUEST_BLOCK);
    await expect.poll(() => working.map((s) => s.id)).toEqual([1, 3, 7]);
    expect(peer.frames.filter((f) => f.type === 3)).toHaveLength(1);
    expect(peer.frames.some((f) => f.type === 7)).toBe(false);
  });

  it('charges a refused stream to the reset budget only when the peer itself goes past the stream limit', async () => {
    const limits: string[] = [];
    const working: H2Stream[] = [];
    await start({
      maxConcurrentStreams: 2,
      resetBurst: 4,
      resetsPerSecond: 0,
      onLimit: (l) => limits.push(l),
      onStream: (stream) => {
        stream.handler = {
          body: () => {
            stream.hold();
            working.push(stream);
          },
          tooLarge: () => {},
          aborted: () => {},
        };
      },
    });
    const peer = await RawPeer.open();
    // Two calls cancelled while their work goes on: 2 resets charged, their places held.
    for (const id of [1, 3]) {
      peer.send(1, 0x5, id, REQUEST_BLOCK);
      peer.send(3, 0, id, Buffer.from([0, 0, 0, 8]));
    }
    // A client within the limit it was told (no stream open) retries: 20 refusals, none charged.
    for (let i = 0; i < 20; i++) peer.send(1, 0x5, 5 + 2 * i, REQUEST_BLOCK);
    peer.send(6, 0, 0, Buffer.from('still-up'));
    await peer.waitFor((f) => f.type === 6);
    expect(peer.frames.some((f) => f.type === 7)).toBe(false);
    expect(
      peer.frames.filter((f) => f.type === 3 && f.payload.readUInt32BE(0) === H2Error.REFUSED_STREAM),
    ).toHaveLength(20);
    expect(limits).toEqual([]);
    // The work ends: the places are free, two calls take them and stay open.
    for (const s of working.splice(0)) s.release();
    for (const id of [47, 49]) peer.send(1, 0x5, id, REQUEST_BLOCK);
    await expect.poll(() => working.map((s) => s.id)).toEqual([47, 49]);
    // Past the limit with its own open streams, the peer pays: 2 tokens left, the third refusal ends it.
    for (const id of [51, 53, 55]) peer.send(1, 0x5, id, REQUEST_BLOCK);
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['resets']);
  });

  it('lets a peer reset streams whose answer is out, within the reset budget', async () => {
    await start();
    const peer = await RawPeer.open();
    // HEADERS with END_STREAM: each call is answered before the peer's reset arrives.
    peer.socket.write(
      Buffer.concat(
        Array.from({ length: 1100 }, (_, i) => [
          rawFrame(1, 0x5, 2 * i + 1, REQUEST_BLOCK),
          rawFrame(3, 0, 2 * i + 1, Buffer.from([0, 0, 0, 8])),
        ]).flat(),
      ),
    );
    peer.send(6, 0, 0, Buffer.from('still-up'));
    const ack = await peer.waitFor((f) => f.type === 6);
    expect(ack.payload.toString()).toBe('still-up');
    expect(peer.frames.filter((f) => f.type === 1 && (f.flags & 1) === 1)).toHaveLength(1100);
    expect(peer.frames.some((f) => f.type === 7)).toBe(false);
  });

  it('refuses streams over the concurrent limit with REFUSED_STREAM', async () => {
    const hold: H2Stream[] = [];
    await start({ hold, maxConcurrentStreams: 2 });
    const peer = await RawPeer.open();
    for (const id of [1, 3, 5]) peer.send(1, 0x4 | 0x1, id, REQUEST_BLOCK);
    const refused = await peer.waitFor((f) => f.type === 3);
    expect(refused.id).toBe(5);
    expect(refused.payload.readUInt32BE(0)).toBe(H2Error.REFUSED_STREAM);
    expect(hold.map((s) => s.id)).toEqual([1, 3]);
  });

  it('holds at most maxSessionMemory in the streams of a connection, their state and bodies; others go on', async () => {
    const limits: string[] = [];
    // Room for 6 open streams (STREAM_COST each) and 1 KiB of request bodies.
    await start({ maxSessionMemory: 6 * STREAM_COST + 1024, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    // Requests that never end (no END_STREAM): six are held, the seventh is refused.
    for (const id of [1, 3, 5, 7, 9, 11, 13]) peer.send(1, 0x4, id, REQUEST_BLOCK);
    expect(await resetCode(peer, 13)).toBe(H2Error.REFUSED_STREAM);
    expect(peer.frames.filter((f) => f.type === 3).map((f) => f.id)).toEqual([13]);
    // Bodies: 1 KiB fills the connection's room; one byte more resets the stream it came on.
    peer.send(0, 0, 1, Buffer.alloc(1024));
    peer.send(0, 0, 3, Buffer.alloc(1));
    expect(await resetCode(peer, 3)).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(peer.frames.filter((f) => f.type === 3).map((f) => f.id)).toEqual([13, 3]);
    // Stream 3's state and byte are given back: one more stream fits, and is answered; then it is full again.
    await stillServes(peer, 15);
    peer.send(1, 0x4, 17, REQUEST_BLOCK);
    peer.send(1, 0x4, 19, REQUEST_BLOCK);
    expect(await resetCode(peer, 19)).toBe(H2Error.REFUSED_STREAM);
    // Another connection is not held back by this one, and the process-wide limits were never met.
    const other = await RawPeer.open();
    await stillServes(other, 1);
    // The held requests still end and are answered.
    peer.send(0, 0x1, 1, Buffer.alloc(0));
    await peer.waitFor((f) => f.type === 1 && f.id === 1);
    expect(peer.frames.some((f) => f.type === 7)).toBe(false);
    expect(limits).toEqual([]);
  });

  it('ends the request of a stream answered early with RST_STREAM NO_ERROR', async () => {
    await start({ maxBodyBytes: 10 });
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    peer.send(0, 0, 1, Buffer.alloc(20));
    const reset = await peer.waitFor((f) => f.type === 3 && f.id === 1);
    expect(reset.payload.readUInt32BE(0)).toBe(H2Error.NO_ERROR);
    // Late DATA of that stream is dropped, and the connection goes on.
    peer.send(0, 0x1, 1, Buffer.alloc(5));
    peer.send(1, 0x4 | 0x1, 3, REQUEST_BLOCK);
    await peer.waitFor((f) => f.type === 1 && f.id === 3);
  });

  const connectionErrors: Array<[string, number, (peer: RawPeer) => void]> = [
    ['DATA on a stream never opened', H2Error.PROTOCOL_ERROR, (p) => p.send(0, 0, 7, Buffer.from('x'))],
    [
      'a header block interrupted by another frame',
      H2Error.PROTOCOL_ERROR,
      (p) => {
        p.send(1, 0, 1, REQUEST_BLOCK.subarray(0, 2));
        p.send(6, 0, 0, Buffer.alloc(8));
      },
    ],
    ['CONTINUATION without HEADERS', H2Error.PROTOCOL_ERROR, (p) => p.send(9, 0x4, 1, REQUEST_BLOCK)],
    [
      'HEADERS whose padding is longer than the frame',
      H2Error.PROTOCOL_ERROR,
      (p) => p.send(1, 0x4 | 0x8, 1, Buffer.concat([Buffer.from([200]), REQUEST_BLOCK])),
    ],
    [
      'DATA whose padding is longer than the frame',
      H2Error.PROTOCOL_ERROR,
      (p) => {
        p.send(1, 0x4, 1, REQUEST_BLOCK);
        p.send(0, 0x8, 1, Buffer.from([5, 1, 2]));
      },
    ],
    ['HEADERS with PRIORITY and no room for it', H2Error.FRAME_SIZE_ERROR, (p) => p.send(1, 0x24, 1, Buffer.alloc(3))],
    ['a frame over 16 KiB', H2Error.FRAME_SIZE_ERROR, (p) => p.send(0, 0, 1, Buffer.alloc(16_385))],
    ['HEADERS on an even stream', H2Error.PROTOCOL_ERROR, (p) => p.send(1, 0x5, 2, REQUEST_BLOCK)],
    ['a malformed header block', H2Error.COMPRESSION_ERROR, (p) => p.send(1, 0x5, 1, Buffer.from([0x80]))],
    ['PUSH_PROMISE from a client', H2Error.PROTOCOL_ERROR, (p) => p.send(5, 0x4, 1, Buffer.alloc(4))],
    ['PING of 7 bytes', H2Error.FRAME_SIZE_ERROR, (p) => p.send(6, 0, 0, Buffer.alloc(7))],
    ['SETTINGS of 5 bytes', H2Error.FRAME_SIZE_ERROR, (p) => p.send(4, 0, 0, Buffer.alloc(5))],
    ['a zero connection WINDOW_UPDATE', H2Error.PROTOCOL_ERROR, (p) => p.send(8, 0, 0, Buffer.alloc(4))],
    [
      'a connection window past 2^31 - 1',
      H2Error.FLOW_CONTROL_ERROR,
      (p) => p.send(8, 0, 0, Buffer.from([0x7f, 0xff, 0xff, 0xff])),
    ],
  ];
  for (const [name, code, act] of connectionErrors) {
    it(`ends the connection with GOAWAY on ${name}`, async () => {
      await start();
      const peer = await RawPeer.open();
      act(peer);
      expect(await peer.goaway()).toBe(code);
    });
  }

  it('says why in the GOAWAY debug data, and tells onConnectionError', async () => {
    const errors: Array<[number, string]> = [];
    await start({ onConnectionError: (code, reason) => errors.push([code, reason]) });
    const peer = await RawPeer.open();
    peer.send(6, 0, 0, Buffer.alloc(7));
    const goaway = await peer.waitFor((f) => f.type === 7);
    expect(goaway.payload.subarray(8).toString()).toBe('PING of bad length');
    expect(errors).toEqual([[H2Error.FRAME_SIZE_ERROR, 'PING of bad length']]);
  });

  it('ends a connection that does not start with the HTTP/2 preface', async () => {
    await start();
    const peer = await RawPeer.open(false);
    peer.socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n');
    expect(await peer.goaway()).toBe(H2Error.PROTOCOL_ERROR);
  });

  it('ends a connection that sends no preface in time', async () => {
    await start({ prefaceTimeoutMs: 50 });
    const peer = await RawPeer.open(false);
    await new Promise<void>((resolve) => peer.socket.once('close', () => resolve()));
    expect(peer.ended).toBe(true);
  });
});

describe('HTTP/2 transport review: resource bounds and lingering connections', () => {
  it('ends a connection that sends CONTINUATION frames without end', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(1, 0, 1, REQUEST_BLOCK.subarray(0, 2));
    // Empty CONTINUATIONs add nothing to the block's size, but each one is kept.
    const empty = Buffer.alloc(9);
    empty[3] = 9;
    empty.writeUInt32BE(1, 5);
    const burst = Buffer.concat(Array.from({ length: 10_000 }, () => empty));
    for (let i = 0; i < 20 && !peer.ended; i++) {
      peer.socket.write(burst);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
  });

  /** Heap and buffer memory in use, after a full collection. */
  function memoryInUse(): number {
    (runInNewContext('gc') as () => void)();
    const { heapUsed, arrayBuffers } = process.memoryUsage();
    return heapUsed + arrayBuffers;
  }

  /** Opens stream 1 (request not ended), sends what `fill` writes, and waits until the server read it all. */
  async function heldFor(fill: (peer: RawPeer) => void): Promise<{ size: number; held: number }> {
    setFlagsFromString('--expose-gc');
    const opened: H2Stream[] = [];
    await start({
      onStream: (stream) => {
        opened.push(stream);
        stream.handler = { body: () => {}, tooLarge: () => {}, aborted: () => {} };
      },
    });
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    await peer.waitFor((f) => f.type === 4 && (f.flags & 1) === 1);
    const before = memoryInUse();
    fill(peer);
    peer.send(6, 0, 0, Buffer.from('syncsync'));
    await peer.waitFor((f) => f.type === 6 && (f.flags & 1) === 1);
    peer.frames.length = 0;
    // Buffers are freed a little after the collection that finds them dead.
    for (let i = 0; i < 2; i++) {
      memoryInUse();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const held = memoryInUse() - before;
    return { size: (opened[0] as H2Stream).size, held };
  }

  it('does not hold whole reads for the few body bytes they carry', async () => {
    // 1 byte of body, then a frame of an unknown type (ignored) that fills the rest of the read.
    const { size, held } = await heldFor((peer) => {
      for (let i = 0; i < 1000; i++) {
        peer.send(0, 0, 1, Buffer.from('x'));
        peer.send(0xfa, 0, 0, Buffer.alloc(16_000));
      }
    });
    expect(size).toBe(1000);
    expect(held).toBeLessThan(4 * 1024 * 1024);
  });

  it('holds a body of many 1-byte DATA frames in about its size', async () => {
    const { size, held } = await heldFor((peer) => {
      const frame = Buffer.from([0, 0, 1, 0, 0, 0, 0, 0, 1, 0x78]);
      peer.socket.write(Buffer.concat(Array.from({ length: 100_000 }, () => frame)));
    });
    expect(size).toBe(100_000);
    expect(held).toBeLessThan(4 * 1024 * 1024);
  });

  it('closes a connection it ended with GOAWAY even if the peer keeps its side open', async () => {
    await start({ lingerMs: 200 });
    const socket = netConnect({ port, host: '127.0.0.1', allowHalfOpen: true });
    cleanup.push(() => socket.destroy());
    socket.on('error', () => {});
    socket.resume();
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(PREFACE);
    socket.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]));
    // PING of 7 bytes: a connection error.
    socket.write(Buffer.from([0, 0, 7, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]));
    await new Promise((resolve) => socket.once('end', resolve));
    // The peer saw GOAWAY and the end, but never ends nor closes its own side.
    const connections = () => new Promise<number>((resolve) => server?.server.getConnections((_e, n) => resolve(n)));
    expect(await connections()).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(await connections()).toBe(0);
  });
});

/** A request header block from `fields` (name, value pairs), every field a literal. */
function block(...fields: Array<[string, string]>): Buffer {
  return Buffer.concat(fields.map(([name, value]) => encodeLiteral(name, value)));
}
const GOOD: Array<[string, string]> = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/x'],
  ['content-type', 'application/grpc'],
];

/** The error code of the first RST_STREAM on stream `id`. */
async function resetCode(peer: RawPeer, id: number): Promise<number> {
  return (await peer.waitFor((f) => f.type === 3 && f.id === id)).payload.readUInt32BE(0);
}

/** The connection still serves: a request on stream `id` is answered. */
async function stillServes(peer: RawPeer, id: number): Promise<void> {
  peer.send(1, 0x5, id, REQUEST_BLOCK);
  await peer.waitFor((f) => f.type === 1 && f.id === id);
  expect(peer.frames.some((f) => f.type === 7)).toBe(false);
}

describe('HTTP/2 transport limits: floods, resets, timeouts, caps', () => {
  it('ends a connection whose PING answers pile up unread with ENHANCE_YOUR_CALM', async () => {
    const limits: string[] = [];
    await start({ maxQueuedControlFrames: 100, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    const ping = rawFrame(6, 0, 0, Buffer.alloc(8));
    peer.socket.write(Buffer.concat(Array.from({ length: 5000 }, () => ping)));
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['control_frames']);
    // Far fewer answers than PINGs were sent.
    expect(peer.frames.filter((f) => f.type === 6).length).toBeLessThanOrEqual(100);
  });

  it('ends a connection past its budget of PINGs, even one that reads every answer', async () => {
    const limits: string[] = [];
    await start({ controlFrameBurst: 50, controlFramesPerSecond: 0, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    for (let i = 0; i < 49; i++) {
      peer.send(6, 0, 0, Buffer.alloc(8, i));
      await peer.waitFor((f) => f.type === 6 && f.payload[0] === i);
    }
    await stillServes(peer, 1);
    // The client's SETTINGS took one, the stream opened gave one back: the 51st PING is still in budget,
    // the 52nd is not.
    peer.send(6, 0, 0, Buffer.alloc(8, 98));
    await peer.waitFor((f) => f.type === 6 && f.payload[0] === 98);
    peer.send(6, 0, 0, Buffer.alloc(8, 99));
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['control_frames']);
  });

  it('ends a SETTINGS flood the same way', async () => {
    await start({ maxQueuedControlFrames: 100 });
    const peer = await RawPeer.open();
    const settings = rawFrame(4, 0, 0, Buffer.alloc(0));
    peer.socket.write(Buffer.concat(Array.from({ length: 5000 }, () => settings)));
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
  });

  it('answers a peer that pings and reads, ping after ping, within its budget', async () => {
    await start({ maxQueuedControlFrames: 10 });
    const peer = await RawPeer.open();
    for (let i = 0; i < 200; i++) {
      const payload = Buffer.alloc(8);
      payload.writeUInt32BE(i, 0);
      peer.send(6, 0, 0, payload);
      await peer.waitFor((f) => f.type === 6 && f.payload.readUInt32BE(0) === i);
    }
    await stillServes(peer, 1);
  });

  it('ends a connection past its budget of stream resets with ENHANCE_YOUR_CALM', async () => {
    const limits: string[] = [];
    await start({ resetBurst: 50, resetsPerSecond: 0, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    const pairs = (from: number, count: number) =>
      Buffer.concat(
        Array.from({ length: count }, (_, i) => [
          rawFrame(1, 0x5, from + 2 * i, REQUEST_BLOCK),
          rawFrame(3, 0, from + 2 * i, Buffer.from([0, 0, 0, 8])),
        ]).flat(),
      );
    peer.socket.write(pairs(1, 50));
    await stillServes(peer, 101);
    peer.socket.write(pairs(103, 1));
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['resets']);
  });

  it('charges streams this side resets for a protocol error, a WINDOW_UPDATE of 0 after an answer too (MadeYouReset)', async () => {
    const limits: string[] = [];
    await start({ resetBurst: 50, resetsPerSecond: 0, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    // Each call complete, then a WINDOW_UPDATE of 0 on its stream: the peer never sends RST_STREAM.
    const calls = (from: number, count: number) =>
      Buffer.concat(
        Array.from({ length: count }, (_, i) => [
          rawFrame(1, 0x5, from + 2 * i, REQUEST_BLOCK),
          rawFrame(8, 0, from + 2 * i, Buffer.from([0, 0, 0, 0])),
        ]).flat(),
      );
    peer.socket.write(calls(1, 50));
    await stillServes(peer, 101);
    peer.socket.write(calls(103, 1));
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['resets']);
  });

  it.each([
    ['WINDOW_UPDATE', rawFrame(8, 0, 0, Buffer.from([0, 0, 0, 1]))],
    ['PRIORITY', rawFrame(2, 0, 3, Buffer.from([0, 0, 0, 0, 15]))],
    ['empty DATA', rawFrame(0, 0, 1, Buffer.alloc(0))],
    ['unknown type', rawFrame(0xfa, 0, 0, Buffer.alloc(4))],
  ])('ends a flood of %s frames past the control budget (GOAWAY ENHANCE_YOUR_CALM)', async (_name, unit) => {
    const limits: string[] = [];
    await start({ controlFrameBurst: 100, controlFramesPerSecond: 0, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    // A stream left open, for the empty DATA.
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    peer.socket.write(Buffer.concat(Array.from({ length: 90 }, () => unit)));
    await stillServes(peer, 3);
    peer.socket.write(Buffer.concat(Array.from({ length: 20 }, () => unit)));
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['control_frames']);
  });

  it('refuses streams past maxStreams on a connection that holds several, not on one that holds few', async () => {
    const limits: string[] = [];
    await start({ maxStreams: 6, onLimit: (l) => limits.push(l) });
    const a = await RawPeer.open();
    // Six streams whose request never ends: the process holds as many as it may.
    for (let id = 1; id <= 11; id += 2) a.send(1, 0x4, id, REQUEST_BLOCK);
    a.send(1, 0x4, 13, REQUEST_BLOCK);
    expect(await a.waitFor((f) => f.type === 3 && f.id === 13)).toMatchObject({
      payload: Buffer.from([0, 0, 0, H2Error.REFUSED_STREAM]),
    });
    expect(limits).toEqual(['streams']);
    // Another client, with no stream open, still gets its call answered.
    const b = await RawPeer.open();
    await stillServes(b, 1);
  });

  it('ends a connection whose streams end by timeout past its budget', async () => {
    const limits: string[] = [];
    const streams: H2Stream[] = [];
    await start({
      timeoutBurst: 3,
      timeoutsPerSecond: 0,
      onLimit: (l) => limits.push(l),
      onStream: (stream) => {
        streams.push(stream);
      },
    });
    const peer = await RawPeer.open();
    for (let id = 1; id <= 7; id += 2) peer.send(1, 0x4, id, REQUEST_BLOCK);
    await expect.poll(() => streams.length).toBe(4);
    for (const stream of streams) {
      stream.sendStatus(4, 'timeout');
      stream.timedOut();
    }
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['timeouts']);
  });

  it('gives resets back over time', async () => {
    await start({ resetBurst: 20, resetsPerSecond: 100 });
    const peer = await RawPeer.open();
    let id = 1;
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 20; i++, id += 2) {
        peer.send(1, 0x5, id, REQUEST_BLOCK);
        peer.send(3, 0, id, Buffer.from([0, 0, 0, 8]));
      }
      // 20 resets come back in 200 ms.
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    await stillServes(peer, id);
  });

  it('ends a connection whose frame stays unfinished past frameTimeoutMs', async () => {
    const limits: string[] = [];
    await start({ frameTimeoutMs: 200, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    // Half of a frame header, then nothing.
    peer.socket.write(Buffer.from([0, 0, 8, 6]));
    const started = Date.now();
    expect(await peer.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(limits).toEqual(['frame_timeout']);
  });

  it('ends a connection whose header block stays unfinished past frameTimeoutMs, even as PINGs come', async () => {
    await start({ frameTimeoutMs: 200 });
    const peer = await RawPeer.open();
    peer.send(1, 0x1, 1, REQUEST_BLOCK.subarray(0, 2));
    const goaway = peer.goaway();
    // CONTINUATIONs that never end the block.
    for (let i = 0; i < 10 && !peer.ended; i++) {
      peer.send(9, 0, 1, Buffer.alloc(0));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(await goaway).toBe(H2Error.ENHANCE_YOUR_CALM);
  });

  it('keeps a connection that sends a body slowly, frame by frame', async () => {
    await start({ frameTimeoutMs: 200 });
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    for (let i = 0; i < 8; i++) {
      peer.send(0, 0, 1, Buffer.from('x'));
      await new Promise((resolve) => setTimeout(resolve, 60));
    }
    peer.send(0, 0x1, 1, Buffer.from('y'));
    const data = await peer.waitFor((f) => f.type === 0 && f.id === 1);
    expect(data.payload).toEqual(answerTo(Buffer.from('xxxxxxxxy')));
  });

  it('closes a connection that opens no stream within noStreamTimeoutMs (GOAWAY NO_ERROR)', async () => {
    const limits: string[] = [];
    await start({ noStreamTimeoutMs: 200, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    // PINGs do not keep it: it never opens a stream.
    const timer = setInterval(() => peer.send(6, 0, 0, Buffer.alloc(8)), 50);
    cleanup.push(() => clearInterval(timer));
    expect(await peer.goaway()).toBe(H2Error.NO_ERROR);
    expect(limits).toEqual(['no_stream_timeout']);
  });

  it('closes a connection idle past idleTimeoutMs; PINGs keep it open', async () => {
    const limits: string[] = [];
    await start({ idleTimeoutMs: 300, onLimit: (l) => limits.push(l) });
    const peer = await RawPeer.open();
    await stillServes(peer, 1);
    const timer = setInterval(() => peer.send(6, 0, 0, Buffer.alloc(8)), 50);
    await new Promise((resolve) => setTimeout(resolve, 900));
    clearInterval(timer);
    await stillServes(peer, 3);
    expect(await peer.goaway()).toBe(H2Error.NO_ERROR);
    expect(limits).toEqual(['idle_timeout']);
  });

  it('past maxConnections, a new connection ends the oldest one with no stream open (GOAWAY NO_ERROR)', async () => {
    const limits: string[] = [];
    await start({ maxConnections: 2, onLimit: (l) => limits.push(l) });
    const a = await RawPeer.open();
    const b = await RawPeer.open();
    await a.waitFor((f) => f.type === 4);
    await b.waitFor((f) => f.type === 4);
    const c = await RawPeer.open();
    expect(await a.goaway()).toBe(H2Error.NO_ERROR);
    expect(limits).toEqual(['connections']);
    await stillServes(c, 1);
    await stillServes(b, 1);
  });

  it('refuses a new connection past maxConnections when every connection has a stream open', async () => {
    const limits: string[] = [];
    const hold: H2Stream[] = [];
    await start({ maxConnections: 2, hold, onLimit: (l) => limits.push(l) });
    const a = await RawPeer.open();
    const b = await RawPeer.open();
    // A stream each, left unanswered.
    a.send(1, 0x5, 1, REQUEST_BLOCK);
    b.send(1, 0x5, 1, REQUEST_BLOCK);
    await expect.poll(() => hold.length).toBe(2);
    const c = await RawPeer.open();
    await new Promise<void>((resolve) => c.socket.once('close', () => resolve()));
    expect(c.frames).toEqual([]);
    expect(limits).toEqual(['connections']);
  });

  it("past maxConnectionsPerAddress, a new connection ends that address's oldest idle one", async () => {
    await start({ maxConnections: 10, maxConnectionsPerAddress: 2 });
    const a = await RawPeer.open();
    const b = await RawPeer.open();
    await a.waitFor((f) => f.type === 4);
    await b.waitFor((f) => f.type === 4);
    const c = await RawPeer.open();
    expect(await a.goaway()).toBe(H2Error.NO_ERROR);
    await stillServes(c, 1);
  });

  it('refuses header blocks past the bytes all connections may buffer', async () => {
    const limits: string[] = [];
    await start({ maxBufferedBytes: 100_000, onLimit: (l) => limits.push(l) });
    const a = await RawPeer.open();
    const b = await RawPeer.open();
    // Each holds an unfinished block of 30 kB: together, past the half of the 100 kB the process
    // buffers that header blocks may take.
    a.send(1, 0, 1, REQUEST_BLOCK.subarray(0, 2));
    for (let i = 0; i < 2; i++) a.send(9, 0, 1, Buffer.alloc(15_000));
    // A frame on `a` now would interrupt its block; give the server time to read it instead.
    await new Promise((resolve) => setTimeout(resolve, 300));
    b.send(1, 0, 1, REQUEST_BLOCK.subarray(0, 2));
    for (let i = 0; i < 2; i++) b.send(9, 0, 1, Buffer.alloc(15_000));
    expect(await b.goaway()).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['buffered_bytes']);
  });

  it('refuses a request body past the bytes all connections may buffer, and keeps the connection', async () => {
    const limits: string[] = [];
    const hold: H2Stream[] = [];
    await start({ maxBufferedBytes: 100_000, onLimit: (l) => limits.push(l), hold });
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    for (let i = 0; i < 8; i++) peer.send(0, 0, 1, Buffer.alloc(16_000));
    expect(await resetCode(peer, 1)).toBe(H2Error.ENHANCE_YOUR_CALM);
    expect(limits).toEqual(['buffered_bytes']);
    await stillServesHeld(peer, hold, 3);
  });

  it('stops reading a peer that does not read its answers, and cuts it when its output stalls', async () => {
    const limits: string[] = [];
    let unread = 0;
    await start({
      frameTimeoutMs: 300,
      onLimit: (l) => {
        limits.push(l);
        unread = socket.writableLength;
      },
    });
    const socket = netConnect(port, '127.0.0.1');
    cleanup.push(() => socket.destroy());
    socket.on('error', () => {});
    await new Promise((resolve) => socket.once('connect', resolve));
    // Never reads: 2,000 requests whose answers are 16 kB each, 32 MB in all.
    socket.pause();
    socket.write(PREFACE);
    // All the window the server could want, so that flow control does not hold the answers back.
    socket.write(rawFrame(4, 0, 0, Buffer.from([0, 4, 0x7f, 0xff, 0xff, 0xff])));
    socket.write(rawFrame(8, 0, 0, Buffer.from([0x7f, 0xff, 0, 0])));
    const body = Buffer.alloc(16_000, 'z');
    for (let i = 0; i < 2000; i++) {
      socket.write(rawFrame(1, 0x4, 2 * i + 1, REQUEST_BLOCK));
      socket.write(rawFrame(0, 0x1, 2 * i + 1, body));
    }
    await new Promise<void>((resolve) => socket.once('close', () => resolve()));
    expect(limits).toEqual(['output_stalled']);
    // It stopped reading long before the end: most of the requests were never read.
    expect(unread).toBeGreaterThan(4 * 1024 * 1024);
  });
});

/** The connection still serves (the test server holds answers): a request on stream `id` reaches it. */
async function stillServesHeld(peer: RawPeer, hold: H2Stream[], id: number): Promise<void> {
  peer.send(1, 0x5, id, REQUEST_BLOCK);
  await expect.poll(() => hold.some((s) => s.id === id)).toBe(true);
}

describe('HTTP/2 transport: malformed requests and stream states (RFC 9113 §5.1, §8.1-8.3)', () => {
  const malformed: Array<[string, Buffer]> = [
    ['no :method', block(...GOOD.filter(([n]) => n !== ':method'))],
    ['no :scheme', block(...GOOD.filter(([n]) => n !== ':scheme'))],
    ['no :path', block(...GOOD.filter(([n]) => n !== ':path'))],
    ['an empty :path', block([':method', 'POST'], [':scheme', 'http'], [':path', ''])],
    ['an unknown pseudo-header', block(...GOOD, [':foo', 'bar'])],
    ['a response pseudo-header', block([':status', '200'], ...GOOD)],
    ['a duplicated :path', block(...GOOD, [':path', '/y'])],
    ['a duplicated :method', block([':method', 'POST'], ...GOOD)],
    ['a pseudo-header after a regular field', block(['content-type', 'application/grpc'], ...GOOD.slice(0, 3))],
    ['an uppercase field name', block(...GOOD, ['X-Trace', '1'])],
    ['a field name with a space', block(...GOOD, ['x trace', '1'])],
    ['an empty field name', block(...GOOD, ['', '1'])],
    ['a connection header', block(...GOOD, ['connection', 'keep-alive'])],
    ['a keep-alive header', block(...GOOD, ['keep-alive', '5'])],
    ['a transfer-encoding header', block(...GOOD, ['transfer-encoding', 'chunked'])],
    ['an upgrade header', block(...GOOD, ['upgrade', 'h2c'])],
    ['te other than trailers', block(...GOOD, ['te', 'gzip'])],
    ['a value with a line feed', block(...GOOD, ['x-a', 'a\nb'])],
    ['a value with a leading space', block(...GOOD, ['x-a', ' a'])],
    ['a content-length that is not a number', block(...GOOD, ['content-length', '1e3'])],
    ['two content-lengths that disagree', block(...GOOD, ['content-length', '1'], ['content-length', '2'])],
    ['a content-length above 0 on HEADERS that end the stream', block(...GOOD, ['content-length', '5'])],
  ];
  for (const [name, headerBlock] of malformed) {
    it(`answers a request with ${name} with RST_STREAM PROTOCOL_ERROR, and keeps the connection`, async () => {
      const opened: number[] = [];
      await start({
        onStream: (stream) => {
          opened.push(stream.id);
          stream.sendMessage(Buffer.from('ok'));
        },
      });
      const peer = await RawPeer.open();
      peer.send(1, 0x5, 1, headerBlock);
      expect(await resetCode(peer, 1)).toBe(H2Error.PROTOCOL_ERROR);
      await stillServes(peer, 3);
      expect(opened).toEqual([3]);
    });
  }

  it('accepts te: trailers, :authority and a content-length that agrees with the DATA', async () => {
    await start();
    const peer = await RawPeer.open();
    const fields: Array<[string, string]> = [[':authority', 'x'], ...GOOD, ['te', 'trailers'], ['content-length', '5']];
    peer.send(1, 0x4, 3, block(...fields));
    peer.send(0, 0, 3, Buffer.from('ab'));
    peer.send(0, 0x1, 3, Buffer.from('cde'));
    const data = await peer.waitFor((f) => f.type === 0 && f.id === 3);
    expect(data.payload).toEqual(answerTo(Buffer.from('abcde')));
  });

  it('resets a stream whose DATA runs past its content-length, or ends short of it', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, block(...GOOD, ['content-length', '3']));
    peer.send(0, 0x1, 1, Buffer.from('abcd'));
    expect(await resetCode(peer, 1)).toBe(H2Error.PROTOCOL_ERROR);
    peer.send(1, 0x4, 3, block(...GOOD, ['content-length', '3']));
    peer.send(0, 0x1, 3, Buffer.from('ab'));
    expect(await resetCode(peer, 3)).toBe(H2Error.PROTOCOL_ERROR);
    await stillServes(peer, 5);
  });

  it('resets a request whose trailers carry a pseudo-header', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    peer.send(0, 0, 1, Buffer.from('abc'));
    peer.send(1, 0x5, 1, block([':path', '/y']));
    expect(await resetCode(peer, 1)).toBe(H2Error.PROTOCOL_ERROR);
    await stillServes(peer, 3);
  });

  it('ends the connection (PROTOCOL_ERROR) on HEADERS with a stream id at or below the last one', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(1, 0x5, 5, REQUEST_BLOCK);
    await peer.waitFor((f) => f.type === 1 && f.id === 5);
    peer.send(1, 0x5, 3, REQUEST_BLOCK);
    expect(await peer.goaway()).toBe(H2Error.PROTOCOL_ERROR);
  });

  it('ends the connection (STREAM_CLOSED) on DATA on a stream closed both ways', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(1, 0x5, 1, REQUEST_BLOCK);
    await peer.waitFor((f) => f.type === 1 && f.id === 1 && (f.flags & 1) === 1);
    peer.send(0, 0, 1, Buffer.from('late'));
    expect(await peer.goaway()).toBe(H2Error.STREAM_CLOSED);
  });

  it('resets (STREAM_CLOSED) DATA and HEADERS on a half-closed (remote) stream', async () => {
    const hold: H2Stream[] = [];
    await start({ hold });
    const peer = await RawPeer.open();
    peer.send(1, 0x5, 1, REQUEST_BLOCK);
    await expect.poll(() => hold.length).toBe(1);
    peer.send(0, 0, 1, Buffer.from('more'));
    expect(await resetCode(peer, 1)).toBe(H2Error.STREAM_CLOSED);
    peer.send(1, 0x5, 3, REQUEST_BLOCK);
    await expect.poll(() => hold.length).toBe(2);
    peer.send(1, 0x5, 3, block(['x-trailer', '1']));
    expect(await resetCode(peer, 3)).toBe(H2Error.STREAM_CLOSED);
    await stillServesHeld(peer, hold, 5);
  });

  it('resets (PROTOCOL_ERROR) a stream that depends on itself, by PRIORITY or in its HEADERS', async () => {
    await start();
    const peer = await RawPeer.open();
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    peer.send(2, 0, 1, Buffer.from([0, 0, 0, 1, 16]));
    expect(await resetCode(peer, 1)).toBe(H2Error.PROTOCOL_ERROR);
    peer.send(1, 0x5 | 0x20, 3, Buffer.concat([Buffer.from([0, 0, 0, 3, 16]), REQUEST_BLOCK]));
    expect(await resetCode(peer, 3)).toBe(H2Error.PROTOCOL_ERROR);
    // A PRIORITY on another stream is fine.
    peer.send(2, 0, 7, Buffer.from([0, 0, 0, 1, 16]));
    await stillServes(peer, 9);
  });

  it('resets (FLOW_CONTROL_ERROR) a stream sent past the window it announced', async () => {
    await start({ maxBodyBytes: 100_000 });
    const peer = await RawPeer.open();
    const settings = await peer.waitFor((f) => f.type === 4 && (f.flags & 1) === 0);
    const window = [0, 6, 12, 18]
      .map((at) => [settings.payload.readUInt16BE(at), settings.payload.readUInt32BE(at + 2)])
      .find(([key]) => key === 4)?.[1];
    expect(window).toBe(100_001);
    peer.send(1, 0x4, 1, REQUEST_BLOCK);
    // The 7th frame of 16,384 bytes goes past the window, while the body is still under its limit.
    for (let i = 0; i < 7; i++) peer.send(0, 0, 1, Buffer.alloc(16_384, 'p'));
    expect(await resetCode(peer, 1)).toBe(H2Error.FLOW_CONTROL_ERROR);
    await stillServes(peer, 3);
  });
});
