import type { AddressInfo, Server, Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import type { ServiceContext } from '../context.js';
import type { DescriptorOutcome } from '../engine.js';
import { classify, type FailureKind } from '../failures.js';
import { refuseTls, type TlsCredentials } from '../tls.js';
import { DecodeError, decodeHealthCheckRequest, decodeRateLimitRequest, Writer } from './codec.js';
import { createH2Server, type H2ServerOptions, type H2Stream, type StreamHandler } from './h2.js';
import { encodeRateLimitResponse, toDecisionRequest } from './rate-limit.js';

/** The Envoy rate limit service's full name. */
export const RATE_LIMIT_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
/** Largest gRPC message accepted, in bytes. */
export const MAX_GRPC_MESSAGE_BYTES = 1024 * 1024;
/** What one connection may hold in its streams: request bodies, and 2 KiB per open stream. */
export const MAX_CONNECTION_BYTES = 8 * 1024 * 1024;
/** Largest request header list accepted (RFC 9113 size), in bytes. */
const MAX_HEADER_LIST_BYTES = 64 * 1024;
/** Default of {@link GrpcServerOptions.readTimeoutMs}. */
export const DEFAULT_GRPC_READ_TIMEOUT_MS = 10_000;
/** Longest delay a timer takes (about 24.8 days); longer deadlines are as good as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const SHOULD_RATE_LIMIT = `/${RATE_LIMIT_SERVICE}/ShouldRateLimit`;
const HEALTH_CHECK = '/grpc.health.v1.Health/Check';

/** gRPC status codes used here. */
export const GrpcStatus = {
  OK: 0,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

const STATUS_NAMES: Record<number, string> = Object.fromEntries(Object.entries(GrpcStatus).map(([k, v]) => [v, k]));

const FAILURE_STATUS: Record<FailureKind, number> = {
  invalid: GrpcStatus.INVALID_ARGUMENT,
  unavailable: GrpcStatus.UNAVAILABLE,
  timeout: GrpcStatus.DEADLINE_EXCEEDED,
  internal: GrpcStatus.INTERNAL,
};

const SERVING = 1;
const NOT_SERVING = 2;

/** Options of {@link createGrpcServer}. */
export interface GrpcServerOptions {
  /**
   * Longest wait for a call's request message, from the stream's headers to its end, in ms. A peer that
   * never ends its request gets DEADLINE_EXCEEDED then, rather than holding the stream.
   * @default 10_000
   */
  readTimeoutMs?: number;
  /** Serve over TLS with these credentials (ALPN `h2`), instead of cleartext HTTP/2. */
  tls?: TlsCredentials;
  /**
   * Connections open at once; when full, a new one ends the oldest connection with no call open, and is
   * refused when there is none. @default 4096
   */
  maxConnections?: number;
  /** Connections open at once from one client address (same rule, within the address). @default 1024 */
  maxConnectionsPerAddress?: number;
  /** Streams open at once, all connections together; past it new streams are refused. @default 16384 */
  maxStreams?: number;
  /**
   * Bytes all gRPC connections together buffer (request bodies, unfinished frames and header blocks,
   * output the peers have not read); past it, requests are refused and reading stops. @default 33_554_432
   */
  maxBufferedBytes?: number;
  /**
   * Longest time a frame or header block may take to arrive whole, and output may wait unread, ms; past
   * it the connection ends. @default 10_000
   */
  frameTimeoutMs?: number;
  /** A connection that opens no stream this long after its preface is closed (GOAWAY), ms. @default 30_000 */
  noStreamTimeoutMs?: number;
  /**
   * A connection with no call open that sends nothing (a keepalive PING counts) this long is closed
   * (GOAWAY), ms. @default 300_000
   */
  idleTimeoutMs?: number;
}

/** The options of {@link GrpcServerOptions} handed to the HTTP/2 transport as they are. */
const TRANSPORT_OPTIONS = [
  'maxConnections',
  'maxConnectionsPerAddress',
  'maxStreams',
  'maxBufferedBytes',
  'frameTimeoutMs',
  'noStreamTimeoutMs',
  'idleTimeoutMs',
] as const satisfies ReadonlyArray<keyof GrpcServerOptions & keyof H2ServerOptions>;

/** The gRPC server: listen, then close gracefully. */
export interface GrpcServer {
  /** Binds; resolves to the port. */
  listen(host: string, port: number): Promise<number>;
  /**
   * Refuses new calls, answers UNAVAILABLE to calls whose request is still arriving, lets the ones being
   * decided finish; after `drainMs`, cuts the connections. Resolves true when drained.
   */
  close(drainMs: number): Promise<boolean>;
}

/**
 * A gRPC server for unary calls over HTTP/2 (cleartext, as Envoy and sidecars talk to a rate limit
 * service, or TLS with optional client certificates): Envoy's `RateLimitService/ShouldRateLimit` and the standard health check. It speaks the
 * gRPC wire protocol directly on `node:http2` with hand-written message codecs, which costs a third of a
 * general-purpose gRPC server per call; interoperability is tested with @grpc/grpc-js as the client.
 * Every failure is a proper status (INVALID_ARGUMENT, UNAVAILABLE, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL), never UNKNOWN. A call's `grpc-timeout` is honoured
 * (DEADLINE_EXCEEDED when it passes before the answer), and so is a limit on reading the request.
 */
export function createGrpcServer(context: () => ServiceContext, options: GrpcServerOptions = {}): GrpcServer {
  const readTimeoutMs = options.readTimeoutMs ?? DEFAULT_GRPC_READ_TIMEOUT_MS;
  if (!Number.isInteger(readTimeoutMs) || readTimeoutMs < 1) {
    throw new RangeError(`readTimeoutMs must be a whole number of milliseconds, at least 1; got ${readTimeoutMs}`);
  }
  const writer = new Writer(4096);
  /** Calls whose request message has not fully arrived. */
  const reading = new Reading();
  const transport: Partial<H2ServerOptions> = {};
  for (const key of TRANSPORT_OPTIONS) if (options[key] !== undefined) transport[key] = options[key];
  const h2 = createH2Server({
    ...transport,
    maxConcurrentStreams: 1000,
    maxHeaderListSize: MAX_HEADER_LIST_BYTES,
    maxBodyBytes: MAX_GRPC_MESSAGE_BYTES + 5,
    // A connection's request bodies and open streams (2 KiB each): 1000 streams and a few 1 MiB messages.
    maxSessionMemory: MAX_CONNECTION_BYTES,
    prefaceTimeoutMs: readTimeoutMs,
    onStream: (stream, fields) => onStream(context(), stream, fields, writer, reading, readTimeoutMs),
    onError: (error) => context().logger.error({ err: error }, 'internal error on a gRPC connection'),
    // Debug level: a peer that breaks HTTP/2 on purpose should not be able to fill the logs.
    onConnectionError: (code, reason, remoteAddress) =>
      context().logger.debug({ code, reason, remoteAddress }, 'gRPC connection ended: the peer broke HTTP/2'),
    ...(options.tls === undefined ? {} : { createServer: tlsServer(context, options.tls) }),
    onLimit: (limit) => context().metrics.grpcLimit(limit),
  });
  const server = h2.server;

  return {
    listen: (host, port) =>
      new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve((server.address() as AddressInfo).port);
        });
      }),
    close: (drainMs) =>
      new Promise((resolve) => {
        const timer = setTimeout(() => {
          h2.destroy();
          resolve(false);
        }, drainMs);
        server.close(() => {
          clearTimeout(timer);
          resolve(true);
        });
        // GOAWAY: clients stop opening streams; open streams finish, then each connection closes. A call
        // still waiting for its request would hold its connection to the end of the drain: answer it now.
        h2.goAway();
        for (const call of reading.list()) call.fail(GrpcStatus.UNAVAILABLE, 'the service is shutting down');
      }),
  };
}

