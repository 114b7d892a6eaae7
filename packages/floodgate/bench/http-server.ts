// One HTTP server of the HTTP benchmark, started by http.ts in its own process: `MODE` picks the
// framework and the rate limiter in front of a handler that answers a small JSON body.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import fastifyRateLimit from '@fastify/rate-limit';
import express from 'express';
import expressRateLimit from 'express-rate-limit';
import Fastify from 'fastify';
import { gcra } from 'floodgate';
import { rateLimit as floodgateExpress } from 'floodgate/express';
import { rateLimit as floodgateFastify } from 'floodgate/fastify';
import { rateLimit as floodgateNode } from 'floodgate/node';

// Every limiter admits every request (the benchmark measures the cost of deciding and of the headers),
// from one client, so one key: 10^7 per minute, far above what one core can serve.
const LIMIT = 10_000_000;
const WINDOW_MS = 60_000;
const policies = gcra({ limit: LIMIT, periodMs: WINDOW_MS });
const body = JSON.stringify({ hello: 'world' });

function reply(_request: IncomingMessage, response: ServerResponse): void {
  response.setHeader('Content-Type', 'application/json');
  response.end(body);
}

async function start(mode: string): Promise<number> {
  const listen = (server: ReturnType<typeof createServer>) =>
    new Promise<number>((resolve) =>
      server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
    );
  switch (mode) {
    case 'node':
      return listen(createServer(reply));
    case 'node+floodgate':
      return listen(createServer(floodgateNode({ policies }).wrap(reply)));
    case 'express':
    case 'express+floodgate':
    case 'express+express-rate-limit': {
      const app = express();
      app.disable('x-powered-by');
      if (mode === 'express+floodgate') app.use(floodgateExpress({ policies }));
      if (mode === 'express+express-rate-limit') app.use(expressRateLimit({ windowMs: WINDOW_MS, limit: LIMIT }));
      app.get('/', (_request, response) => {
        response.json({ hello: 'world' });
      });
      return listen(createServer(app));
    }
    case 'fastify':
    case 'fastify+floodgate':
    case 'fastify+@fastify/rate-limit': {
      const app = Fastify();
      if (mode === 'fastify+floodgate') await app.register(floodgateFastify({ policies }));
      if (mode === 'fastify+@fastify/rate-limit')
        await app.register(fastifyRateLimit, { max: LIMIT, timeWindow: WINDOW_MS });
      app.get('/', async () => ({ hello: 'world' }));
      await app.listen({ port: 0, host: '127.0.0.1' });
      return (app.server.address() as AddressInfo).port;
    }
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

const port = await start(process.argv[2] ?? '');
// The parent asks for the CPU time this process spends serving the measured run: under contention from
// other work on the machine, CPU time per request is steadier than requests per second.
let mark = process.cpuUsage();
process.on('message', (message) => {
  if (message === 'mark') mark = process.cpuUsage();
  if (message === 'cpu') {
    const used = process.cpuUsage(mark);
    process.send?.({ cpuUs: used.user + used.system });
  }
});
if (process.send) process.send({ port });
else console.log(`listening on http://127.0.0.1:${port}/`);
