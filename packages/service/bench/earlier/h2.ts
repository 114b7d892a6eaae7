// The gRPC transport as it was before the hostile-peer bounds (commit de63ead), kept so that
// bench/service.ts can run it beside the current one in the same run (see ./register.mjs). Not shipped.
// The server side of HTTP/2 (RFC 9113), cleartext with prior knowledge as gRPC clients and Envoy speak it,
// for unary gRPC calls only, written on node:net.
//
// Why not node:http2: every stream there is a Duplex with its own C++ peer, and at 10,000 calls/s those
// objects outlive young-generation collections, so the process pauses 10 to 30 ms in full collections
// about once a second; a node:http2 server that did nothing but answer still had a p99 of 25 ms at 10,000
// calls/s on the 2-core development machine, where the service on this transport, deciding every call,
// has 2 to 5 ms (docs/service.md). A unary call needs little
// of HTTP/2: one header block and a few DATA frames in, three frames out. So a stream here is one small
// object, a whole read is parsed in one pass, and every answer produced in it leaves in one write.
//
// What is implemented: the connection preface and SETTINGS, HPACK (./hpack.ts), HEADERS and CONTINUATION,
// DATA with padding, flow control both ways (DATA waits for WINDOW_UPDATE when the peer's window is
// full), PING, RST_STREAM, GOAWAY both ways (graceful shutdown), the concurrent stream limit, and the
// connection and stream errors of RFC 9113 §5.4. Not implemented, as no gRPC client needs them: server
// push (announced off), the HTTP/1.1 Upgrade to h2c, priorities (parsed and ignored, as §5.3.2 allows).

import { createServer, type Server, type Socket } from 'node:net';
import { encodeIndexed, encodeLiteral, HpackDecoder, HpackError } from './hpack.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

const DATA = 0x0;
const HEADERS = 0x1;
const PRIORITY = 0x2;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PUSH_PROMISE = 0x5;
const PING = 0x6;
const GOAWAY = 0x7;
const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;

/** HTTP/2 error codes (RFC 9113 §7). */
export const H2Error = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE = 0x6;

/** The flow-control window every stream and connection starts with. */
const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;
/** Largest frame payload accepted: the default SETTINGS_MAX_FRAME_SIZE, which this side never raises. */
const MAX_FRAME_SIZE = 16_384;
/** The connection's receive window: raised at once, so many calls can send at the same time. */
const CONNECTION_WINDOW = 16 * 1024 * 1024;
/** HPACK dynamic table size this side keeps (the protocol's default). */
const HEADER_TABLE_SIZE = 4096;
/** Largest header block (HEADERS and its CONTINUATIONs, compressed) read; past it, the connection ends. */
const MAX_HEADER_BLOCK = 256 * 1024;
/**
 * Most CONTINUATION frames a header block may take. Clients split a block at the frame size (16 KiB here),
 * so the largest block takes 16; without a count, empty CONTINUATIONs would grow a block forever.
 */
const MAX_CONTINUATIONS = 64;
/** How long a connection this side ended waits for the peer to close its side before it is cut, in ms. */
const LINGER_MS = 5000;
/** Past this much output waiting for a peer that does not read, the connection ends. */
const MAX_UNSENT_BYTES = 16 * 1024 * 1024;

