import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import {
  type CanActivate,
  type CustomDecorator,
  type DynamicModule,
  type ExecutionContext,
  type FactoryProvider,
  Global,
  HttpException,
  Inject,
  Injectable,
  Module,
  type ModuleMetadata,
  SetMetadata,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { FloodgateError } from '../errors.js';
import type { Limiter } from '../limiter/limiter.js';
import {
  buildLimiter,
  createHttpRateLimiter,
  derivedOptions,
  type HttpRateLimiter,
  type MaybePromise,
  type RateLimitInfo,
  type RateLimitOptions,
  type RateLimitOutcome,
  type RequestAccess,
} from './core.js';
import { expressTrustsProxy, settleOnClose } from './node-access.js';

/**
 * The request a NestJS app hands its guards, on Express or on Fastify, as far as floodgate reads it.
 * Hooks receive the platform's own request: type them with yours (`FloodgateModule.forRoot<Request>`).
 */
export interface NestRequest {
  readonly headers: IncomingHttpHeaders;
  /** The client address under the platform's trusted-proxy setting (Express `trust proxy`, Fastify `trustProxy`). */
  readonly ip?: string;
  /** The limit decided on this request; absent when the route is not limited. */
  rateLimit?: RateLimitInfo;
}

/** Options of {@link FloodgateModule.forRoot}: those of every adapter, applied to every route the guard sees. */
export type FloodgateModuleOptions<Req = NestRequest> = RateLimitOptions<Req>;

/** Options of {@link FloodgateModule.forRootAsync}, as Nest's other modules take them. */
export interface FloodgateModuleAsyncOptions<Req = NestRequest> {
  imports?: ModuleMetadata['imports'];
  inject?: FactoryProvider['inject'];
  useFactory: (...args: never[]) => MaybePromise<FloodgateModuleOptions<Req>>;
}

/** The injection token of the module's options. */
export const FLOODGATE_OPTIONS = Symbol.for('floodgate.nestjs.options');

const ROUTE_OPTIONS = 'floodgate:rate-limit';
const SKIP = 'floodgate:skip-rate-limit';

/**
 * A route's (or a controller's) own options, replacing the module's: its own `policies`, `cost`, `key`…
 * A handler's options override its controller's. Unless they name a `store` (or another limiter
 * option), the route decides with the module's limiter.
 *
 * @example
 * ```ts
 * @RateLimit({ policies: slidingLog({ limit: 5, windowMs: 60_000, name: 'login' }), skipSuccessfulRequests: true })
 * @Post('login')
 * login() {}
 * ```
 */
export function RateLimit<Req = NestRequest>(options: RateLimitOptions<Req>): CustomDecorator<string> {
  if (typeof options !== 'object' || options === null) {
    throw new FloodgateError('ERR_INVALID_OPTION', '@RateLimit needs an options object', { option: 'RateLimit' });
  }
  return SetMetadata(ROUTE_OPTIONS, options);
}

/** Exempts a handler or a controller from the guard; `@SkipRateLimit(false)` on a handler limits it again. */
export function SkipRateLimit(skip = true): CustomDecorator<string> {
  return SetMetadata(SKIP, skip);
}

/**
 * The denial, thrown by the guard for Nest's exception layer: its response is the problem document (or
 * the `message` option's body), its status 429 (503 when the store is down and `failure` is `'closed'`).
 * The rate-limit headers and `Retry-After` are already on the response. Catch it in an exception filter
 * to answer otherwise.
 */
export class FloodgateException extends HttpException {
  /** The decision and the response parts that follow from it. */
  readonly outcome: RateLimitOutcome;

  constructor(outcome: RateLimitOutcome) {
    super(denialResponse(outcome), outcome.status);
    this.outcome = outcome;
  }
}

function contentTypeOf(outcome: RateLimitOutcome): string | undefined {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i += 2) if (headers[i] === 'Content-Type') return headers[i + 1];
  return undefined;
}

