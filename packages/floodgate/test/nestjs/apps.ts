import type { AddressInfo } from 'node:net';
import type { INestApplication, NestApplicationOptions, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';

/** A Nest app listening on 127.0.0.1, on one of the two HTTP platforms. */
export interface RunningApp {
  url: string;
  app: INestApplication;
  close(): Promise<void>;
}

export type Platform = 'express' | 'fastify';
export const PLATFORMS: readonly Platform[] = ['express', 'fastify'];

/**
 * Starts `module` on `platform`. `proxyHops` is the platform's own trusted-proxy setting: Express
 * `app.set('trust proxy', n)`, Fastify's `trustProxy` (as the function `n` compiles to).
 */
export async function startApp(module: Type<unknown>, platform: Platform, proxyHops?: number): Promise<RunningApp> {
  const options: NestApplicationOptions = { logger: false };
  let app: INestApplication;
  if (platform === 'express') {
    const express = await NestFactory.create<NestExpressApplication>(module, options);
    if (proxyHops !== undefined) express.set('trust proxy', proxyHops);
    app = express;
  } else {
    const adapter = new FastifyAdapter(
      proxyHops === undefined ? {} : { trustProxy: (_address: string, hop: number) => hop < proxyHops },
    );
    app = await NestFactory.create<NestFastifyApplication>(module, adapter, options);
  }
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, app, close: () => app.close() };
}
