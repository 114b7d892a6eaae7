// Type test: the Koa middleware's hooks see Koa's own Context, with no generics. Compiled by
// `npm run typecheck` against Koa 2's types (@types/koa@2, here) and Koa 3's (tsconfig.koa3.json maps
// `koa` to @types/koa@3). Never run.
import Koa, { type Context, type ParameterizedContext } from 'koa';
import { expectTypeOf } from 'vitest';
import { type KoaRateLimit, type RateLimitState, rateLimit } from '../../src/http/koa.js';
import { gcra } from '../../src/index.js';

const app = new Koa({ proxy: true });

const middleware = rateLimit({
  policies: gcra({ limit: 10, periodMs: 60_000 }),
  key: (ctx) => {
    expectTypeOf(ctx).toEqualTypeOf<Context>();
    return ctx.get('x-api-key') || ctx.ip;
  },
  skip: (ctx) => ctx.path === '/health',
  handler: (ctx, outcome) => {
    ctx.body = { retryAfterMs: outcome.decision.retryAfterMs, path: ctx.path };
  },
});
expectTypeOf(middleware).toEqualTypeOf<KoaRateLimit<Context>>();
app.use(middleware);

// An app typed with the state the middleware fills in (`ctx.state.rateLimit`).
const typed = new Koa<RateLimitState & { user?: string }>();
typed.use(rateLimit({ key: (ctx) => ctx.ip }));
typed.use(
  rateLimit<ParameterizedContext<RateLimitState & { user?: string }>>({ key: (ctx) => ctx.state.user ?? ctx.ip }),
);
typed.use(async (ctx) => {
  ctx.body = { remaining: ctx.state.rateLimit?.decision.remaining };
});

// @ts-expect-error a key is a string.
rateLimit({ key: (ctx) => ctx.status });