/** Options of {@link createH2Server}. */
export interface H2ServerOptions {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams over it are refused (REFUSED_STREAM, which clients retry). */
  maxConcurrentStreams: number;
  /** Largest decoded header list (RFC 9113 size: name + value + 32 per field); larger ones get `tooLarge`. */
  maxHeaderListSize: number;
  /** Largest request body (all DATA of a stream); larger ones get {@link StreamHandler.tooLarge}. */
  maxBodyBytes: number;
  /** Largest total of request bodies a connection buffers; past it, the stream is reset (ENHANCE_YOUR_CALM). */
  maxSessionMemory: number;
  /** How long a new connection may take to send its preface, in ms. */
  prefaceTimeoutMs: number;
  /** How long a connection this side ended (GOAWAY) waits for the peer to close, in ms; then it is cut. */
  lingerMs?: number;
  /**
   * A stream's request headers arrived, as a flat list [name, value, name, value, ...] (latin1), or
   * undefined when the list is larger than {@link maxHeaderListSize}. The callee answers the stream or sets
   * {@link H2Stream.handler} to hear of its body.
   */
  onStream(stream: H2Stream, fields: string[] | undefined): void;
  /** A fault in this server's own code while reading a connection, which then ends. */
  onError(error: unknown): void;
  /** The peer broke the protocol (`code`, an {@link H2Error}); the connection ended with GOAWAY. */
  onConnectionError?(code: number, reason: string, remoteAddress: string | undefined): void;
  /**
   * Makes the listening server, which hands each connection to `accept`: a TLS server hands its sockets
   * once their handshake is done. @default node:net's `createServer` (cleartext)
   */
  createServer?(accept: (socket: Socket) => void): Server;
}

/** What a stream tells the code answering it. */
export interface StreamHandler {
  /** The request ended; `body` is all its DATA (empty when there was none). */
  body(body: Buffer): void;
  /** The body went past {@link H2ServerOptions.maxBodyBytes}; what follows is discarded. */
  tooLarge(): void;
  /** The stream ended before it was answered: the peer reset it, or the connection went away. */
  aborted(): void;
}

/** The HTTP/2 side of a gRPC server: listen, then close gracefully. */
export interface H2Server {
  readonly server: Server;
  /** Sends GOAWAY on every connection; each ends once its open streams are answered. */
  goAway(): void;
  /** Cuts every connection. */
  destroy(): void;
}

// Header blocks of answers, encoded once: literal fields never indexed, so the peer's decoder needs no
// dynamic table of ours to be in sync with.
const RESPONSE_BLOCK = Buffer.concat([
  encodeIndexed(8), // :status 200
  encodeLiteral('content-type', 'application/grpc'),
  encodeLiteral('grpc-accept-encoding', 'identity'),
]);
const OK_TRAILERS_BLOCK = encodeLiteral('grpc-status', '0');
const TRAILERS_ONLY_PREFIX = Buffer.concat([encodeIndexed(8), encodeLiteral('content-type', 'application/grpc')]);

/** One request stream. Answered once, by {@link sendMessage}, {@link sendStatus} or {@link sendHttpStatus}. */
export class H2Stream {
  /** Hears of the body and of an abort; set by {@link H2ServerOptions.onStream}. */
  handler: StreamHandler | undefined = undefined;
  /** The peer ended its side (END_STREAM). */
  remoteEnded = false;
  /** This side has answered. */
  answered = false;
  /** No more frames either way. */
  closed = false;
  sendWindow: number;
  recvWindow = DEFAULT_WINDOW;
  /**
   * Request body: its first `size` bytes. A copy of the DATA, grown as it comes, so that neither the reads
   * it came in nor one object per frame are held; only a body that arrives whole in its last frame is a
   * view of the read, handed over at once.
   */
  body: Buffer | undefined = undefined;
  size = 0;
  /** The body went past its limit: DATA is counted, not kept. */
  discarding = false;
  /** Work is under way for this stream (see {@link hold}). */
  holding = false;
  /** DATA (and trailers) of the answer waiting for the peer's flow-control window. */
  pending: Buffer | undefined = undefined;
  pendingTrailers: Buffer | undefined = undefined;

  constructor(
    readonly session: H2Session,
    readonly id: number,
    sendWindow: number,
  ) {
    this.sendWindow = sendWindow;
  }

  /** What the current server tells a stream it answers for its read timeout: nothing to do here. */
  timedOut(): void {}

  /** Answers one gRPC message (`payload` unframed) and status OK. */
  sendMessage(payload: Buffer): void {
    if (this.answered || this.closed) return;
    this.answered = true;
    this.session.sendMessage(this, payload);
  }

