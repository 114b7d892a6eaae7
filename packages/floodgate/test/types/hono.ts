// Type test: the Hono middleware's hooks see Hono's own Context, with no generics. Never run.
import { type Context, Hono } from 'hono';
import { expectTypeOf } from 'vitest';
import { type HonoRateLimit, type RateLimitVariables, rateLimit } from '../../src/http/hono.js';
import { gcra } from '../../src/index.js';

const app = new Hono<{ Variables: RateLimitVariables & { user?: string } }>();

const middleware = rateLimit({
  policies: gcra({ limit: 10, periodMs: 60_000 }),
  key: (c) => {
    expectTypeOf(c).toEqualTypeOf<Context>();
    return c.req.header('x-api-key') ?? 'anonymous';
  },
  skip: (c) => c.req.path === '/health',
  cost: async (c) => Number(c.req.query('n') ?? 1),
  handler: (c, outcome) => c.json({ retryAfterMs: outcome.decision.retryAfterMs }, 429),
});
expectTypeOf(middleware).toEqualTypeOf<HonoRateLimit>();
app.use(middleware);
app.use('/api/*', rateLimit({ key: (c) => c.req.header('authorization') ?? '' }));
app.get('/search', (c) => c.json({ remaining: c.get('rateLimit')?.decision.remaining ?? null }));

// @ts-expect-error a handler answers with a Response or nothing.
rateLimit({ handler: () => 'denied' });
