// Type test: NestJS on either platform. Hooks see `NestRequest` (headers and ip, what both platforms
// give) with no generics, and the platform's own request when named once. Never run.

import type { Request } from 'express';
import type { FastifyRequest } from 'fastify';
import { expectTypeOf } from 'vitest';
import { FloodgateModule, type NestRequest, RateLimit } from '../../src/http/nestjs.js';
import { gcra } from '../../src/index.js';

FloodgateModule.forRoot({
  policies: gcra({ limit: 10, periodMs: 60_000 }),
  key: (request) => {
    expectTypeOf(request).toEqualTypeOf<NestRequest>();
    return request.ip ?? String(request.headers['x-api-key']);
  },
});

// On the Express platform: Express's Request, named once.
FloodgateModule.forRoot<Request>({ key: (request) => request.get('x-api-key') ?? request.ip ?? 'unknown' });
RateLimit<Request>({ policies: gcra({ limit: 2, periodMs: 1000 }), skip: (request) => request.path === '/health' });

// On the Fastify platform: Fastify's request.
FloodgateModule.forRoot<FastifyRequest>({ key: (request) => request.ip, skip: (request) => request.url === '/' });
FloodgateModule.forRootAsync<FastifyRequest>({
  useFactory: async () => ({ key: (request: FastifyRequest) => request.hostname }),
});

// @ts-expect-error a key is a string.
RateLimit({ key: (request) => request.headers });
