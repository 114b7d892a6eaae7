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
//
// Against peers that do not play fair, every resource a peer can make this side hold has a bound: the
// output it leaves unread (reading stops above a mark; a connection that leaves it unread too long is
// cut), the answers to its control frames (PING, SETTINGS, stream resets), the streams it resets, the
// time a frame, a header block, a connection without streams or an idle connection may take, and, for the
// process, the bytes all connections buffer and the number of connections (see H2_LIMITS).

import { createServer, type Server, type Socket } from 'node:net';
import { encodeIndexed, encodeLiteral, HpackDecoder, HpackError, validName, validValue } from './hpack.js';
import { StreamTable } from './stream-table.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** The body of a request without DATA. */
const EMPTY = Buffer.alloc(0);

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
/** Not a wire flag: marks a header block whose HEADERS said the stream depends on itself. */
const FLAG_SELF_DEPENDENT = 0x100;

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
/**
 * Above this much output waiting for the peer, the connection is not read until the output drains: a
 * peer that sends and never reads makes this side hold this much, not all it asks for.
 */
const OUTPUT_HIGH_WATER = 256 * 1024;
/** Bytes an open stream is counted for in the buffered bytes (its objects, timers and header fields). */
export const STREAM_COST = 2048;
/** A connection that read something this recently is not ended to make room for another, in ms. */
const EVICT_QUIET_MS = 1000;
/** A connection with fewer streams open than this may open one past the process's stream bounds. */
export const FAIR_STREAMS = 4;
/** Size of a connection's output buffer: the answers of a read's worth of calls (some 100 bytes each). */
const OUT_SIZE = 4096;
/** Largest output buffer a connection keeps between turns. */
const OUT_KEPT = 16 * 1024;
/** How many streams reset here are remembered, so that frames already on their way are ignored. */
const RESETS_REMEMBERED = 4096;

/** Defaults of the limits and timeouts of {@link H2ServerOptions}. */
export const H2_LIMITS = {
  /**
   * Connections open at once. When full, a new connection ends the oldest one that has no stream open
   * (GOAWAY NO_ERROR), and is refused only when every connection has one.
   */
  maxConnections: 4096,
  /**
   * Connections open at once from one client address. Past it, a new connection from that address ends
   * that address's oldest connection with no stream open, or is refused: one client cannot take the
   * whole of {@link maxConnections}.
   */
  maxConnectionsPerAddress: 1024,
  /**
   * Streams open at once in the process, all connections together. Past it, a new stream is refused
   * (REFUSED_STREAM) unless its connection has fewer than {@link FAIR_STREAMS} open: a client holding
   * streams open cannot keep others' calls out. Each open stream is also counted in
   * {@link maxBufferedBytes} ({@link STREAM_COST} bytes), with the same exception.
   */
  maxStreams: 16_384,
  /** Bytes all connections together buffer: request bodies, unfinished header blocks and frames, output. */
  maxBufferedBytes: 32 * 1024 * 1024,
  /**
   * Answers to control frames (PING and SETTINGS ACK, RST_STREAM) a connection may have waiting while its
   * output does not drain: nghttp2's limit on its outbound queue is the same.
   */
  maxQueuedControlFrames: 1000,
  /**
   * Frames that ask for no call a peer may send at once: PING, SETTINGS, WINDOW_UPDATE, PRIORITY, DATA
   * that is empty and does not end its stream, frames of unknown types (a token bucket:
   * {@link controlFramesPerSecond} come back each second, and one with each stream the peer opens).
   * Clients send a few: keepalive and bandwidth probes, one SETTINGS per change, a WINDOW_UPDATE per
   * window's worth of answers read. Past it: GOAWAY ENHANCE_YOUR_CALM.
   */
  controlFrameBurst: 1000,
  /** Such frames a peer may go on sending per second, past {@link controlFrameBurst}. */
  controlFramesPerSecond: 100,
  /**
   * Streams a connection may see reset at once, whoever sent the reset: the peer (RST_STREAM), or this
   * side, for a frame that breaks the protocol on a stream (MadeYouReset, CVE-2025-8671), a WINDOW_UPDATE
   * of 0 on a closed stream included (a token bucket: {@link resetsPerSecond} come back each second).
   */
  resetBurst: 2000,
  /** Stream resets a peer may go on sending per second, past {@link resetBurst}. */
  resetsPerSecond: 200,
  /**
   * Streams of a connection the service may end because their request did not arrive in time (its read
   * timeout), at once (a token bucket: {@link timeoutsPerSecond} come back each second); past it the
   * connection ends (GOAWAY ENHANCE_YOUR_CALM), so a client cannot hold streams open by reopening them.
   */
  timeoutBurst: 100,
  /** Streams ended by timeout a connection may go on having per second, past {@link timeoutBurst}. */
  timeoutsPerSecond: 10,
  /** A frame, or a header block, begun and not finished in this time ends the connection; also output left unread. */
  frameTimeoutMs: 10_000,
  /** A connection that opens no stream this long after its preface is closed (GOAWAY NO_ERROR). */
  noStreamTimeoutMs: 30_000,
  /** A connection with no open stream that sends nothing (a PING counts) for this long is closed. */
  idleTimeoutMs: 300_000,
} as const;

/** The limits of {@link H2ServerOptions} a connection or request can meet, as {@link H2ServerOptions.onLimit} names them. */
export type H2Limit =
  | 'connections'
  | 'buffered_bytes'
  | 'control_frames'
  | 'resets'
  | 'streams'
  | 'timeouts'
  | 'output_stalled'
  | 'preface_timeout'
  | 'frame_timeout'
  | 'no_stream_timeout'
  | 'idle_timeout';