/** Makes the TLS server of the gRPC port: HTTP/2 chosen by ALPN, as gRPC over TLS requires. */
function tlsServer(context: () => ServiceContext, tls: TlsCredentials) {
  return (accept: (socket: Socket) => void): Server => {
    const server = createTlsServer(tls.serverOptions(['h2']), (socket) => {
      // A client offering other protocols only fails the handshake (no_application_protocol); one that
      // offers none gets here, and would not speak HTTP/2 either (RFC 9113 §3.2).
      if (socket.alpnProtocol !== 'h2') {
        refuseTls(context(), 'grpc', socket, 'alpn');
        return;
      }
      if (!tls.admit(socket)) {
        refuseTls(context(), 'grpc', socket, 'client_san');
        return;
      }
      accept(socket);
    });
    tls.attach(server, (reason, error, socket) => refuseTls(context(), 'grpc', socket, reason, error));
    return server;
  };
}

/**
 * `grpc-timeout` in milliseconds (`1-8 digits` and a unit: H, M, S, m, u, n), or undefined when absent
 * or malformed.
 */
export function parseGrpcTimeout(value: unknown): number | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (match === null) return undefined;
  const amount = Number(match[1]);
  const unitMs = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000_001 }[match[2] as 'H'];
  return amount * unitMs;
}

