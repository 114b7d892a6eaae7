import {
  type ArgumentsHost,
  Catch,
  Controller,
  type ExceptionFilter,
  Get,
  Headers,
  HttpCode,
  Inject,
  Module,
  Post,
  Req,
  UnauthorizedException,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { Redis } from 'ioredis';
import { parseList } from 'structured-headers';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  FloodgateException,
  FloodgateGuard,
  FloodgateModule,
  type FloodgateModuleOptions,
  FloodgateService,
  type NestRequest,
  RateLimit,
  SkipRateLimit,
} from '../../src/http/nestjs.js';
import { fixedWindow, gcra, memoryStore, type Store, slidingLog } from '../../src/index.js';
import { fromIoredis, redisStore } from '../../src/stores/redis/index.js';
import { manualClock, uniquePrefix } from '../../src/testing/index.js';
import { collectWarnings } from '../http/warnings.js';
import { Watched } from '../http/watched-store.js';
import { REDIS_HOST, REDIS_PORT, redisAvailable, requireServer } from '../stores/redis/servers.js';
import { PLATFORMS, type Platform, type RunningApp, startApp } from './apps.js';

// A real NestJS app, on Express and on Fastify, limited by FloodgateModule and its guard, over real HTTP.
// Written as Nest apps are (legacy decorators), without emitted design metadata: every injection names
// its token.

const login = slidingLog({ limit: 2, windowMs: 60_000, name: 'login' });

/** Answers a denial of its routes its own way, keeping the headers the guard set. */
@Catch(FloodgateException)
class TooManyFilter implements ExceptionFilter {
  catch(exception: FloodgateException, host: ArgumentsHost): void {
    const response = host.switchToHttp().getResponse<{
      status?: (code: number) => { json: (body: unknown) => void };
      code?: (code: number) => { send: (body: unknown) => void };
    }>();
    const body = { tooMany: exception.outcome.decision.policy };
    if (typeof response.code === 'function') response.code(exception.getStatus()).send(body);
    else response.status?.(exception.getStatus()).json(body);
  }
}

function appModule(options: FloodgateModuleOptions) {
  @Controller()
  class ApiController {
    @Get('hello')
    hello(@Req() request: NestRequest) {
      return { key: request.rateLimit?.key, remaining: request.rateLimit?.decision.remaining };
    }

    @SkipRateLimit()
    @Get('health')
    health() {
      return { ok: true };
    }

    @RateLimit({ policies: login, skipSuccessfulRequests: true })
    @Post('login')
    @HttpCode(200)
    login(@Headers('x-password') password: string | undefined) {
      if (password !== 'right') throw new UnauthorizedException();
      return { ok: true };
    }

    @RateLimit({ policies: fixedWindow({ limit: 1, windowMs: 60_000, name: 'polite' }), message: 'Slow down.' })
    @Get('polite')
    polite() {
      return { ok: true };
    }

    @RateLimit({ policies: fixedWindow({ limit: 1, windowMs: 60_000, name: 'filtered' }) })
    @UseFilters(TooManyFilter)
    @Get('filtered')
    filtered() {
      return { ok: true };
    }
  }

  @RateLimit({ policies: fixedWindow({ limit: 1, windowMs: 60_000, name: 'admin' }) })
  @Controller('admin')
  class AdminController {
    constructor(@Inject(FloodgateService) private readonly floodgate: FloodgateService) {}

    @Get('stats')
    stats() {
      return { prefix: this.floodgate.limiter.prefix };
    }

    @RateLimit({ policies: fixedWindow({ limit: 2, windowMs: 60_000, name: 'export' }) })
    @Get('export')
    export() {
      return { ok: true };
    }

    @SkipRateLimit()
    @Get('ping')
    ping() {
      return { ok: true };
    }
  }

  @Module({
    imports: [FloodgateModule.forRoot(options)],
    controllers: [ApiController, AdminController],
    providers: [{ provide: APP_GUARD, useClass: FloodgateGuard }],
  })
  class AppModule {}
  return AppModule;
}