  /** Answers a trailers-only response with a gRPC status; `message` already percent-encoded. */
  sendStatus(status: number, message: string): void {
    if (this.answered || this.closed) return;
    this.answered = true;
    const block = Buffer.concat([
      TRAILERS_ONLY_PREFIX,
      encodeLiteral('grpc-status', String(status)),
      ...(message === '' ? [] : [encodeLiteral('grpc-message', message)]),
    ]);
    this.session.sendHeaders(this, block, true);
  }

  /**
   * Marks work under way for this stream (an asynchronous decision): until {@link release}, the stream
   * counts against the concurrent stream limit, even once the peer has reset it.
   */
  hold(): void {
    this.holding = true;
  }

  /** The work {@link hold} marked is over. */
  release(): void {
    if (!this.holding) return;
    this.holding = false;
    if (this.closed) this.session.released();
  }

  /** Answers a bare HTTP status (not gRPC, e.g. 415 to a request that is not gRPC). */
  sendHttpStatus(status: number): void {
    if (this.answered || this.closed) return;
    this.answered = true;
    this.session.sendHeaders(this, encodeLiteral(':status', String(status)), true);
  }
}

/** Writes a frame header at `at`. */
function frameHeader(out: Buffer, at: number, length: number, type: number, flags: number, id: number): void {
  out[at] = length >>> 16;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(id, at + 5);
}

function frame(type: number, flags: number, id: number, payload: Buffer | undefined): Buffer {
  const length = payload === undefined ? 0 : payload.length;
  const out = Buffer.allocUnsafe(9 + length);
  frameHeader(out, 0, length, type, flags, id);
  payload?.copy(out, 9);
  return out;
}

function u32(value: number): Buffer {
  const out = Buffer.allocUnsafe(4);
  out.writeUInt32BE(value, 0);
  return out;
}

/** The padding length of a PADDED frame whose payload is `buf[start..end)`, checked against the payload. */
function padLength(buf: Buffer, start: number, end: number): number {
  if (end - start < 1) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'padded frame too short');
  const pad = buf[start] as number;
  if (pad > end - start - 1) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'padding longer than the frame');
  return pad;
}