/**
 * Calls whose request has not fully arrived, linked through the calls themselves: a call joins when it
 * opens and leaves when its request is read, and a Set changed that often would promote every call's
 * objects to the old generation (see ./stream-table.ts). A call that leaves keeps no link to another.
 */
class Reading {
  private head: Call | undefined = undefined;

  add(call: Call): void {
    const head = this.head;
    call.nextReading = head;
    call.previousReading = undefined;
    if (head !== undefined) head.previousReading = call;
    this.head = call;
    call.isReading = true;
  }

  delete(call: Call): void {
    if (!call.isReading) return;
    const previous = call.previousReading;
    const next = call.nextReading;
    if (previous === undefined) this.head = next;
    else previous.nextReading = next;
    if (next !== undefined) next.previousReading = previous;
    call.previousReading = undefined;
    call.nextReading = undefined;
    call.isReading = false;
  }

  /** The calls, as a new array (the caller may remove them while it goes through it). */
  list(): Call[] {
    const out: Call[] = [];
    for (let call = this.head; call !== undefined; call = call.nextReading) out.push(call);
    return out;
  }
}

/** Calls opened in this turn of the event loop, whose read timers are not armed yet. */
let unarmed: Call[] = [];

/**
 * Arms a call's read timer after this turn of the event loop, once for all the calls opened in it: a
 * unary request usually arrives whole with its headers, and is read by then, so it needs no timer.
 */
function armLater(call: Call): void {
  if (unarmed.length === 0) setImmediate(armReadTimers);
  unarmed.push(call);
}

function armReadTimers(): void {
  const calls = unarmed;
  unarmed = [];
  for (const call of calls) call.armReadTimer();
}

/**
 * One unary call, answered exactly once: by its handler, or by a timer (the request did not arrive in
 * time, the caller's deadline passed), or on shutdown. A stream the peer resets counts as answered.
 */
class Call implements StreamHandler {
  // Fields `declare`d and assigned in the constructor, as H2Stream's (see there): one Call per call.
  declare private answered: boolean;
  /** A decision of the store's is under way (see {@link hold}). */
  declare private working: boolean;
  declare private readTimer: NodeJS.Timeout | undefined;
  declare private deadlineTimer: NodeJS.Timeout | undefined;
  declare private readonly readTimeoutMs: number;
  declare private readonly ctx: ServiceContext;
  declare readonly stream: H2Stream;
  declare readonly method: 'ShouldRateLimit' | 'Check';
  declare private readonly reading: Reading;
  /** In {@link Reading}: whether the call is there, and its neighbours. */
  declare isReading: boolean;
  declare previousReading: Call | undefined;
  declare nextReading: Call | undefined;
  declare private readonly writer: Writer;

  constructor(
    ctx: ServiceContext,
    stream: H2Stream,
    method: 'ShouldRateLimit' | 'Check',
    reading: Reading,
    writer: Writer,
    readTimeoutMs: number,
    deadlineMs: number | undefined,
  ) {
    this.ctx = ctx;
    this.stream = stream;
    this.method = method;
    this.reading = reading;
    this.writer = writer;
    this.answered = false;
    this.working = false;
    this.readTimer = undefined;
    this.deadlineTimer = undefined;
    this.readTimeoutMs = readTimeoutMs;
    this.isReading = false;
    this.previousReading = undefined;
    this.nextReading = undefined;
    reading.add(this);
    if (method === 'ShouldRateLimit') ctx.metrics.inFlight.grpc++;
    // A request that ended with its headers is read at once, and needs no timer.
    if (!stream.remoteEnded) armLater(this);
    if (deadlineMs !== undefined && deadlineMs < MAX_TIMER_MS) {
      this.deadlineTimer = setTimeout(
        () => this.fail(GrpcStatus.DEADLINE_EXCEEDED, 'deadline exceeded (grpc-timeout)'),
        Math.ceil(deadlineMs),
      );
    }
    stream.handler = this;
  }