const isJson = (contentType: string | undefined) =>
  contentType !== undefined && /^application\/([a-z.+-]*\+)?json\b/.test(contentType);

/** What Nest sends for a denial: JSON bodies as objects (Nest serializes them), text as Nest's `{ statusCode, message }`. */
function denialResponse(outcome: RateLimitOutcome): string | object {
  const body = outcome.body ?? '';
  return isJson(contentTypeOf(outcome)) ? (JSON.parse(body) as object) : body;
}

/** A Fastify request: the Node.js request is under `raw`; `ips` exists only under `trustProxy`. */
interface FastifyRequestLike {
  readonly raw: { readonly socket?: { readonly remoteAddress?: string } };
}

const isFastify = (request: object): request is FastifyRequestLike =>
  typeof (request as Partial<FastifyRequestLike>).raw === 'object';

/** Reads the request of a Nest app on Express or on Fastify, following the platform's proxy setting. */
const nestAccess: RequestAccess<NestRequest> = {
  peer: (request) =>
    isFastify(request)
      ? request.raw.socket?.remoteAddress
      : (request as { socket?: { remoteAddress?: string } }).socket?.remoteAddress,
  header: (request, name) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  },
  address: (request) => request.ip,
  trustsProxy: (request) => (isFastify(request) ? 'ips' in request : expressTrustsProxy(request)),
};

/** The response of either platform: Express's (a Node.js response) or Fastify's reply. */
interface ReplyLike {
  header?(name: string, value: string): unknown;
  setHeader?(name: string, value: string): unknown;
  raw?: ServerResponse;
}

function setHeader(response: ReplyLike, name: string, value: string): void {
  if (typeof response.header === 'function' && response.raw !== undefined) response.header(name, value);
  else response.setHeader?.(name, value);
}

/**
 * The module's limiter and the middleware it decides with; one per application, shared by every guard.
 * Inject it to reach the limiter (`reset` a key, listen to its events).
 */
export class FloodgateService {
  /** The limiter deciding. */
  readonly limiter: Limiter;
  private readonly options: FloodgateModuleOptions<NestRequest>;
  private readonly base: HttpRateLimiter<NestRequest> | undefined;
  private readonly routes = new WeakMap<object, HttpRateLimiter<NestRequest>>();

  constructor(options: FloodgateModuleOptions<unknown>) {
    if (typeof options !== 'object' || options === null) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'FloodgateModule needs an options object', {
        option: 'FloodgateModule',
      });
    }
    this.options = options as FloodgateModuleOptions<NestRequest>;
    // Without module-wide policies only routes with @RateLimit are limited, all on one limiter.
    const limitsEveryRoute = options.policies !== undefined || (options.limiter?.policies.length ?? 0) > 0;
    this.base = limitsEveryRoute ? createHttpRateLimiter(this.options, nestAccess) : undefined;
    this.limiter = this.base?.limiter ?? buildLimiter(this.options, undefined);
  }

  /** The middleware of a route: the module's, or one with the route's own options. */
  decider(route: RateLimitOptions<NestRequest> | undefined): HttpRateLimiter<NestRequest> | undefined {
    if (route === undefined) return this.base;
    let decide = this.routes.get(route);
    if (decide === undefined) {
      decide =
        this.base?.derive(route) ??
        createHttpRateLimiter(derivedOptions(this.options, route, this.limiter), nestAccess);
      this.routes.set(route, decide);
    }
    return decide;
  }
}

/**
 * The guard that limits requests: register it for the whole app (`{ provide: APP_GUARD, useClass:
 * FloodgateGuard }`) or per controller (`@UseGuards(FloodgateGuard)`). Admitted requests get the
 * rate-limit headers and `req.rateLimit`; denied ones throw a {@link FloodgateException}. Only HTTP is
 * limited: other contexts (microservices, WebSockets) pass.
 */
export class FloodgateGuard implements CanActivate {
  constructor(
    private readonly service: FloodgateService,
    private readonly reflector: Reflector,
  ) {}