/** Options of {@link createH2Server}. */
export interface H2ServerOptions {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams over it are refused (REFUSED_STREAM, which clients retry). */
  maxConcurrentStreams: number;
  /** Largest decoded header list (RFC 9113 size: name + value + 32 per field); larger ones get `tooLarge`. */
  maxHeaderListSize: number;
  /** Largest request body (all DATA of a stream); larger ones get {@link StreamHandler.tooLarge}. */
  maxBodyBytes: number;
  /**
   * Largest total a connection holds in its streams: their request bodies, and {@link STREAM_COST} bytes
   * per open stream. A body past it is reset (ENHANCE_YOUR_CALM); a new stream that would go past it is
   * refused (REFUSED_STREAM), so one connection cannot take the whole of {@link H2_LIMITS.maxBufferedBytes}.
   */
  maxSessionMemory: number;
  /** How long a new connection may take to send its preface, in ms. */
  prefaceTimeoutMs: number;
  /** How long a connection this side ended (GOAWAY) waits for the peer to close, in ms; then it is cut. */
  lingerMs?: number;
  /** @default H2_LIMITS.maxConnections */
  maxConnections?: number;
  /** @default H2_LIMITS.maxConnectionsPerAddress */
  maxConnectionsPerAddress?: number;
  /** @default H2_LIMITS.maxStreams */
  maxStreams?: number;
  /** @default H2_LIMITS.maxBufferedBytes */
  maxBufferedBytes?: number;
  /** @default H2_LIMITS.maxQueuedControlFrames */
  maxQueuedControlFrames?: number;
  /** @default H2_LIMITS.controlFrameBurst */
  controlFrameBurst?: number;
  /** @default H2_LIMITS.controlFramesPerSecond */
  controlFramesPerSecond?: number;
  /** @default H2_LIMITS.resetBurst */
  resetBurst?: number;
  /** @default H2_LIMITS.resetsPerSecond */
  resetsPerSecond?: number;
  /** @default H2_LIMITS.timeoutBurst */
  timeoutBurst?: number;
  /** @default H2_LIMITS.timeoutsPerSecond */
  timeoutsPerSecond?: number;
  /** @default H2_LIMITS.frameTimeoutMs */
  frameTimeoutMs?: number;
  /** @default H2_LIMITS.noStreamTimeoutMs */
  noStreamTimeoutMs?: number;
  /** @default H2_LIMITS.idleTimeoutMs */
  idleTimeoutMs?: number;
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
  /** A limit refused a connection or a request, or ended a connection (for metrics). */
  onLimit?(limit: H2Limit): void;
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
// The fields of a stream, made for every call, are `declare`d and set in the constructor: assigned, not
// defined as class fields are (ES2022 [[Define]] semantics), which costs V8 several times as much per
// field; on the 2-core machine, some 10 % of the transport's CPU per call.
export class H2Stream {
  /** Hears of the body and of an abort; set by {@link H2ServerOptions.onStream}. */
  declare handler: StreamHandler | undefined;
  /** The peer ended its side (END_STREAM). */
  declare remoteEnded: boolean;
  /** This side has answered. */
  declare answered: boolean;
  /** No more frames either way. */
  declare closed: boolean;
  declare sendWindow: number;
  /** What the peer may still send on this stream: the window this side announced, never given back. */
  declare recvWindow: number;
  /** The request's content-length, or -1 when it has none. */
  declare contentLength: number;
  /** Bytes of DATA payload received (padding excluded), checked against {@link contentLength}. */
  declare received: number;
  /**
   * Request body: its first `size` bytes. A copy of the DATA, grown as it comes, so that neither the reads
   * it came in nor one object per frame are held; only a body that arrives whole in its last frame is a
   * view of the read, handed over at once.
   */
  declare body: Buffer | undefined;
  declare size: number;
  /** The body went past its limit: DATA is counted, not kept. */
  declare discarding: boolean;
  /** Work is under way for this stream (see {@link hold}). */
  declare holding: boolean;
  /** DATA (and trailers) of the answer waiting for the peer's flow-control window. */
  declare pending: Buffer | undefined;
  declare pendingTrailers: Buffer | undefined;
  declare readonly session: H2Session;
  declare readonly id: number;

  constructor(session: H2Session, id: number, sendWindow: number, recvWindow: number, contentLength: number) {
    this.session = session;
    this.id = id;
    this.handler = undefined;
    this.remoteEnded = false;
    this.answered = false;
    this.closed = false;
    this.sendWindow = sendWindow;
    this.recvWindow = recvWindow;
    this.contentLength = contentLength;
    this.received = 0;
    this.body = undefined;
    this.size = 0;
    this.discarding = false;
    this.holding = false;
    this.pending = undefined;
    this.pendingTrailers = undefined;
  }

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