const redisUp = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');
const redis = redisUp ? new Redis({ host: REDIS_HOST, port: REDIS_PORT }) : undefined;
afterAll(() => redis?.disconnect());

interface StoreCase {
  name: string;
  make(): Store;
}
const STORES: StoreCase[] = [
  { name: 'memory', make: () => memoryStore() },
  ...(redis === undefined ? [] : [{ name: 'redis', make: () => redisStore({ client: fromIoredis(redis) }) }]),
];

interface Answer {
  status: number;
  headers: Headers;
  body: string;
}

async function send(
  app: RunningApp,
  path: string,
  init: { method?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const response = await fetch(`${app.url}${path}`, init);
  return { status: response.status, headers: response.headers, body: await response.text() };
}

describe.each(PLATFORMS.flatMap((platform) => STORES.map((s) => [`${platform}, ${s.name}`, platform, s] as const)))(
  'nestjs on %s',
  (_name, platform: Platform, storeCase) => {
    let running: RunningApp;
    let store: Watched;
    beforeEach(async () => {
      store = new Watched(storeCase.make());
      const options: FloodgateModuleOptions = {
        policies: gcra({ limit: 3, periodMs: 60_000, name: 'api' }),
        store,
        prefix: uniquePrefix('nest'),
        clock: manualClock({ startMs: Date.UTC(2030, 0, 1) }),
      };
      running = await startApp(appModule(options), platform);
    });
    afterEach(async () => {
      await running?.close();
    });

    it('limits every route, with the decision on req.rateLimit and a problem document on denial', async () => {
      for (const remaining of [2, 1, 0]) {
        const answer = await send(running, '/hello');
        expect(answer.status).toBe(200);
        expect(JSON.parse(answer.body)).toEqual({ key: '127.0.0.1', remaining });
        expect(parseList(answer.headers.get('ratelimit') ?? '')[0]?.[1].get('r')).toBe(remaining);
      }
      const denied = await send(running, '/hello');
      expect(denied.status).toBe(429);
      expect(denied.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(denied.headers.get('retry-after')).toBe('20');
      expect(denied.headers.get('ratelimit')).toBe('"api";r=0;t=20');
      const problem = JSON.parse(denied.body);
      expect(problem).toMatchObject({ status: 429, 'violated-policies': ['api'] });
    });

    it('skips what @SkipRateLimit marks, on a handler or a controller', async () => {
      for (let i = 0; i < 5; i++) {
        const health = await send(running, '/health');
        expect(health.status).toBe(200);
        expect(health.headers.get('ratelimit')).toBeNull();
        expect((await send(running, '/admin/ping')).status).toBe(200);
      }
    });

    it("applies a controller's @RateLimit, and a handler's over it", async () => {
      expect((await send(running, '/admin/stats')).status).toBe(200);
      expect((await send(running, '/admin/stats')).status).toBe(429);
      expect((await send(running, '/admin/export')).headers.get('ratelimit')).toBe('"export";r=1;t=60');
      expect((await send(running, '/admin/export')).status).toBe(200);
      expect((await send(running, '/admin/export')).status).toBe(429);
    });

    it('counts a login only when it fails (skipSuccessfulRequests)', async () => {
      const attempt = (password: string) =>
        send(running, '/login', { method: 'POST', headers: { 'x-password': password } });
      for (let i = 1; i <= 3; i++) {
        expect((await attempt('right')).status).toBe(200);
        await store.refunded(i);
      }
      expect((await attempt('wrong')).status).toBe(401);
      expect((await attempt('wrong')).status).toBe(401);
      const denied = await attempt('right');
      expect(denied.status).toBe(429);
      expect(denied.headers.get('ratelimit')).toBe('"login";r=0;t=60');
      expect(store.refunds).toBe(3);
    });

    it("sends a message option's text as Nest's error body", async () => {
      await send(running, '/polite');
      const denied = await send(running, '/polite');
      expect(denied.status).toBe(429);
      expect(denied.headers.get('retry-after')).toBe('60');
      expect(denied.headers.get('content-type')).toMatch(/^application\/json/);
      expect(JSON.parse(denied.body)).toEqual({ statusCode: 429, message: 'Slow down.' });
    });

    it('lets an exception filter answer a denial, with the headers already set', async () => {
      await send(running, '/filtered');
      const denied = await send(running, '/filtered');
      expect(denied.status).toBe(429);
      expect(denied.headers.get('retry-after')).toBe('60');
      expect(JSON.parse(denied.body)).toEqual({ tooMany: 'filtered' });
    });
  },
);

describe.each(PLATFORMS)('nestjs on %s behind a proxy', (platform) => {
  let running: RunningApp | undefined;
  let warnings: ReturnType<typeof collectWarnings>;
  beforeEach(() => {
    warnings = collectWarnings();
  });
  afterEach(async () => {
    warnings.stop();
    await running?.close();
    running = undefined;
  });
  const start = async (proxyHops?: number) => {
    const options: FloodgateModuleOptions = {
      policies: gcra({ limit: 1, periodMs: 60_000, name: 'api' }),
      clock: manualClock({ startMs: Date.UTC(2030, 0, 1) }),
    };
    running = await startApp(appModule(options), platform, proxyHops);
    return running;
  };
  const hello = async (app: RunningApp, xff: string): Promise<[number, string | undefined]> => {
    const answer = await send(app, '/hello', { headers: { 'x-forwarded-for': xff } });
    return [answer.status, answer.status === 200 ? JSON.parse(answer.body).key : undefined];
  };

  it("follows the platform's trusted-proxy setting: three clients, three keys", async () => {
    const app = await start(1);
    expect(await hello(app, '1.1.1.1')).toEqual([200, '1.1.1.1']);
    expect(await hello(app, '2.2.2.2')).toEqual([200, '2.2.2.2']);
    expect(await hello(app, '3.3.3.3')).toEqual([200, '3.3.3.3']);
    expect((await hello(app, '9.9.9.9, 1.1.1.1'))[0]).toBe(429);
    await warnings.flush();
    expect(warnings.codes()).toEqual([]);
  });

  it('trusts no forwarded header by default, and warns once', async () => {
    const app = await start();
    expect(await hello(app, '1.1.1.1')).toEqual([200, '127.0.0.1']);
    expect((await hello(app, '2.2.2.2'))[0]).toBe(429);
    await warnings.flush();
    expect(warnings.codes()).toEqual(['FLOODGATE_UNTRUSTED_PROXY']);
  });
});

describe('FloodgateModule', () => {
  it('forRootAsync takes options from a factory; without module policies only @RateLimit routes are limited', async () => {
    const CONFIG = Symbol('config');
    @Module({ providers: [{ provide: CONFIG, useValue: { limit: 1 } }], exports: [CONFIG] })
    class ConfigModule {}

    @Controller()
    class Controllers {
      @Get('free')
      free() {
        return { ok: true };
      }

      @RateLimit({ policies: fixedWindow({ limit: 1, windowMs: 60_000, name: 'one' }) })
      @Get('limited')
      limited() {
        return { ok: true };
      }
    }

    @Module({
      imports: [
        FloodgateModule.forRootAsync({
          imports: [ConfigModule],
          inject: [CONFIG],
          useFactory: (config: { limit: number }) => ({ clock: manualClock(), statusCode: 400 + config.limit * 29 }),
        }),
      ],
      controllers: [Controllers],
    })
    class AppModule {}

    // The guard per controller this time, as `@UseGuards(FloodgateGuard)` would put it.
    UseGuards(FloodgateGuard)(Controllers);
    const running = await startApp(AppModule, 'express');
    try {
      for (let i = 0; i < 3; i++) {
        const free = await send(running, '/free');
        expect([free.status, free.headers.get('ratelimit')]).toEqual([200, null]);
      }
      expect((await send(running, '/limited')).status).toBe(200);
      expect((await send(running, '/limited')).status).toBe(429);
    } finally {
      await running.close();
    }
  });
});