  /** The limiter deciding. */
  get limiter(): Limiter {
    return this.service.limiter;
  }

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (context.getType() !== 'http') return true;
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean | undefined>(SKIP, targets) === true) return true;
    const route = this.reflector.getAllAndOverride<RateLimitOptions<NestRequest> | undefined>(ROUTE_OPTIONS, targets);
    const decide = this.service.decider(route);
    if (decide === undefined) return true;
    const http = context.switchToHttp();
    const request = http.getRequest<NestRequest>();
    const response = http.getResponse<ReplyLike>();
    const outcome = await decide(request);
    if (outcome === undefined) return true;
    request.rateLimit = outcome;
    const headers = outcome.headers;
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i] as string;
      // Nest writes the denial's body and picks its content type; a JSON body keeps ours (problem+json).
      if (name !== 'Content-Type' || isJson(headers[i + 1])) setHeader(response, name, headers[i + 1] as string);
    }
    if (!outcome.allowed) throw new FloodgateException(outcome);
    if (outcome.settle !== undefined) {
      const raw = response.raw ?? (response as unknown as ServerResponse);
      settleOnClose(raw, outcome.settle);
    }
    return true;
  }
}

/**
 * Rate limiting for NestJS (Express or Fastify platform): the module holds the options and the limiter,
 * {@link FloodgateGuard} applies them, {@link RateLimit} and {@link SkipRateLimit} set them per route.
 * The client's key follows the platform's trusted-proxy setting (`app.set('trust proxy', 1)` on Express,
 * `new FastifyAdapter({ trustProxy: … })`).
 *
 * @example
 * ```ts
 * @Module({
 *   imports: [FloodgateModule.forRoot({ policies: gcra({ limit: 100, periodMs: 60_000 }), store })],
 *   providers: [{ provide: APP_GUARD, useClass: FloodgateGuard }],
 * })
 * export class AppModule {}
 * ```
 */
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest module is a class, configured by static forRoot methods.
export class FloodgateModule {
  /** The module with these options, for every module of the app. */
  static forRoot<Req = NestRequest>(options: FloodgateModuleOptions<Req>): DynamicModule {
    return {
      module: FloodgateModule,
      providers: [{ provide: FLOODGATE_OPTIONS, useValue: options }, FloodgateService],
      exports: [FLOODGATE_OPTIONS, FloodgateService],
    };
  }

  /** The module with options from a factory (a `ConfigService`, a Redis client provider). */
  static forRootAsync<Req = NestRequest>(options: FloodgateModuleAsyncOptions<Req>): DynamicModule {
    if (typeof options?.useFactory !== 'function') {
      throw new FloodgateError('ERR_INVALID_OPTION', 'forRootAsync needs a useFactory function', {
        option: 'useFactory',
      });
    }
    return {
      module: FloodgateModule,
      imports: options.imports ?? [],
      providers: [
        { provide: FLOODGATE_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
        FloodgateService,
      ],
      exports: [FLOODGATE_OPTIONS, FloodgateService],
    };
  }
}

// Nest's decorators, applied as functions: this code needs neither `experimentalDecorators` nor
// `emitDecoratorMetadata`, and every injection names its token.
Injectable()(FloodgateService);
Inject(FLOODGATE_OPTIONS)(FloodgateService, undefined, 0);
Injectable()(FloodgateGuard);
Inject(FloodgateService)(FloodgateGuard, undefined, 0);
Inject(Reflector)(FloodgateGuard, undefined, 1);
Global()(FloodgateModule);
Module({})(FloodgateModule);

export type { TrustProxy } from './client-address.js';
export type { DenialMessage, RateLimitInfo, RateLimitOptions, RateLimitOutcome } from './core.js';
export type { HeaderFormat } from './headers.js';
export { FloodgateThrottlerStorage, type ThrottlerStorageOptions, throttlerStorage } from './throttler-storage.js';
