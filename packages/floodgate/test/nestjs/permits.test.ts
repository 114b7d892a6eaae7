import { Controller, Get, Module, Req } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { afterEach, describe, expect, it } from 'vitest';
import { FloodgateGuard, FloodgateModule, type NestRequest } from '../../src/http/nestjs.js';
import { concurrency, fixedWindow } from '../../src/index.js';
import { type Answer, CountedPermits, Gates, get, modeOf, until } from '../http/permit-kit.js';
import { PLATFORMS, type RunningApp, startApp } from './apps.js';

// NestJS on Express and on Fastify with a concurrency policy, over real HTTP: the guard's permit is held
// for the life of the response and comes back on finish, on client abort and on a handler's error.

function appModule(permits: CountedPermits, gates: Gates) {
  @Controller()
  class WorkController {
    @Get('work')
    async work(@Req() request: NestRequest & { url?: string; originalUrl?: string }) {
      const { mode, id } = modeOf(request.originalUrl ?? request.url);
      if (mode === 'throw') throw new Error('handler failed');
      if (mode === 'wait') await gates.wait(id);
      return { done: true };
    }
  }

  @Module({
    imports: [
      FloodgateModule.forRoot({
        policies: [
          fixedWindow({ limit: 1000, windowMs: 60_000, name: 'rate' }),
          concurrency({ limit: 2, leaseMs: 60_000, name: 'busy' }),
        ],
        permits,
        key: () => 'client',
      }),
    ],
    controllers: [WorkController],
    providers: [{ provide: APP_GUARD, useClass: FloodgateGuard }],
  })
  class AppModule {}
  return AppModule;
}

for (const platform of PLATFORMS) {
  describe(`NestJS on ${platform}: a concurrency policy over real HTTP`, () => {
    let running: RunningApp | undefined;
    let gates = new Gates();
    afterEach(async () => {
      gates.openAll();
      await running?.close();
      running = undefined;
      gates = new Gates();
    });

    it('holds the permit for the response, refuses the third in flight, releases on finish and on error', async () => {
      const permits = new CountedPermits();
      running = await startApp(appModule(permits, gates), platform);
      const a = get(running.url, '/work?mode=wait&id=a');
      const b = get(running.url, '/work?mode=wait&id=b');
      await until(() => gates.entered.size === 2, 'both handlers running');
      expect(permits.inFlight).toBe(2);
      const third = (await get(running.url, '/work')) as Answer;
      expect(third.status).toBe(429);
      expect(third.headers['ratelimit-policy']).toContain('"busy";q=2;qu="concurrent-requests"');
      gates.openAll();
      expect([((await a) as Answer).status, ((await b) as Answer).status]).toEqual([200, 200]);
      await until(() => permits.inFlight === 0, 'both permits released');
      for (let i = 0; i < 3; i++) expect(((await get(running.url, '/work?mode=throw')) as Answer).status).toBe(500);
      await until(() => permits.inFlight === 0, 'the permits of failed handlers released');
    });

    it('releases the permit when the client goes away', async () => {
      const permits = new CountedPermits();
      running = await startApp(appModule(permits, gates), platform);
      let hangUp!: () => void;
      const gone = get(
        running.url,
        '/work?mode=wait&id=gone',
        new Promise<void>((resolve) => {
          hangUp = resolve;
        }),
      );
      await until(() => gates.entered.has('gone'), 'the handler running');
      expect(permits.inFlight).toBe(1);
      hangUp();
      expect(await gone).toBe('aborted');
      await until(() => permits.inFlight === 0, 'the permit released on close');
    });
  });
}
