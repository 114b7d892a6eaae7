// Type test: the Express adapter's hooks see Express's own Request and Response, with no generics.
// Compiled by `npm run typecheck` twice: against Express 5's types (here) and Express 4's
// (tsconfig.express4.json maps `express` to @types/express@4). Never run.
import express, { type NextFunction, type Request, type Response } from 'express';
import { expectTypeOf } from 'vitest';
import { type ExpressRateLimit, rateLimit } from '../../src/http/express.js';
import { gcra } from '../../src/index.js';

const app = express();

// The newcomer snippet, as written: `req.ip` is `string | undefined` in Express's types.
app.use(rateLimit({ key: (req) => req.ip, handler: (_q, res) => res.json({ error: 'slow down' }) }));

const limited = rateLimit({
  policies: gcra({ limit: 10, periodMs: 60_000 }),
  key: (req) => {
    expectTypeOf(req).toEqualTypeOf<Request>();
    return req.get('x-api-key') ?? req.ip ?? 'anonymous';
  },
  skip: (req) => req.path === '/health' || req.method === 'OPTIONS',
  cost: async (req) => (Array.isArray(req.body) ? req.body.length : 1),
  message: (req, info) => ({ path: req.originalUrl, retryAfterMs: info.decision.retryAfterMs }),
  requestWasSuccessful: (req, statusCode) => statusCode < 400 && req.accepts('json') !== false,
  handler: (req, res, next, outcome) => {
    expectTypeOf(res).toEqualTypeOf<Response>();
    expectTypeOf(next).toEqualTypeOf<NextFunction>();
    if (req.query.debug !== undefined) return next(new Error('denied'));
    res.status(outcome.status).json({ retryAfterMs: outcome.decision.retryAfterMs });
  },
});
expectTypeOf(limited).toEqualTypeOf<ExpressRateLimit<Request, Response>>();
app.use(limited);
app.get('/search', limited, (req, res) => {
  // What the middleware leaves on the request is typed for the handlers after it.
  res.json({ remaining: req.rateLimit?.decision.remaining });
});
express.Router().use(rateLimit({ key: (req) => req.hostname }));

// An app whose earlier middleware adds fields names its request type once.
interface AuthedRequest extends Request {
  user: { id: string };
}
rateLimit<AuthedRequest>({ key: (req) => req.user.id });

// @ts-expect-error a key is a string: a number is refused at compile time.
rateLimit({ key: (req) => req.ip?.length });