  /** Arms the read timer, unless the request already arrived whole (or the call was answered). */
  armReadTimer(): void {
    if (!this.isReading) return;
    this.readTimer = setTimeout(() => {
      this.fail(GrpcStatus.DEADLINE_EXCEEDED, `the request message did not arrive within ${this.readTimeoutMs} ms`);
      this.stream.timedOut();
    }, this.readTimeoutMs);
  }

  /** Whether the call still waits for its answer. */
  get open(): boolean {
    return !this.answered;
  }

  /** The request ended: `frame` should be one length-prefixed message. */
  body(frame: Buffer): void {
    if (this.answered) return;
    if (frame.length < 5) {
      this.fail(GrpcStatus.INVALID_ARGUMENT, 'no request message');
      return;
    }
    if (frame[0] !== 0) {
      this.fail(GrpcStatus.UNIMPLEMENTED, 'compressed messages are not supported');
      return;
    }
    if (frame.readUInt32BE(1) !== frame.length - 5) {
      this.fail(GrpcStatus.INVALID_ARGUMENT, 'a unary call carries exactly one message');
      return;
    }
    this.reading.delete(this);
    clearTimeout(this.readTimer);
    const message = frame.subarray(5);
    if (this.method === 'Check') healthCheck(this.ctx, this, message);
    else shouldRateLimit(this.ctx, this, message, this.writer);
  }

  tooLarge(): void {
    this.fail(GrpcStatus.RESOURCE_EXHAUSTED, `message larger than ${MAX_GRPC_MESSAGE_BYTES} bytes`);
  }

  aborted(): void {
    this.settle();
  }

  /**
   * Work under way for the call (a store's decision): until {@link release}, its stream keeps its place
   * under the connection's stream limit, even once the call is answered or the peer has reset it.
   */
  hold(): void {
    this.working = true;
    this.stream.hold();
  }

  /** The work {@link hold} marked is over. */
  release(): void {
    this.working = false;
    this.stream.release();
    if (this.answered) this.ctx.metrics.abandoned--;
  }

  /** Answers `message` (unframed) with status OK. */
  reply(message: Buffer): void {
    if (this.settle()) this.stream.sendMessage(message);
  }

  /** Answers an error status, counted in the error metric. */
  fail(status: number, message: string): void {
    if (!this.settle()) return;
    this.ctx.metrics.error('grpc', this.method, STATUS_NAMES[status] ?? String(status));
    // The transport ends a request the peer is still sending once the status is out (RST_STREAM
    // NO_ERROR, as gRPC allows), so it does not stay open until the peer gives up.
    this.stream.sendStatus(status, percentEncode(message));
  }

  private settle(): boolean {
    if (this.answered) return false;
    this.answered = true;
    this.reading.delete(this);
    clearTimeout(this.readTimer);
    clearTimeout(this.deadlineTimer);
    if (this.method === 'ShouldRateLimit') this.ctx.metrics.inFlight.grpc--;
    if (this.working) this.ctx.metrics.abandoned++;
    return true;
  }
}

function onStream(
  ctx: ServiceContext,
  stream: H2Stream,
  fields: string[] | undefined,
  writer: Writer,
  reading: Reading,
  readTimeoutMs: number,
): void {
  if (fields === undefined) {
    stream.sendStatus(GrpcStatus.RESOURCE_EXHAUSTED, `request headers larger than ${MAX_HEADER_LIST_BYTES} bytes`);
    return;
  }
  let contentType: string | undefined;
  let path: string | undefined;
  let encoding: string | undefined;
  let timeout: string | undefined;
  for (let i = 0; i < fields.length; i += 2) {
    const value = fields[i + 1];
    switch (fields[i]) {
      case 'content-type':
        contentType = value;
        break;
      case ':path':
        path = value;
        break;
      case 'grpc-encoding':
        encoding = value;
        break;
      case 'grpc-timeout':
        timeout = value;
        break;
      default:
    }
  }
  if (contentType === undefined || !contentType.startsWith('application/grpc')) {
    stream.sendHttpStatus(415);
    return;
  }
  const method = path === SHOULD_RATE_LIMIT ? 'ShouldRateLimit' : path === HEALTH_CHECK ? 'Check' : undefined;
  if (method === undefined) {
    stream.sendStatus(GrpcStatus.UNIMPLEMENTED, percentEncode(`unknown method ${String(path)}`));
    return;
  }
  if (ctx.draining) {
    ctx.metrics.error('grpc', method, 'UNAVAILABLE');
    stream.sendStatus(GrpcStatus.UNAVAILABLE, 'the service is shutting down');
    return;
  }
  if (encoding !== undefined && encoding !== 'identity') {
    stream.sendStatus(
      GrpcStatus.UNIMPLEMENTED,
      percentEncode(`grpc-encoding ${encoding} is not supported (identity only)`),
    );
    return;
  }
  new Call(ctx, stream, method, reading, writer, readTimeoutMs, parseGrpcTimeout(timeout));
}

