// The reference the hostile transport suite compares the gRPC server with: a node:http2 server running the
// same gRPC handler (the service's decoding, engine and encoding), with node:http2's defaults for
// everything else. Run as its own process (so that its RSS is its own), by h2-harness.ts's serveReference:
//
//   node --import tsx node-h2-server.ts <config file> [<cert file> <key file>]
//
// It prints the same "floodgate is serving" line as the CLI (HTTP API on a free port, for /metrics, and
// the node:http2 port as `grpc`), and stops on SIGTERM.
import { readFileSync } from 'node:fs';
import { createSecureServer, createServer, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { DecodeError, decodeRateLimitRequest, Writer } from '../../src/grpc/codec.js';
import { encodeRateLimitResponse, toDecisionRequest } from '../../src/grpc/rate-limit.js';
import { startService } from '../../src/service.js';

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const MAX_BODY = 1024 * 1024 + 5;

const [configFile, certFile, keyFile] = process.argv.slice(2);
const service = await startService({
  configFile: configFile as string,
  httpPort: 0,
  grpcPort: false,
  logger: 'silent',
  watch: false,
});
const writer = new Writer(4096);

function status(stream: ServerHttp2Stream, code: number, message: string): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond(
    { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(code), 'grpc-message': message },
    { endStream: true },
  );
}

/** One unary ShouldRateLimit call, answered as the service answers it. */
function handle(stream: ServerHttp2Stream, headers: Record<string, unknown>): void {
  stream.on('error', () => {});
  if (headers[':path'] !== PATH) {
    status(stream, 12, 'unknown method');
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_BODY) chunks.push(chunk);
  });
  stream.on('end', () => {
    if (size > MAX_BODY) return status(stream, 8, 'message too large');
    const frame = Buffer.concat(chunks, size);
    if (frame.length < 5 || frame.readUInt32BE(1) !== frame.length - 5) return status(stream, 3, 'bad framing');
    let out: Buffer;
    try {
      const outcomes = service.engine.decideSync(toDecisionRequest(decodeRateLimitRequest(frame.subarray(5))), 'limit');
      encodeRateLimitResponse(writer.reset(), outcomes, service.headers, service.shadowMode);
      const message = writer.view();
      out = Buffer.allocUnsafe(message.length + 5);
      out[0] = 0;
      out.writeUInt32BE(message.length, 1);
      message.copy(out, 5);
    } catch (error) {
      return status(stream, error instanceof DecodeError ? 3 : 13, 'failed');
    }
    if (stream.destroyed) return;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(out);
  });
}

const server: Http2Server =
  certFile === undefined
    ? createServer()
    : (createSecureServer({
        cert: readFileSync(certFile),
        key: readFileSync(keyFile as string),
      }) as unknown as Http2Server);
server.on('stream', handle);
server.on('sessionError', () => {});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as AddressInfo).port;
process.stdout.write(
  `${JSON.stringify({ msg: 'floodgate is serving', http: `127.0.0.1:${service.httpPort}`, grpc: `127.0.0.1:${port}` })}\n`,
);
process.on('SIGTERM', () => {
  server.close();
  void service.close().then(() => process.exit(0));
});