  /**
   * The stream is being answered because its request did not arrive in time: counted against the
   * connection's budget of such streams ({@link H2_LIMITS.timeoutBurst}).
   */
  timedOut(): void {
    this.session.timedOut();
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

/** A connection error: the connection ends with GOAWAY carrying `code`; `limit` names the limit it met. */
class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly limit?: H2Limit,
  ) {
    super(message);
  }
}

/** The number 1 to 15 decimal digits spell, or -1 when `value` is not that. */
function digits(value: string): number {
  const n = value.length;
  if (n === 0 || n > 15) return -1;
  let out = 0;
  for (let i = 0; i < n; i++) {
    const d = value.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return -1;
    out = out * 10 + d;
  }
  return out;
}

/** A regular field name a request may carry: valid (§8.2.1), not connection-specific (§8.2.2). */
function allowedName(name: string): boolean {
  return validName(name) && !connectionSpecific(name);
}

/** A field that describes an HTTP/1.1 connection, which a request must not carry (§8.2.2). */
function connectionSpecific(name: string): boolean {
  // By length first: a set lookup would hash every name, and most names are new strings on each call.
  switch (name.length) {
    case 7:
      return name === 'upgrade';
    case 10:
      return name === 'connection' || name === 'keep-alive';
    case 16:
      return name === 'proxy-connection';
    case 17:
      return name === 'transfer-encoding';
    default:
      return false;
  }
}

/**
 * Checks a request's header list (RFC 9113 §8.2 and §8.3.1): `:method`, `:scheme` and a non-empty `:path`
 * once each, `:authority` at most once, no other pseudo-header, pseudo-headers first, valid names and
 * values, no connection-specific field, `te` only `trailers`, one content-length of digits. Returns the
 * content-length (-1 when absent), or undefined when the request is malformed. `wellFormed`: the HPACK
 * decoder found every name and value valid already (HpackDecoder.wellFormed), so they are not scanned again.
 */
export function checkRequestFields(fields: readonly string[], wellFormed = false): number | undefined {
  let method = false;
  let scheme = false;
  let path = false;
  let authority = false;
  let regular = false;
  let contentLength = -1;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i] as string;
    const value = fields[i + 1] as string;
    if (!wellFormed && !validValue(value)) return undefined;
    if (name.charCodeAt(0) === 0x3a) {
      if (regular) return undefined;
      if (name === ':method') {
        if (method || value === '') return undefined;
        method = true;
      } else if (name === ':scheme') {
        if (scheme || value === '') return undefined;
        scheme = true;
      } else if (name === ':path') {
        if (path || value === '') return undefined;
        path = true;
      } else if (name === ':authority') {
        if (authority) return undefined;
        authority = true;
      } else {
        return undefined;
      }
      continue;
    }
    regular = true;
    if (wellFormed ? connectionSpecific(name) : !allowedName(name)) return undefined;
    if (name === 'te') {
      if (value !== 'trailers') return undefined;
    } else if (name === 'content-length') {
      const length = digits(value);
      if (length < 0) return undefined;
      if (contentLength !== -1 && contentLength !== length) return undefined;
      contentLength = length;
    }
  }
  return method && scheme && path ? contentLength : undefined;
}

/** Whether a trailer list is well formed: valid fields, no pseudo-header (§8.1). */
function validTrailers(fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i] as string;
    if (!allowedName(name) || !validValue(fields[i + 1] as string)) return false;
  }
  return true;
}

/** The limits in force: the options, or their defaults. */
type Limits = { -readonly [K in keyof typeof H2_LIMITS]: number };

/** What the connections of one server share: their limits, the bytes they buffer, a timer that checks them. */
class Shared {
  /** Bytes buffered by all connections (see {@link H2_LIMITS.maxBufferedBytes}). */
  buffered = 0;
  /** Of which, header blocks under way: they may take half, so that request bodies keep room. */
  blocks = 0;
  /** Streams open in all connections (see {@link H2_LIMITS.maxStreams}). */
  streams = 0;
  /** Connections in the order they opened, oldest first. */
  readonly sessions = new Set<H2Session>();
  /** Connections open per client address. */
  readonly byAddress = new Map<string, number>();
  readonly limits: Limits;
  private sweeper: NodeJS.Timeout | undefined = undefined;
  private readonly period: number;

  constructor(readonly options: H2ServerOptions) {
    const limits = { ...H2_LIMITS } as Limits;
    for (const key of Object.keys(H2_LIMITS) as Array<keyof Limits>) {
      const value = options[key];
      if (value === undefined) continue;
      if (
        !(
          Number.isInteger(value) &&
          value >=
            (key === 'resetsPerSecond' || key === 'controlFramesPerSecond' || key === 'timeoutsPerSecond' ? 0 : 1)
        )
      ) {
        throw new RangeError(`${key} must be a whole number, at least 1; got ${value}`);
      }
      limits[key] = value;
    }
    this.limits = limits;
    // Timeouts are checked by one timer for all connections: arming a timer per read would cost more
    // than the read. A timeout fires up to a quarter of the shortest one late.
    const shortest = Math.min(
      limits.frameTimeoutMs,
      limits.noStreamTimeoutMs,
      limits.idleTimeoutMs,
      options.prefaceTimeoutMs,
    );
    this.period = Math.max(10, Math.min(1000, Math.floor(shortest / 4)));
  }

  add(session: H2Session): void {
    this.sessions.add(session);
    this.byAddress.set(session.address, (this.byAddress.get(session.address) ?? 0) + 1);
    if (this.sweeper === undefined) {
      this.sweeper = setInterval(() => this.sweep(), this.period);
      this.sweeper.unref();
    }
  }