function shouldRateLimit(ctx: ServiceContext, call: Call, body: Buffer, writer: Writer): void {
  const metrics = ctx.metrics;
  const start = performance.now();
  const finish = (error: unknown, outcomes: DescriptorOutcome[] | undefined): void => {
    metrics.timer('grpc', 'ShouldRateLimit').observe((performance.now() - start) / 1000);
    if (outcomes !== undefined) {
      // Answered already (the deadline passed, the peer reset the stream): nothing to encode.
      if (!call.open) return;
      if (encodeRateLimitResponse(writer.reset(), outcomes, ctx.headers, ctx.shadowMode) && ctx.shadowMode) {
        ctx.stats.globalShadow++;
      }
      call.reply(writer.view());
      return;
    }
    let status: number;
    let message: string;
    if (error instanceof DecodeError) {
      status = GrpcStatus.INVALID_ARGUMENT;
      message = `malformed RateLimitRequest: ${error.message}`;
    } else {
      const failure = classify(error, ctx.storeName);
      if (failure.store) ctx.storeFailed(error);
      else if (failure.kind === 'internal')
        ctx.logger.error({ err: error }, 'internal error answering ShouldRateLimit');
      status = FAILURE_STATUS[failure.kind];
      message = failure.message;
    }
    call.fail(status, message);
  };
  // A fault in answering (encoding, say) fails this call alone: thrown, it would become an unhandled
  // rejection (asynchronous store), which ends the process, or end the connection and every call on it.
  const faulted = (error: unknown): void => {
    ctx.logger.error({ err: error }, 'internal error answering ShouldRateLimit');
    call.fail(GrpcStatus.INTERNAL, 'internal error');
  };
  const engine = ctx.engine;
  let outcomes: DescriptorOutcome[];
  try {
    const request = toDecisionRequest(decodeRateLimitRequest(body));
    if (!engine.sync) {
      // Until the store answers, the call counts against its connection's stream limit, reset or not.
      call.hold();
      engine
        .decide(request, 'limit')
        .finally(() => call.release())
        .then(
          (result) => finish(undefined, result),
          (error: unknown) => finish(error, undefined),
        )
        .catch(faulted);
      return;
    }
    outcomes = engine.decideSync(request, 'limit');
  } catch (error) {
    try {
      finish(error, undefined);
    } catch (fault) {
      faulted(fault);
    }
    return;
  }
  try {
    finish(undefined, outcomes);
  } catch (error) {
    faulted(error);
  }
}

function healthCheck(ctx: ServiceContext, call: Call, body: Buffer): void {
  let service: string;
  try {
    service = decodeHealthCheckRequest(body);
  } catch (error) {
    call.fail(GrpcStatus.INVALID_ARGUMENT, `malformed HealthCheckRequest: ${(error as Error).message}`);
    return;
  }
  if (service !== '' && service !== RATE_LIMIT_SERVICE) {
    call.fail(GrpcStatus.NOT_FOUND, `unknown service ${JSON.stringify(service)}`);
    return;
  }
  const answer = (up: boolean) => {
    const w = new Writer(8);
    w.uint(1, up && !ctx.draining ? SERVING : NOT_SERVING);
    call.reply(w.view());
  };
  call.hold();
  ctx
    .probeStore()
    .finally(() => call.release())
    .then(answer, () => answer(false));
}

/** gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`. */
export function percentEncode(message: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(message)) return message;
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
