// Type test: the node:http adapter's hooks see Node's IncomingMessage and ServerResponse. Never run.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { expectTypeOf } from 'vitest';
import { type NodeRateLimit, rateLimit } from '../../src/http/node.js';
import { gcra } from '../../src/index.js';

const limit = rateLimit({
  policies: gcra({ limit: 10, periodMs: 60_000 }),
  key: (req) => {
    expectTypeOf(req).toEqualTypeOf<IncomingMessage>();
    return req.headers['x-api-key']?.toString() ?? req.socket.remoteAddress ?? 'unknown';
  },
  skip: (req) => req.url === '/health',
  handler: (_req, res, outcome) => {
    expectTypeOf(res).toEqualTypeOf<ServerResponse>();
    res.end(JSON.stringify({ retryAfterMs: outcome.decision.retryAfterMs }));
  },
});
expectTypeOf(limit).toEqualTypeOf<NodeRateLimit>();

createServer(
  limit.wrap((req, res) => {
    res.end(String(req.rateLimit?.decision.remaining));
  }),
);

// @ts-expect-error a key is a string.
rateLimit({ key: (req) => req.headers });