  remove(session: H2Session): void {
    if (!this.sessions.delete(session)) return;
    const left = (this.byAddress.get(session.address) ?? 1) - 1;
    if (left === 0) this.byAddress.delete(session.address);
    else this.byAddress.set(session.address, left);
    if (this.sessions.size === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  limit(limit: H2Limit): void {
    this.options.onLimit?.(limit);
  }

  /**
   * Makes room for a connection from `address`: past the per-address cap, ends that address's oldest
   * connection with no stream open; past the global cap, the oldest such connection of any address.
   * Returns false when there is none to end (the new connection is then refused).
   */
  admit(address: string): boolean {
    const own = (this.byAddress.get(address) ?? 0) >= this.limits.maxConnectionsPerAddress;
    if (!own && this.sessions.size < this.limits.maxConnections) return true;
    if (own) return this.evictIdle(address, EVICT_QUIET_MS);
    // Past the global cap, the address holding the most connections gives one up first: a client with
    // a few pooled connections keeps them while another holds hundreds. One holding more than half the
    // cap gives up its quietest idle connection however recently it was used: a client that reopens
    // each connection it loses and makes a call on it would otherwise never leave one quiet for long.
    const largest = this.largestHolder();
    const hoarding = (this.byAddress.get(largest) ?? 0) * 2 > this.limits.maxConnections;
    return this.evictIdle(largest, hoarding ? 0 : EVICT_QUIET_MS) || this.evictIdle(undefined, EVICT_QUIET_MS);
  }

  /** The client address with the most connections open. */
  private largestHolder(): string {
    let largest = '';
    let most = 0;
    for (const [address, count] of this.byAddress) {
      if (count > most) {
        most = count;
        largest = address;
      }
    }
    return largest;
  }

  /**
   * Ends a connection with no stream open (of `address`, when given): the oldest that never opened one,
   * else the one quiet longest, of those quiet for `quietMs` at least ({@link EVICT_QUIET_MS} but for a
   * hoarding address: a client in use keeps its connection; its new one is refused instead). False when
   * there is none.
   */
  private evictIdle(address: string | undefined, quietMs: number): boolean {
    const now = Date.now();
    let victim: H2Session | undefined;
    for (const session of this.sessions) {
      if ((address !== undefined && session.address !== address) || !session.idle) continue;
      if (session.neverStreamed) {
        victim = session;
        break;
      }
      if (now - session.quietSince >= quietMs && (victim === undefined || session.quietSince < victim.quietSince)) {
        victim = session;
      }
    }
    victim?.evict();
    return victim !== undefined;
  }

  private sweep(): void {
    const now = Date.now();
    for (const session of this.sessions) session.check(now);
  }
}

/** One HTTP/2 connection. */
export class H2Session {
  /** Open streams by id: not a Map, which would promote every call's objects (see ./stream-table.ts). */
  private readonly streams = new StreamTable<H2Stream>();
  private readonly decoder = new HpackDecoder(HEADER_TABLE_SIZE);
  private readonly options: H2ServerOptions;
  private readonly limits: Limits;
  private prefaceSeen = false;
  private settingsSeen = false;
  private rest: Buffer | undefined = undefined;
  /** Highest stream id the peer opened. */
  private lastStreamId = 0;
  /** Set once GOAWAY is sent: streams above it are refused. */
  private goAwayId: number | undefined = undefined;
  private peerGoneAway = false;
  private ended = false;
  /**
   * Frames to write at the end of this turn: the first `outLength` bytes of `out`. A connection with
   * streams open writes its next turn's frames into the same buffer when the last write went to the
   * kernel whole; an idle one lets it go (see {@link flush}).
   */
  private out: Buffer | undefined = undefined;
  private outLength = 0;
  private flushQueued = false;
  private processing = false;
  /** A header block whose CONTINUATIONs are still arriving (copies, counted in the shared bytes). */
  private block: { id: number; flags: number; fragments: Buffer[]; size: number } | undefined = undefined;
  // Flow control.
  private sendWindow = DEFAULT_WINDOW;
  private recvWindow = DEFAULT_WINDOW;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = 16_384;
  /**
   * The window every stream gets (SETTINGS_INITIAL_WINDOW_SIZE): room for the largest body, so that no
   * stream window is ever given back, and a peer that sends past it is caught whatever its timing.
   */
  private readonly streamWindow: number = 0;
  /** Streams whose answer waits for window. */
  private readonly blocked = new Set<H2Stream>();
  /** Bytes of request bodies held, and {@link STREAM_COST} per open stream (see maxSessionMemory). */
  private buffered = 0;
  /**
   * Streams closed (reset by the peer, most often) whose work goes on: they still count against the
   * concurrent stream limit, so a peer that opens and resets streams ("rapid reset", CVE-2023-44487)
   * cannot have more work under way than that limit, while one that cancels calls honestly keeps its
   * connection.
   */
  private held = 0;
  /**
   * Streams this side reset, or ended before the peer did: frames the peer sent before it learnt of it
   * are ignored (RFC 9113 §5.1, closed). The oldest are forgotten past a bound.
   */
  private readonly resetHere = new Set<number>();
  private lingerTimer: NodeJS.Timeout | undefined;
  // Numbers that may hold fractions or Date.now()'s values start as numbers (0), not undefined: a field
  // defined undefined is stored as a reference, and every such number assigned to it is a new heap object.
  // Timeouts, checked by Shared's timer (times from Date.now()).
  private readonly openedAt: number = 0;
  /** When the last read came. */
  private lastReadAt: number = 0;
  /** When the frame left unfinished at the end of the last read began (0: none). */
  private partialSince = 0;
  /** When the header block under way began (0: none). */
  private blockSince = 0;
  /** When reading stopped for output the peer leaves unread (0: reading). */
  private pausedSince = 0;
  // Bytes this connection has counted in the shared total, besides request bodies and header blocks.
  private unsent = 0;
  private restCharged = 0;
  /** Control-frame answers written since the output last drained. */
  private controlQueued = 0;
  /** PINGs and SETTINGS the peer may still send (a token bucket). */
  private controlTokens: number = 0;
  private controlAt: number = 0;
  /** Stream resets the peer may still cause (a token bucket). */
  private resetTokens: number = 0;
  private resetAt: number = 0;
  /** Streams that may still end by timeout (a token bucket). */
  private timeoutTokens: number = 0;
  private timeoutAt: number = 0;
  /** The client's address, for the per-address connection cap. */
  readonly address: string;
  /** Whether the socket is plain TCP (not TLS): see {@link flush}. */
  private readonly cleartext: boolean;

  constructor(
    readonly socket: Socket,
    private readonly shared: Shared,
    private readonly onEnd: (session: H2Session) => void,
  ) {
    this.options = shared.options;
    this.limits = shared.limits;
    this.streamWindow = Math.min(MAX_WINDOW, Math.max(DEFAULT_WINDOW, this.options.maxBodyBytes + 1));
    this.openedAt = Date.now();
    this.lastReadAt = this.openedAt;
    this.resetTokens = this.limits.resetBurst;
    this.resetAt = this.openedAt;
    this.controlTokens = this.limits.controlFrameBurst;
    this.controlAt = this.openedAt;
    this.timeoutTokens = this.limits.timeoutBurst;
    this.timeoutAt = this.openedAt;
    this.address = socket.remoteAddress ?? '';
    this.cleartext = (socket as { encrypted?: boolean }).encrypted !== true;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('error', () => {});
    socket.on('close', () => this.closed());
    const settings = Buffer.allocUnsafe(24);
    settings.writeUInt16BE(SETTINGS_MAX_CONCURRENT_STREAMS, 0);
    settings.writeUInt32BE(this.options.maxConcurrentStreams, 2);
    settings.writeUInt16BE(SETTINGS_ENABLE_PUSH, 6);
    settings.writeUInt32BE(0, 8);
    settings.writeUInt16BE(SETTINGS_MAX_HEADER_LIST_SIZE, 12);
    settings.writeUInt32BE(this.options.maxHeaderListSize, 14);
    settings.writeUInt16BE(SETTINGS_INITIAL_WINDOW_SIZE, 18);
    settings.writeUInt32BE(this.streamWindow, 20);
    this.queue(frame(SETTINGS, 0, 0, settings));
    this.queue(frame(WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - DEFAULT_WINDOW)));
    this.recvWindow = CONNECTION_WINDOW;
    this.flush();
  }

  /** Whether the peer never opened a stream. */
  get neverStreamed(): boolean {
    return this.lastStreamId === 0;
  }

  /** When the peer last sent something (Date.now()). */
  get quietSince(): number {
    return this.lastReadAt;
  }

  /** Whether the connection has nothing under way: no stream, no work, no header block, not ended. */
  get idle(): boolean {
    return this.streams.size === 0 && this.held === 0 && this.block === undefined && !this.ended;
  }

  /**
   * Ends an idle connection to make room for a new one (GOAWAY NO_ERROR); it stops counting against the
   * connection caps at once.
   */
  evict(): void {
    this.shared.limit('connections');
    this.goAwayId = this.lastStreamId;
    this.queueGoAway(H2Error.NO_ERROR, 'too many connections');
    this.ended = true;
    // Reading goes on (what comes is dropped unparsed): the peer's FIN closes the socket at once. Paused,
    // the socket would only close when the linger timer cut it, and a client that reopens each connection
    // it loses would keep that many seconds of its connections (socket, session, buffers) in memory.
    this.flush();
    this.endSocket();
    this.onEnd(this);
  }

  /** A stream is answered for its read timeout: past the budget of such streams, the connection ends. */
  timedOut(): void {
    if (this.ended) return;
    const now = Date.now();
    const limits = this.limits;
    this.timeoutTokens = Math.min(
      limits.timeoutBurst,
      this.timeoutTokens + ((now - this.timeoutAt) * limits.timeoutsPerSecond) / 1000,
    );
    this.timeoutAt = now;
    if (this.timeoutTokens < 1) {
      this.shared.limit('timeouts');
      this.fail(H2Error.ENHANCE_YOUR_CALM, 'too many streams ended by timeout');
      return;
    }
    this.timeoutTokens--;
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

  /** Applies the timeouts; `now` from Date.now(). */
  check(now: number): void {
    if (this.socket.destroyed) return;
    const limits = this.limits;
    if (!this.settingsSeen) {
      if (now - this.openedAt > this.options.prefaceTimeoutMs) {
        this.shared.limit('preface_timeout');
        this.socket.destroy();
      }
      return;
    }
    if (this.pausedSince !== 0) {
      // The peer has not read what was sent to it for that long: nothing sent now would reach it. While
      // reading is stopped, frames cannot arrive: the frame timeout waits.
      if (now - this.pausedSince > limits.frameTimeoutMs) {
        this.shared.limit('output_stalled');
        this.socket.destroy();
      }
      return;
    }
    if (this.ended) return;
    if (
      (this.partialSince !== 0 && now - this.partialSince > limits.frameTimeoutMs) ||
      (this.blockSince !== 0 && now - this.blockSince > limits.frameTimeoutMs)
    ) {
      this.shared.limit('frame_timeout');
      this.fail(H2Error.ENHANCE_YOUR_CALM, `a frame or header block took more than ${limits.frameTimeoutMs} ms`);
      return;
    }
    if (this.streams.size !== 0 || this.held !== 0 || this.goAwayId !== undefined || this.block !== undefined) return;
    // Idle: the output buffer kept for the next answers goes (it is empty outside a turn), and so does
    // the room the stream table grew to.
    this.out = undefined;
    this.streams.compact();
    if (this.lastStreamId === 0) {
      if (now - this.openedAt > limits.noStreamTimeoutMs) {
        this.shared.limit('no_stream_timeout');
        this.goAway();
      }
    } else if (now - this.lastReadAt > limits.idleTimeoutMs) {
      this.shared.limit('idle_timeout');
      this.goAway();
    }
  }

  private read(chunk: Buffer): void {
    if (this.ended) return;
    const now = Date.now();
    this.lastReadAt = now;
    // What was written before this read has reached the peer: the control answers it held are gone.
    if (this.socket.writableLength === 0) this.controlQueued = 0;
    const buf = this.rest === undefined ? chunk : Buffer.concat([this.rest, chunk]);
    this.rest = undefined;
    let off = 0;
    let frames = 0;
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
        frames++;
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
        // The frame timeout runs from the read where this frame began.
        if (frames > 0 || this.partialSince === 0) this.partialSince = now;
      } else {
        this.partialSince = 0;
      }
    } catch (error) {
      if (error instanceof ConnectionError) {
        if (error.limit !== undefined) this.shared.limit(error.limit);
        this.fail(error.code, error.message);
        this.options.onConnectionError?.(error.code, error.message, this.socket.remoteAddress);
      } else {
        // A fault of this server's own: the connection ends, the process and other connections go on.
        this.fail(H2Error.INTERNAL_ERROR, 'internal error');
        this.options.onError(error);
      }
    } finally {
      this.processing = false;
      const rest = this.rest === undefined ? 0 : this.rest.length;
      this.shared.buffered += rest - this.restCharged;
      this.restCharged = rest;
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
        let selfDependent = false;
        if ((flags & FLAG_PRIORITY) !== 0) {
          if (e - s < 5) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'HEADERS too short for its priority');
          selfDependent = (buf.readUInt32BE(s) & 0x7fffffff) === id;
          s += 5;
        }
        if ((flags & FLAG_END_HEADERS) !== 0) {
          this.headers(id, flags, buf.subarray(s, e), selfDependent);
        } else {
          const fragment = Buffer.from(buf.subarray(s, e));
          this.block = { id, flags: flags | (selfDependent ? FLAG_SELF_DEPENDENT : 0), fragments: [fragment], size: 0 };
          this.blockSince = Date.now();
          this.growBlock(fragment.length);
        }
        return;
      }
      case CONTINUATION: {
        const block = this.block;
        if (block === undefined || block.id !== id) {
          throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'CONTINUATION without its HEADERS');
        }
        block.fragments.push(Buffer.from(buf.subarray(start, end)));
        this.growBlock(length);
        if (block.size > MAX_HEADER_BLOCK || block.fragments.length > MAX_CONTINUATIONS + 1) {
          throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'header block too large');
        }
        if ((flags & FLAG_END_HEADERS) !== 0) {
          const whole = Buffer.concat(block.fragments, block.size);
          this.dropBlock();
          this.headers(id, block.flags, whole, (block.flags & FLAG_SELF_DEPENDENT) !== 0);
        }
        return;
      }
      case PRIORITY:
        if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        this.chargeControl();
        if (length !== 5) this.resetStream(id, H2Error.FRAME_SIZE_ERROR);
        // A stream cannot depend on itself (§5.3.1).
        else if ((buf.readUInt32BE(start) & 0x7fffffff) === id) this.resetStream(id, H2Error.PROTOCOL_ERROR);
        return;
      case RST_STREAM: {
        if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
        if (length !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'RST_STREAM of bad length');
        if (id > this.lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
        this.chargeReset();
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
        if ((flags & FLAG_ACK) === 0) this.control(frame(PING, FLAG_ACK, 0, buf.subarray(start, end)), true);
        // This side sends no PING: an acknowledgement is as unasked for as a PING.
        else this.chargeControl();
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
        // Unknown frame types are ignored (RFC 9113 §4.1), within the budget of frames that ask for nothing.
        this.chargeControl();
    }
  }

  /** Counts `bytes` more of the header block under way, against the bytes the process buffers. */
  private growBlock(bytes: number): void {
    (this.block as { size: number }).size += bytes;
    this.shared.buffered += bytes;
    this.shared.blocks += bytes;
    if (this.shared.buffered > this.limits.maxBufferedBytes || this.shared.blocks > this.limits.maxBufferedBytes / 2) {
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'the server buffers too much', 'buffered_bytes');
    }
  }

  private dropBlock(): void {
    if (this.block === undefined) return;
    this.shared.buffered -= this.block.size;
    this.shared.blocks -= this.block.size;
    this.block = undefined;
    this.blockSince = 0;
  }

  /** One more stream reset by the peer: past the budget, the connection ends. */
  private chargeReset(): void {
    const now = Date.now();
    const limits = this.limits;
    this.resetTokens = Math.min(
      limits.resetBurst,
      this.resetTokens + ((now - this.resetAt) * limits.resetsPerSecond) / 1000,
    );
    this.resetAt = now;
    if (this.resetTokens < 1) {
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'too many stream resets', 'resets');
    }
    this.resetTokens--;
  }

  /**
   * Queues an answer to a control frame; too many while the output does not drain end the connection,
   * and so do PINGs and SETTINGS (`asked`) past their budget, whether or not the peer reads: the kernel's
   * buffers take hundreds of thousands of answers before any is left unsent.
   */
  private control(buf: Buffer, asked = false): void {
    if (asked) this.chargeControl();
    this.queue(buf);
    if (++this.controlQueued > this.limits.maxQueuedControlFrames && this.processing) {
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'too many control frames left unread', 'control_frames');
    }
  }

  /**
   * One more frame that asks for no call (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, empty DATA, unknown):
   * past the budget, the connection ends.
   */
  private chargeControl(): void {
    if (this.controlTokens >= 1) {
      // Most frames find tokens left: the refill is worked out only when they run out.
      this.controlTokens--;
      return;
    }
    const now = Date.now();
    const limits = this.limits;
    this.controlTokens = Math.min(
      limits.controlFrameBurst,
      this.controlTokens + ((now - this.controlAt) * limits.controlFramesPerSecond) / 1000,
    );
    this.controlAt = now;
    if (this.controlTokens < 1) {
      throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'too many frames that ask for nothing', 'control_frames');
    }
    this.controlTokens--;
  }

  private data(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    // Empty DATA that does not end its stream carries nothing (CVE-2019-9518).
    if (length === 0 && (flags & FLAG_END_STREAM) === 0) this.chargeControl();
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
      // Sent before the peer learnt this side reset the stream: ignored.
      if (this.resetHere.has(id)) return;
      throw new ConnectionError(H2Error.STREAM_CLOSED, 'DATA on a closed stream');
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
    stream.received += e - s;
    const ended = (flags & FLAG_END_STREAM) !== 0;
    if (
      stream.contentLength !== -1 &&
      (stream.received > stream.contentLength || (ended && stream.received !== stream.contentLength))
    ) {
      // The body disagrees with its content-length: a malformed request (§8.1.1).
      this.resetStream(id, H2Error.PROTOCOL_ERROR);
      return;
    }
    if (!stream.discarding && e > s) {
      const at = stream.size;
      stream.size += e - s;
      this.buffered += e - s;
      this.shared.buffered += e - s;
      if (stream.size > this.options.maxBodyBytes) {
        this.release(stream);
        stream.discarding = true;
        stream.handler?.tooLarge();
        if (stream.closed) return;
      } else if (this.buffered > this.options.maxSessionMemory) {
        this.resetStream(id, H2Error.ENHANCE_YOUR_CALM);
        return;
      } else if (this.shared.buffered > this.limits.maxBufferedBytes) {
        this.shared.limit('buffered_bytes');
        this.resetStream(id, H2Error.ENHANCE_YOUR_CALM, false);
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
    if (ended) this.remoteEnd(stream);
  }

  /** Drops a stream's body from the connection's account. */
  private release(stream: H2Stream): void {
    this.buffered -= stream.size;
    this.shared.buffered -= stream.size;
    stream.body = undefined;
    stream.size = 0;
  }

  private headers(id: number, flags: number, block: Buffer, selfDependent: boolean): void {
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
      if (existing.remoteEnded) {
        // Half-closed (remote): nothing more may come (§5.1).
        this.resetStream(id, H2Error.STREAM_CLOSED);
        return;
      }
      // Trailers of a request: they must end it, and carry no pseudo-header.
      if (!ended || selfDependent || (fields !== undefined && !validTrailers(fields))) {
        this.resetStream(id, H2Error.PROTOCOL_ERROR);
        return;
      }
      if (existing.contentLength !== -1 && existing.received !== existing.contentLength) {
        this.resetStream(id, H2Error.PROTOCOL_ERROR);
        return;
      }
      this.remoteEnd(existing);
      return;
    }
    if (id <= this.lastStreamId) {
      // Late trailers of a stream this side reset while they were on the way.
      if (this.resetHere.has(id)) return;
      // A new stream's id must be above every earlier one (§5.1.1).
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'HEADERS on a stream id at or below the last one');
    }
    this.lastStreamId = id;
    if (this.goAwayId !== undefined) {
      this.resetStream(id, H2Error.REFUSED_STREAM, false);
      return;
    }
    if (this.streams.size + this.held >= this.options.maxConcurrentStreams) {
      // Charged only to a peer past the limit it was told: one that stays within it but whose cancelled
      // calls still hold places (their work goes on) is honest, and a client such as grpc-js retries a
      // refused stream at once, again and again until a place is free. It paid for those places when it
      // reset their streams, and a refusal costs this side less than a call.
      this.resetStream(id, H2Error.REFUSED_STREAM, this.streams.size >= this.options.maxConcurrentStreams);
      return;
    }
    const shared = this.shared;
    if (
      this.streams.size >= FAIR_STREAMS &&
      (shared.streams >= this.limits.maxStreams || shared.buffered + STREAM_COST > this.limits.maxBufferedBytes)
    ) {
      // The process holds as many streams as it may: refused here, on a connection that holds several,
      // not on one that holds few.
      shared.limit('streams');
      this.resetStream(id, H2Error.REFUSED_STREAM, false);
      return;
    }
    if (this.buffered + STREAM_COST > this.options.maxSessionMemory) {
      // The connection holds as much as one may (request bodies waiting for the rest of their DATA):
      // refused, and not charged, as a client that cannot know this bound retries such a stream at once.
      this.resetStream(id, H2Error.REFUSED_STREAM, false);
      return;
    }
    // Each stream opened gives back a frame of the control budget: a busy honest client sends a
    // WINDOW_UPDATE or a PING now and then in proportion to its calls.
    if (this.controlTokens < this.limits.controlFrameBurst) this.controlTokens++;
    let contentLength = -1;
    if (fields !== undefined) {
      const checked = selfDependent ? undefined : checkRequestFields(fields, this.decoder.wellFormed);
      if (checked === undefined) {
        // A malformed request: a stream error (§8.1.1), the connection goes on.
        this.resetStream(id, H2Error.PROTOCOL_ERROR);
        return;
      }
      if (ended && checked > 0) {
        this.resetStream(id, H2Error.PROTOCOL_ERROR);
        return;
      }
      contentLength = checked;
    }
    const stream = new H2Stream(this, id, this.peerInitialWindow, this.streamWindow, contentLength);
    this.streams.add(id, stream);
    shared.streams++;
    shared.buffered += STREAM_COST;
    this.buffered += STREAM_COST;
    // Known before the callee answers, so an answer to a request that already ended resets nothing.
    stream.remoteEnded = ended;
    this.options.onStream(stream, fields);
    if (ended && !stream.closed) this.remoteEnd(stream);
  }

  /** The peer ended its side: hand the body over, and close the stream if it is answered. */
  private remoteEnd(stream: H2Stream): void {
    stream.remoteEnded = true;
    const held = stream.body;
    const body = held === undefined ? EMPTY : held.length === stream.size ? held : held.subarray(0, stream.size);
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
        for (const stream of this.streams.list()) {
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
    this.control(frame(SETTINGS, FLAG_ACK, 0, undefined), true);
    this.drainBlocked();
  }

  private windowUpdate(id: number, buf: Buffer, start: number, length: number): void {
    if (length !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of bad length');
    this.chargeControl();
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
      // On a stream answered already, a WINDOW_UPDATE of 0 would have reset it: charged as a reset, or
      // a peer could make every call end in one and never pay (MadeYouReset).
      if (increment === 0) this.chargeReset();
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
      const at = this.outLength;
      const headersEnd = at + 9 + RESPONSE_BLOCK.length;
      const dataEnd = headersEnd + 9 + length;
      const out = this.reserve(dataEnd + 9 + OK_TRAILERS_BLOCK.length - at);
      frameHeader(out, at, RESPONSE_BLOCK.length, HEADERS, FLAG_END_HEADERS, stream.id);
      RESPONSE_BLOCK.copy(out, at + 9);
      frameHeader(out, headersEnd, length, DATA, 0, stream.id);
      out[headersEnd + 9] = 0;
      out.writeUInt32BE(payload.length, headersEnd + 10);
      payload.copy(out, headersEnd + 14);
      frameHeader(out, dataEnd, OK_TRAILERS_BLOCK.length, HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream.id);
      OK_TRAILERS_BLOCK.copy(out, dataEnd + 9);
      this.outLength = dataEnd + 9 + OK_TRAILERS_BLOCK.length;
      this.sendWindow -= length;
      stream.sendWindow -= length;
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
        // A peer whose window is small answers each DATA frame with a WINDOW_UPDATE: one back per frame.
        if (this.controlTokens < this.limits.controlFrameBurst) this.controlTokens++;
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
      this.controlQueued++;
      this.rememberReset(stream.id);
    }
    this.close(stream);
  }

  /**
   * Resets a stream with `code`, charged to the connection's reset budget (MadeYouReset: a peer that
   * makes this side reset its streams pays as if it had reset them), unless `charged` is false (a
   * process-wide limit, or places its cancelled calls' work still holds: not the peer's doing).
   */
  private resetStream(id: number, code: number, charged = true): void {
    if (charged) this.chargeReset();
    this.control(frame(RST_STREAM, 0, id, u32(code)));
    this.rememberReset(id);
    const stream = this.streams.get(id);
    if (stream !== undefined) this.close(stream);
  }

  /** Remembers a stream reset here, so that what the peer sent before it knew is ignored. */
  private rememberReset(id: number): void {
    this.resetHere.add(id);
    if (this.resetHere.size > RESETS_REMEMBERED) {
      this.resetHere.delete(this.resetHere.values().next().value as number);
    }
  }

  /** The stream is over; tells its handler if it was never answered. */
  private close(stream: H2Stream): void {
    if (stream.closed) return;
    stream.closed = true;
    this.shared.streams--;
    this.shared.buffered -= STREAM_COST;
    this.buffered -= STREAM_COST;
    if (stream.holding) this.held++;
    this.streams.delete(stream.id);
    // Only a stream with an answer waiting is in `blocked`: a set lookup would give every stream an
    // identity hash, which V8 makes on first use.
    if (stream.pending !== undefined) this.blocked.delete(stream);
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
    // Nothing more the peer sends is read: a flood goes on filling the peer's own buffers, not our CPU.
    this.socket.pause();
    this.flush();
    this.endSocket();
    for (const stream of this.streams.list()) this.close(stream);
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
    buf.copy(this.reserve(buf.length), this.outLength);
    this.outLength += buf.length;
  }

  /** The output buffer, with room for `bytes` more after {@link outLength}. */
  private reserve(bytes: number): Buffer {
    const out = this.out;
    const need = this.outLength + bytes;
    if (out !== undefined && need <= out.length) return out;
    // Not from Buffer's shared pool (this size never is): a buffer kept between turns holds only itself.
    const grown = Buffer.allocUnsafe(Math.max(OUT_SIZE, need, 2 * (out?.length ?? 0)));
    out?.copy(grown, 0, 0, this.outLength);
    this.out = grown;
    return grown;
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
    const length = this.outLength;
    this.outLength = 0;
    if (out === undefined || length === 0 || this.socket.destroyed) {
      this.out = undefined;
      return;
    }
    this.socket.write(out.subarray(0, length), this.written);
    this.countUnsent();
    // Written whole to the kernel (nothing left in the socket's queue), the buffer is free again: the
    // connection writes its next frames into it. Kept only on a cleartext socket (TLS may hold on to what
    // it was given) and up to OUT_KEPT bytes; a connection idle at the next sweep lets it go (see check).
    if (this.unsent !== 0 || out.length > OUT_KEPT || !this.cleartext) this.out = undefined;
    if (
      this.pausedSince === 0 &&
      this.unsent > 0 &&
      (this.unsent > OUTPUT_HIGH_WATER || this.shared.buffered > this.limits.maxBufferedBytes)
    ) {
      // Backpressure: read no more from a peer that does not read what it asked for.
      this.pausedSince = Date.now();
      this.socket.pause();
    }
  }

  /** A write reached the kernel: count what is left, and read again once all of it has. */
  private readonly written = (): void => {
    this.countUnsent();
    if (this.pausedSince !== 0 && this.unsent === 0 && !this.socket.destroyed) {
      this.pausedSince = 0;
      // Time spent not reading is not the peer's: a frame or block under way gets its time again.
      const now = Date.now();
      if (this.partialSince !== 0) this.partialSince = now;
      if (this.blockSince !== 0) this.blockSince = now;
      this.socket.resume();
    }
  };

  private countUnsent(): void {
    const unsent = this.socket.destroyed ? 0 : this.socket.writableLength;
    this.shared.buffered += unsent - this.unsent;
    this.unsent = unsent;
  }

  private closed(): void {
    clearTimeout(this.lingerTimer);
    this.ended = true;
    for (const stream of this.streams.list()) this.close(stream);
    this.dropBlock();
    this.shared.buffered -= this.unsent + this.restCharged;
    this.unsent = 0;
    this.restCharged = 0;
    this.rest = undefined;
    this.out = undefined;
    this.onEnd(this);
  }
}

/** An HTTP/2 server for unary gRPC calls. */
export function createH2Server(options: H2ServerOptions): H2Server {
  const shared = new Shared(options);
  let goingAway = false;
  const accept = (socket: Socket): void => {
    if (!shared.admit(socket.remoteAddress ?? '')) {
      shared.limit('connections');
      socket.on('error', () => {});
      socket.destroy();
      return;
    }
    const session = new H2Session(socket, shared, (s) => shared.remove(s));
    shared.add(session);
    if (goingAway) session.goAway();
  };
  const server = options.createServer?.(accept) ?? createServer(accept);
  return {
    server,
    goAway: () => {
      goingAway = true;
      for (const session of shared.sessions) session.goAway();
    },
    destroy: () => {
      for (const session of shared.sessions) session.destroy();
    },
  };
}