/** A connection error: the connection ends with GOAWAY carrying `code`. */
class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** One HTTP/2 connection. */
export class H2Session {
  private readonly streams = new Map<number, H2Stream>();
  private readonly decoder = new HpackDecoder(HEADER_TABLE_SIZE);
  private prefaceSeen = false;
  private settingsSeen = false;
  private rest: Buffer | undefined = undefined;
  /** Highest stream id the peer opened. */
  private lastStreamId = 0;
  /** Set once GOAWAY is sent: streams above it are refused. */
  private goAwayId: number | undefined = undefined;
  private peerGoneAway = false;
  private ended = false;
  /** Frames to write at the end of this turn. */
  private out: Buffer[] = [];
  private flushQueued = false;
  private processing = false;
  /** A header block whose CONTINUATIONs are still arriving. */
  private block: { id: number; flags: number; fragments: Buffer[]; size: number } | undefined = undefined;
  // Flow control.
  private sendWindow = DEFAULT_WINDOW;
  private recvWindow = DEFAULT_WINDOW;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = 16_384;
  /** Streams whose answer waits for window. */
  private readonly blocked = new Set<H2Stream>();
  /** Bytes of request bodies held. */
  private buffered = 0;
  private prefaceTimer: NodeJS.Timeout | undefined;
  /**
   * Streams closed (reset by the peer, most often) whose work goes on: they still count against the
   * concurrent stream limit, so a peer that opens and resets streams ("rapid reset", CVE-2023-44487)
   * cannot have more work under way than that limit, while one that cancels calls honestly keeps its
   * connection.
   */
  private held = 0;
  private lingerTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly socket: Socket,
    private readonly options: H2ServerOptions,
    private readonly onEnd: (session: H2Session) => void,
  ) {
    socket.setNoDelay(true);
    this.prefaceTimer = setTimeout(() => socket.destroy(), options.prefaceTimeoutMs);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('error', () => {});
    socket.on('close', () => this.closed());
    const settings = Buffer.allocUnsafe(18);
    settings.writeUInt16BE(SETTINGS_MAX_CONCURRENT_STREAMS, 0);
    settings.writeUInt32BE(options.maxConcurrentStreams, 2);
    settings.writeUInt16BE(SETTINGS_ENABLE_PUSH, 6);
    settings.writeUInt32BE(0, 8);
    settings.writeUInt16BE(SETTINGS_MAX_HEADER_LIST_SIZE, 12);
    settings.writeUInt32BE(options.maxHeaderListSize, 14);
    this.queue(frame(SETTINGS, 0, 0, settings));
    this.queue(frame(WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - DEFAULT_WINDOW)));
    this.recvWindow = CONNECTION_WINDOW;
    this.flush();
  }

  /** A closed stream's work is over: its place under the concurrent stream limit is free. */
  released(): void {
    this.held--;
  }

  /** Sends GOAWAY (NO_ERROR): no new streams; the connection ends when the open ones are answered. */
  goAway(): void {
    if (this.ended || this.goAwayId !== undefined) return;
    this.goAwayId = this.lastStreamId;
    this.queueGoAway(H2Error.NO_ERROR, '');
    this.endIfIdle();
    this.flush();
  }

  destroy(): void {
    this.socket.destroy();
  }

  private read(chunk: Buffer): void {
    if (this.ended) return;
    const buf = this.rest === undefined ? chunk : Buffer.concat([this.rest, chunk]);
    this.rest = undefined;
    let off = 0;
    this.processing = true;
    try {
      if (!this.prefaceSeen) {
        const have = Math.min(buf.length, PREFACE.length);
        if (buf.compare(PREFACE, 0, have, 0, have) !== 0) {
          throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
        }
        if (buf.length < PREFACE.length) {
          this.rest = buf;
          return;
        }
        this.prefaceSeen = true;
        clearTimeout(this.prefaceTimer);
        off = PREFACE.length;
      }
      while (buf.length - off >= 9) {
        const length = (buf[off] as number) * 65536 + (buf[off + 1] as number) * 256 + (buf[off + 2] as number);
        if (length > MAX_FRAME_SIZE) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'frame too large');
        if (buf.length - off - 9 < length) break;
        const type = buf[off + 3] as number;
        const flags = buf[off + 4] as number;
        const id = buf.readUInt32BE(off + 5) & 0x7fffffff;
        const start = off + 9;
        off = start + length;
        if (!this.settingsSeen) {
          if (type !== SETTINGS || (flags & FLAG_ACK) !== 0) {
            throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'the preface must be followed by SETTINGS');
          }
          this.settingsSeen = true;
        }
        this.frame(type, flags, id, buf, start, off);
        if (this.ended) return;
      }
      if (off < buf.length) {
        // A partial frame: keep it, unshared (not a view holding the whole read), for the next read.
        this.rest = off === 0 ? buf : Buffer.from(buf.subarray(off));
      }
    } catch (error) {
      if (error instanceof ConnectionError) {
        this.fail(error.code, error.message);
        this.options.onConnectionError?.(error.code, error.message, this.socket.remoteAddress);
      } else {
        // A fault of this server's own: the connection ends, the process and other connections go on.
        this.fail(H2Error.INTERNAL_ERROR, 'internal error');
        this.options.onError(error);
      }
    } finally {
      this.processing = false;
      this.flush();
    }
  }

  private frame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (this.block !== undefined && type !== CONTINUATION) {
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'a header block was interrupted');
    }
    const length = end - start;
    switch (type) {
      case DATA:
        this.data(flags, id, buf, start, end);
        return;
      case HEADERS: {
        if (id === 0 || id % 2 === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'HEADERS on a bad stream id');
        const padded = (flags & FLAG_PADDED) !== 0;
        let s = padded ? start + 1 : start;
        const e = padded ? end - padLength(buf, start, end) : end;
        if ((flags & FLAG_PRIORITY) !== 0) {
          if (e - s < 5) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'HEADERS too short for its priority');
          s += 5;
        }
        const fragment = buf.subarray(s, e);
        if ((flags & FLAG_END_HEADERS) !== 0) {
          this.headers(id, flags, fragment);
        } else {
          this.block = { id, flags, fragments: [fragment], size: fragment.length };
        }
        return;
      }
      case CONTINUATION: {
        const block = this.block;
        if (block === undefined || block.id !== id) {
          throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'CONTINUATION without its HEADERS');
        }
        block.fragments.push(buf.subarray(start, end));
        block.size += length;
        if (block.size > MAX_HEADER_BLOCK || block.fragments.length > MAX_CONTINUATIONS + 1) {
          throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'header block too large');
        }
        if ((flags & FLAG_END_HEADERS) !== 0) {
          this.block = undefined;
          this.headers(id, block.flags, Buffer.concat(block.fragments, block.size));
        }
        return;
      }
      case PRIORITY:
        if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (length !== 5) this.resetStream(id, H2Error.FRAME_SIZE_ERROR);
        return;
      case RST_STREAM: {
        if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
        if (length !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'RST_STREAM of bad length');
        if (id > this.lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
        const stream = this.streams.get(id);
        if (stream !== undefined) this.close(stream);
        return;
      }
      case SETTINGS:
        this.settings(flags, id, buf, start, end);
        return;
      case PUSH_PROMISE:
        throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'a client cannot push');
      case PING:
        if (id !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'PING on a stream');
        if (length !== 8) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'PING of bad length');
        if ((flags & FLAG_ACK) === 0) this.queue(frame(PING, FLAG_ACK, 0, buf.subarray(start, end)));
        return;
      case GOAWAY:
        if (id !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (length < 8) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'GOAWAY too short');
        this.peerGoneAway = true;
        this.endIfIdle();
        return;
      case WINDOW_UPDATE:
        this.windowUpdate(id, buf, start, length);
        return;
      default:
      // Unknown frame types are ignored (RFC 9113 §4.1).
    }
  }

  private data(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    // Flow control counts the whole frame, padding included.
    if (length > this.recvWindow) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'connection window exceeded');
    this.recvWindow -= length;
    if (this.recvWindow < CONNECTION_WINDOW / 2) {
      this.queue(frame(WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - this.recvWindow)));
      this.recvWindow = CONNECTION_WINDOW;
    }
    const padded = (flags & FLAG_PADDED) !== 0;
    const s = padded ? start + 1 : start;
    const e = padded ? end - padLength(buf, start, end) : end;
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'DATA on an idle stream');
      // A stream this side has closed (answered, reset): its late DATA is dropped.
      return;
    }
    if (stream.remoteEnded) {
      this.resetStream(id, H2Error.STREAM_CLOSED);
      return;
    }
    if (length > stream.recvWindow) {
      this.resetStream(id, H2Error.FLOW_CONTROL_ERROR);
      return;
    }
    stream.recvWindow -= length;
    const ended = (flags & FLAG_END_STREAM) !== 0;
    if (!stream.discarding && e > s) {
      const at = stream.size;
      stream.size += e - s;
      this.buffered += e - s;
      if (stream.size > this.options.maxBodyBytes) {
        this.release(stream);
        stream.discarding = true;
        stream.handler?.tooLarge();
        if (stream.closed) return;
      } else if (this.buffered > this.options.maxSessionMemory) {
        this.resetStream(id, H2Error.ENHANCE_YOUR_CALM);
        return;
      } else if (stream.body === undefined && ended) {
        stream.body = buf.subarray(s, e);
      } else {
        if (stream.body === undefined || stream.size > stream.body.length) {
          const grown = Buffer.allocUnsafe(
            Math.min(Math.max(stream.size, 2 * (stream.body?.length ?? 0), 1024), this.options.maxBodyBytes),
          );
          stream.body?.copy(grown, 0, 0, at);
          stream.body = grown;
        }
        buf.copy(stream.body, at, s, e);
      }
    }
    if (ended) {
      this.remoteEnd(stream);
    } else if (length > 0) {
      // Give the window back at once: the body's size, not the window, bounds what a stream holds.
      stream.recvWindow += length;
      this.queue(frame(WINDOW_UPDATE, 0, id, u32(length)));
    }
  }

  /** Drops a stream's body from the connection's account. */
  private release(stream: H2Stream): void {
    this.buffered -= stream.size;
    stream.body = undefined;
    stream.size = 0;
  }

  private headers(id: number, flags: number, block: Buffer): void {
    let fields: string[] | undefined;
    try {
      // Always decoded, even for a stream about to be refused: the HPACK table must stay in sync.
      fields = this.decoder.decode(block, this.options.maxHeaderListSize);
    } catch (error) {
      if (error instanceof HpackError) throw new ConnectionError(H2Error.COMPRESSION_ERROR, error.message);
      throw error;
    }
    const ended = (flags & FLAG_END_STREAM) !== 0;
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers of a request: they must end it.
      if (existing.remoteEnded || !ended) {
        this.resetStream(id, H2Error.PROTOCOL_ERROR);
        return;
      }
      this.remoteEnd(existing);
      return;
    }
    // A closed stream's late trailers (this side answered and reset it while they were on the way).
    if (id <= this.lastStreamId) return;
    this.lastStreamId = id;
    if (this.goAwayId !== undefined || this.streams.size + this.held >= this.options.maxConcurrentStreams) {
      this.resetStream(id, H2Error.REFUSED_STREAM);
      return;
    }
    const stream = new H2Stream(this, id, this.peerInitialWindow);
    this.streams.set(id, stream);
    // Known before the callee answers, so an answer to a request that already ended resets nothing.
    stream.remoteEnded = ended;
    this.options.onStream(stream, fields);
    if (ended && !stream.closed) this.remoteEnd(stream);
  }

  /** The peer ended its side: hand the body over, and close the stream if it is answered. */
  private remoteEnd(stream: H2Stream): void {
    stream.remoteEnded = true;
    const body = stream.body === undefined ? Buffer.alloc(0) : stream.body.subarray(0, stream.size);
    const discarded = stream.discarding;
    this.release(stream);
    if (stream.answered) {
      if (stream.pending === undefined) this.close(stream);
      return;
    }
    if (!discarded) stream.handler?.body(body);
  }

  private settings(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'SETTINGS on a stream');
    const length = end - start;
    if ((flags & FLAG_ACK) !== 0) {
      if (length !== 0) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      return;
    }
    if (length % 6 !== 0) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'SETTINGS of bad length');
    for (let at = start; at < end; at += 6) {
      const key = buf.readUInt16BE(at);
      const value = buf.readUInt32BE(at + 2);
      if (key === SETTINGS_ENABLE_PUSH && value > 1) {
        throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH not 0 or 1');
      }
      if (key === SETTINGS_INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'initial window too large');
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const stream of this.streams.values()) {
          stream.sendWindow += delta;
          if (stream.sendWindow > MAX_WINDOW) {
            throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'a stream window overflowed');
          }
        }
      } else if (key === SETTINGS_MAX_FRAME_SIZE) {
        if (value < 16_384 || value > 16_777_215) {
          throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'SETTINGS_MAX_FRAME_SIZE out of range');
        }
        this.peerMaxFrame = value;
      }
      // SETTINGS_HEADER_TABLE_SIZE needs nothing: answers never use the peer's dynamic table.
    }
    this.queue(frame(SETTINGS, FLAG_ACK, 0, undefined));
    this.drainBlocked();
  }

  private windowUpdate(id: number, buf: Buffer, start: number, length: number): void {
    if (length !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of bad length');
    const increment = buf.readUInt32BE(start) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'window overflow');
      this.drainBlocked();
      return;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    if (increment === 0) {
      this.resetStream(id, H2Error.PROTOCOL_ERROR);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.resetStream(id, H2Error.FLOW_CONTROL_ERROR);
      return;
    }
    if (stream.pending !== undefined) this.drainBlocked();
  }

  /** Sends an answer: HEADERS, DATA (the gRPC frame: 5-byte prefix, then `payload`) and trailers. */
  sendMessage(stream: H2Stream, payload: Buffer): void {
    const length = payload.length + 5;
    if (length <= this.sendWindow && length <= stream.sendWindow && length <= this.peerMaxFrame) {
      // The usual case: all three frames in one buffer.
      const headersEnd = 9 + RESPONSE_BLOCK.length;
      const dataEnd = headersEnd + 9 + length;
      const out = Buffer.allocUnsafe(dataEnd + 9 + OK_TRAILERS_BLOCK.length);
      frameHeader(out, 0, RESPONSE_BLOCK.length, HEADERS, FLAG_END_HEADERS, stream.id);
      RESPONSE_BLOCK.copy(out, 9);
      frameHeader(out, headersEnd, length, DATA, 0, stream.id);
      out[headersEnd + 9] = 0;
      out.writeUInt32BE(payload.length, headersEnd + 10);
      payload.copy(out, headersEnd + 14);
      frameHeader(out, dataEnd, OK_TRAILERS_BLOCK.length, HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream.id);
      OK_TRAILERS_BLOCK.copy(out, dataEnd + 9);
      this.sendWindow -= length;
      stream.sendWindow -= length;
      this.queue(out);
      this.localEnd(stream);
      this.schedule();
      return;
    }
    this.queue(frame(HEADERS, FLAG_END_HEADERS, stream.id, RESPONSE_BLOCK));
    const data = Buffer.allocUnsafe(length);
    data[0] = 0;
    data.writeUInt32BE(payload.length, 1);
    payload.copy(data, 5);
    stream.pending = data;
    stream.pendingTrailers = OK_TRAILERS_BLOCK;
    this.blocked.add(stream);
    this.drainBlocked();
    this.schedule();
  }

  /** Sends a header block; `end` ends the stream. */
  sendHeaders(stream: H2Stream, block: Buffer, end: boolean): void {
    // Split into CONTINUATIONs should the block outgrow the peer's frame size.
    const max = this.peerMaxFrame;
    let at = 0;
    let type = HEADERS;
    do {
      const piece = block.subarray(at, at + max);
      at += piece.length;
      const last = at >= block.length;
      const flags = (last ? FLAG_END_HEADERS : 0) | (type === HEADERS && end ? FLAG_END_STREAM : 0);
      this.queue(frame(type, flags, stream.id, piece));
      type = CONTINUATION;
    } while (at < block.length);
    if (end) this.localEnd(stream);
    this.schedule();
  }

  /** Sends what the windows let through of the answers waiting for them. */
  private drainBlocked(): void {
    for (const stream of this.blocked) {
      if (stream.pending === undefined || stream.closed) {
        this.blocked.delete(stream);
        continue;
      }
      while (stream.pending !== undefined) {
        const room = Math.min(this.sendWindow, stream.sendWindow, this.peerMaxFrame, stream.pending.length);
        if (room <= 0) break;
        const piece = stream.pending.subarray(0, room);
        this.queue(frame(DATA, 0, stream.id, piece));
        this.sendWindow -= room;
        stream.sendWindow -= room;
        stream.pending = room === stream.pending.length ? undefined : stream.pending.subarray(room);
      }
      if (stream.pending === undefined) {
        this.blocked.delete(stream);
        this.queue(frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream.id, stream.pendingTrailers));
        stream.pendingTrailers = undefined;
        this.localEnd(stream);
      }
    }
    this.schedule();
  }

  /** This side ended the stream: close it, and stop the peer's request if it has not ended yet. */
  private localEnd(stream: H2Stream): void {
    if (stream.pending !== undefined) return;
    if (!stream.remoteEnded) {
      // RST_STREAM NO_ERROR after a complete answer tells the peer to stop sending (RFC 9113 §8.1).
      this.queue(frame(RST_STREAM, 0, stream.id, u32(H2Error.NO_ERROR)));
    }
    this.close(stream);
  }

  /** Resets a stream with `code`. */
  private resetStream(id: number, code: number): void {
    this.queue(frame(RST_STREAM, 0, id, u32(code)));
    const stream = this.streams.get(id);
    if (stream !== undefined) this.close(stream);
  }

  /** The stream is over; tells its handler if it was never answered. */
  private close(stream: H2Stream): void {
    if (stream.closed) return;
    stream.closed = true;
    if (stream.holding) this.held++;
    this.streams.delete(stream.id);
    this.blocked.delete(stream);
    this.release(stream);
    stream.pending = undefined;
    if (!stream.answered) stream.handler?.aborted();
    this.endIfIdle();
  }

  /** Ends the connection once it has gone away (either side) and no stream is open. */
  private endIfIdle(): void {
    if ((this.goAwayId !== undefined || this.peerGoneAway) && this.streams.size === 0 && !this.ended) {
      this.ended = true;
      this.flush();
      this.endSocket();
    }
  }

  /** A connection error: GOAWAY with `code`, then the connection ends. */
  private fail(code: number, reason: string): void {
    if (this.ended) return;
    this.queueGoAway(code, reason);
    this.ended = true;
    this.flush();
    this.endSocket();
    for (const stream of [...this.streams.values()]) this.close(stream);
  }

  /** GOAWAY with the last stream this side took; `reason` goes in the debug data, which clients log. */
  private queueGoAway(code: number, reason: string): void {
    this.queue(frame(GOAWAY, 0, 0, Buffer.concat([u32(this.lastStreamId), u32(code), Buffer.from(reason, 'latin1')])));
  }

  /**
   * Ends this side of the socket; a peer that does not close its side (or does not read what is left to
   * send) is cut after a while, so an ended connection is not held forever.
   */
  private endSocket(): void {
    this.socket.end();
    this.lingerTimer = setTimeout(() => this.socket.destroy(), this.options.lingerMs ?? LINGER_MS);
    this.lingerTimer.unref();
  }

  private queue(buf: Buffer): void {
    this.out.push(buf);
  }

  /** Flushes at the end of this turn (answers made outside a read, e.g. after an asynchronous store). */
  private schedule(): void {
    if (this.processing || this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(() => {
      this.flushQueued = false;
      this.flush();
    });
  }

  private flush(): void {
    const out = this.out;
    if (out.length === 0 || this.socket.destroyed) {
      out.length = 0;
      return;
    }
    this.out = [];
    this.socket.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
    if (this.socket.writableLength > MAX_UNSENT_BYTES) this.socket.destroy();
  }

  private closed(): void {
    clearTimeout(this.prefaceTimer);
    clearTimeout(this.lingerTimer);
    this.ended = true;
    for (const stream of [...this.streams.values()]) this.close(stream);
    this.onEnd(this);
  }
}

/** An HTTP/2 server for unary gRPC calls. */
export function createH2Server(options: H2ServerOptions): H2Server {
  const sessions = new Set<H2Session>();
  let goingAway = false;
  const accept = (socket: Socket): void => {
    const session = new H2Session(socket, options, (s) => sessions.delete(s));
    sessions.add(session);
    if (goingAway) session.goAway();
  };
  const server = options.createServer?.(accept) ?? createServer(accept);
  return {
    server,
    goAway: () => {
      goingAway = true;
      for (const session of sessions) session.goAway();
    },
    destroy: () => {
      for (const session of sessions) session.destroy();
    },
  };
}
