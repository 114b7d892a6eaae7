// Type test: the Fastify plugin's hooks see Fastify's own request and reply, with no generics.
// Compiled by `npm run typecheck` against Fastify 5's types (here) and Fastify 4's (tsconfig.fastify4.json
// maps `fastify` to the fastify@4 package). Never run.
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { expectTypeOf } from 'vitest';
import { type FastifyRateLimit, rateLimit } from '../../src/http/fastify.js';
import { gcra } from '../../src/index.js';

const app = Fastify({ trustProxy: true });

const plugin = rateLimit({
  policies: gcra({ limit: 10, periodMs: 60_000 }),
  key: (request) => {
    expectTypeOf(request).toEqualTypeOf<FastifyRequest>();
    return request.headers['x-api-key']?.toString() ?? request.ip;
  },
  skip: (request) => request.url === '/health',
  cost: (request) => (Array.isArray(request.body) ? request.body.length : 1),
  handler: (request, reply, outcome) => {
    expectTypeOf(reply).toEqualTypeOf<FastifyReply>();
    return reply.code(outcome.status).send({ id: request.id, retryAfterMs: outcome.decision.retryAfterMs });
  },
});
expectTypeOf(plugin).toEqualTypeOf<FastifyRateLimit>();
void app.register(plugin);

// Per route: `config.rateLimit` takes the same options, or `false`; the decision is on the request.
app.get(
  '/search',
  { config: { rateLimit: { policies: gcra({ limit: 2, periodMs: 1000 }), key: (request) => request.ip } } },
  async (request) => ({ remaining: request.rateLimit?.decision.remaining }),
);
app.get('/health', { config: { rateLimit: false } }, async () => 'ok');

// @ts-expect-error a hook name Fastify's plugin does not run is refused.
rateLimit({ hook: 'onSend' });
