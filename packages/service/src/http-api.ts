import { createReadStream, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { extname, join, resolve, sep } from 'node:path';
import { handleAdmin } from './admin/admin-api.js';
import type { ServiceContext } from './context.js';
import {
  type DecisionRequest,
  type DescriptorOutcome,
  type DescriptorRequest,
  type LimitOverride,
  MAX_DESCRIPTORS,
  MAX_ENTRIES,
  MAX_SETTLE_DESCRIPTORS,
  type Mode,
  overLimit,
  type SettleCall,
  type SettleDescriptor,
  type SettleOutcome,
  showValue,
} from './engine.js';
import { classify, HTTP_STATUS } from './failures.js';
import type { RateLimitHeaders } from './headers.js';
import { JsonBodyError, parseJsonBody } from './json-body.js';
import { openApiDocument } from './openapi.js';
import { type PermitCall, PermitCallError, type PermitDesk } from './permits.js';
import { methodNotAllowed, problem } from './problem.js';
import { refuseTls, type TlsCredentials } from './tls.js';

/** Largest request body accepted, in bytes. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Options of the HTTP API. */
export interface HttpApiOptions {
  /** Serve the files of this directory at `/` (a web page); API paths take precedence. */
  readonly staticDir?: string | undefined;
  /** Serve HTTPS (HTTP/1.1) with these credentials, instead of cleartext HTTP. */
  readonly tls?: TlsCredentials | undefined;
}

/** The HTTP API's server: cleartext or HTTPS. */
export type HttpApiServer = Server | HttpsServer;

// Maps, not object literals: the path and a file's extension come from the request, and an object
// would answer `__proto__` or `constructor` with what it inherits.
const MODES: ReadonlyMap<string, Mode> = new Map([
  ['/v1/decide', 'limit'],
  ['/v1/check', 'check'],
  ['/v1/status', 'status'],
  ['/v1/reset', 'reset'],
]);
const METHOD_NAMES: Record<Mode, string> = { limit: 'decide', check: 'check', status: 'status', reset: 'reset' };

/** The permit calls: take a permit of a concurrency limit, extend its lease, give it back. */
type PermitOp = 'acquire' | 'refresh' | 'release';
const PERMIT_OPS: ReadonlyMap<string, PermitOp> = new Map([
  ['/v1/permits/acquire', 'acquire'],
  ['/v1/permits/refresh', 'refresh'],
  ['/v1/permits/release', 'release'],
]);

const CONTENT_TYPES: ReadonlyMap<string, string> = new Map([
  ['.html', 'text/html; charset=utf-8'],
  ['.js', 'text/javascript; charset=utf-8'],
  ['.mjs', 'text/javascript; charset=utf-8'],
  ['.css', 'text/css; charset=utf-8'],
  ['.json', 'application/json'],
  ['.svg', 'image/svg+xml'],
  ['.png', 'image/png'],
  ['.ico', 'image/x-icon'],
  ['.woff2', 'font/woff2'],
  ['.map', 'application/json'],
  ['.txt', 'text/plain; charset=utf-8'],
]);

/** A request the HTTP layer refuses before the engine sees it. */
class BadRequest extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/**
 * Counts a request of `op` in flight and times it until its response closes (an error status counted too),
 * then reads its body; while the service drains, answers 503 instead. The rest of a body too large is not
 * read: it is answered 413 and the connection closes after the answer.
 */
function trackedBody(
  ctx: ServiceContext,
  req: IncomingMessage,
  res: ServerResponse,
  op: string,
  onBody: (body: string) => void,
): void {
  const start = performance.now();
  const metrics = ctx.metrics;
  if (ctx.draining) {
    metrics.error('http', op, '503');
    problem(res, 503, 'Service Unavailable', 'the service is shutting down');
    return;
  }
  metrics.inFlight.http++;
  let finished = false;
  res.on('close', () => {
    if (finished) return;
    finished = true;
    metrics.inFlight.http--;
    metrics.timer('http', op).observe((performance.now() - start) / 1000);
    if (res.statusCode >= 400) metrics.error('http', op, String(res.statusCode));
  });
  readBody(req, (error, body) => {
    if (error !== undefined) {
      res.setHeader('Connection', 'close');
      problem(res, 413, 'Payload Too Large', error.message);
      return;
    }
    onBody(body as string);
  });
}

/**
 * The HTTP JSON API: decisions (`/v1/decide`, `/v1/check`, `/v1/status`, `/v1/reset`), health
 * (`/healthz`, `/readyz`), `/metrics`, `/openapi.json`, `/v1/config`, `/v1/stats`, and optionally a
 * static web page at `/`.
 */
export function createHttpApi(context: () => ServiceContext, options: HttpApiOptions = {}): HttpApiServer {
  const staticRoot = options.staticDir === undefined ? undefined : resolve(options.staticDir);
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const ctx = context();
    if (ctx.draining) res.setHeader('Connection', 'close');
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (path.startsWith('/v1/admin/')) {
      handleAdmin(ctx, req, res, path, q === -1 ? '' : url.slice(q + 1), {
        parseDecisionRequest,
        decisionBody: (outcomes, m) => decisionBody(outcomes, m, ctx.headers),
        fail: (error) => fail(ctx, res, error),
      });
      return;
    }
    if (path === '/v1/settle') {
      if (req.method !== 'POST') return methodNotAllowed(res, 'POST');
      handleSettle(ctx, req, res);
      return;
    }
    const op = PERMIT_OPS.get(path);
    if (op !== undefined) {
      if (req.method !== 'POST') return methodNotAllowed(res, 'POST');
      handlePermit(ctx, req, res, op);
      return;
    }
    const mode = MODES.get(path);
    if (mode !== undefined) {
      if (req.method !== 'POST') return methodNotAllowed(res, 'POST');
      handleDecision(ctx, req, res, mode);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return methodNotAllowed(res, 'GET, HEAD');
    switch (path) {
      case '/healthz':
        json(res, 200, { status: 'ok' });
        return;
      case '/readyz':
        void ready(ctx, res);
        return;
      case '/metrics':
        void metrics(ctx, res);
        return;
      case '/openapi.json':
        json(res, 200, openApiDocument());
        return;
      case '/v1/config':
        json(res, 200, ctx.configSummary());
        return;
      case '/v1/stats': {
        const params = new URLSearchParams(q === -1 ? '' : url.slice(q + 1));
        const window = Number(params.get('window') ?? '1');
        const seconds = Number.isInteger(window) && window >= 1 && window <= 60 ? window : 1;
        void stats(ctx, res, seconds);
        return;
      }
    }
    if (staticRoot !== undefined && serveStatic(staticRoot, path, req, res)) return;
    if (path === '/') return json(res, 200, index());
    problem(res, 404, 'Not Found', `no route ${req.method} ${path}; see /openapi.json`);
  };
  const tls = options.tls;
  let server: HttpApiServer;
  if (tls === undefined) {
    server = createServer(handle);
  } else {
    // HTTP/1.1 only: a client that insists on h2 by ALPN fails its handshake rather than misspeaking.
    const https = createHttpsServer(tls.serverOptions(['http/1.1']), handle);
    https.on('secureConnection', (socket) => {
      if (!tls.admit(socket)) refuseTls(context(), 'http', socket, 'client_san');
    });
    tls.attach(https, (reason, error, socket) => refuseTls(context(), 'http', socket, reason, error));
    server = https;
  }
  // Envoy and sidecars keep connections open; a short keep-alive bounds the drain on shutdown.
  server.keepAliveTimeout = 5000;
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  return server;
}

function handleDecision(ctx: ServiceContext, req: IncomingMessage, res: ServerResponse, mode: Mode): void {
  const method = METHOD_NAMES[mode];
  trackedBody(ctx, req, res, method, (body) => {
    let request: DecisionRequest;
    try {
      request = parseDecisionRequest(body);
      if (request.settle === true && mode !== 'limit') {
        throw new BadRequest(400, `settle is for /v1/decide only, not /v1/${METHOD_NAMES[mode]}`, 'settle');
      }
    } catch (e) {
      if (e instanceof BadRequest) return problem(res, e.status, 'Bad Request', e.message, e.field);
      fail(ctx, res, e);
      return;
    }
    const engine = ctx.engine;
    if (request.domain !== '' && !engine.domains.has(request.domain)) {
      const name = request.domain.length > 64 ? `${request.domain.slice(0, 64)}…` : request.domain;
      problem(res, 404, 'Not Found', `unknown domain ${JSON.stringify(name)}`, 'domain');
      return;
    }
    if (engine.sync) {
      let outcomes: DescriptorOutcome[];
      try {
        outcomes = engine.decideSync(request, mode);
      } catch (e) {
        fail(ctx, res, e);
        return;
      }
      json(res, 200, decisionBody(outcomes, mode, ctx.headers));
      return;
    }
    engine.decide(request, mode).then(
      (outcomes) => json(res, 200, decisionBody(outcomes, mode, ctx.headers)),
      (e: unknown) => fail(ctx, res, e),
    );
  });
}

/** `POST /v1/settle`: descriptors decided with `settle: true`, each charged its actual cost. */
function handleSettle(ctx: ServiceContext, req: IncomingMessage, res: ServerResponse): void {
  trackedBody(ctx, req, res, 'settle', (body) => {
    let call: SettleCall;
    try {
      call = parseSettleCall(body);
    } catch (e) {
      if (e instanceof BadRequest) return problem(res, e.status, 'Bad Request', e.message, e.field);
      fail(ctx, res, e);
      return;
    }
    const engine = ctx.engine;
    if (!engine.domains.has(call.domain)) {
      const name = call.domain.length > 64 ? `${call.domain.slice(0, 64)}…` : call.domain;
      problem(res, 404, 'Not Found', `unknown domain ${JSON.stringify(name)}`, 'domain');
      return;
    }
    engine.settle(call).then(
      (outcomes: SettleOutcome[]) =>
        json(res, 200, { descriptors: outcomes.map((o) => ({ rule: o.rule ?? null, settled: o.settled })) }),
      (e: unknown) => fail(ctx, res, e),
    );
  });
}

/**
 * A body's `descriptors`: a list of objects of `shape`, counted against `max` before any is read (the work
 * of a refusal does not grow with the list); each error names the field.
 */
function descriptorObjects(
  value: unknown,
  list: { shape: string; max: number; per: string; nonEmpty: boolean },
): Record<string, unknown>[] {
  if (!Array.isArray(value) || (list.nonEmpty && value.length === 0)) {
    throw new BadRequest(
      400,
      `descriptors is required: a non-empty list of ${list.shape}, got ${showValue(value)}`,
      'descriptors',
    );
  }
  if (value.length > list.max) {
    throw new BadRequest(400, `at most ${list.max} descriptors per ${list.per}, got ${value.length}`, 'descriptors');
  }
  return value.map((d: unknown, i) => {
    if (typeof d !== 'object' || d === null || Array.isArray(d)) {
      const field = `descriptors[${i}]`;
      throw new BadRequest(400, `${field} must be an object ${list.shape}, got ${showValue(d)}`, field);
    }
    return d as Record<string, unknown>;
  });
}

/**
 * Validates the shape of a settle call `{ domain, descriptors: [{ entries, settlement, cost }] }`; the
 * engine checks the rest (entries, costs, the rule) before the store is asked, and the limiter the
 * settlement's signature.
 */
export function parseSettleCall(text: string): SettleCall {
  const o = jsonObject(text, '{ domain, descriptors: [{ entries, settlement, cost }] }');
  onlyFields(o, ['domain', 'descriptors'], '');
  if (typeof o.domain !== 'string' || o.domain.length === 0) {
    throw new BadRequest(400, `domain is required: a non-empty string, got ${showValue(o.domain)}`, 'domain');
  }
  const descriptors: SettleDescriptor[] = descriptorObjects(o.descriptors, {
    shape: '{ entries, settlement, cost }',
    max: MAX_SETTLE_DESCRIPTORS,
    per: 'settle',
    nonEmpty: true,
  }).map((dd, i) => {
    const field = `descriptors[${i}]`;
    onlyFields(dd, ['entries', 'settlement', 'cost'], field);
    if (typeof dd.cost !== 'number') {
      throw new BadRequest(
        400,
        `${field}.cost is required: a number, what the call really cost, got ${showValue(dd.cost)}`,
        `${field}.cost`,
      );
    }
    if (Array.isArray(dd.entries) && dd.entries.length > MAX_ENTRIES) {
      throw new BadRequest(
        400,
        `${field}.entries has ${dd.entries.length} entries; at most ${MAX_ENTRIES}`,
        `${field}.entries`,
      );
    }
    return { entries: dd.entries as SettleDescriptor['entries'], settlement: dd.settlement, cost: dd.cost };
  });
  return { domain: o.domain, descriptors };
}

/** The body as a JSON object, or a 400 naming what it should be. */
function jsonObject(text: string, shape: string): Record<string, unknown> {
  let body: unknown;
  try {
    body = parseJsonBody(text);
  } catch (error) {
    if (error instanceof JsonBodyError) throw new BadRequest(400, error.message, error.field);
    throw error;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new BadRequest(400, `the body must be a JSON object ${shape}, got ${showValue(body)}`);
  }
  return body as Record<string, unknown>;
}

/**
 * A permit call: validated whole before the store is asked; answered as JSON, refusals as problem+json.
 * A waiting acquire ends when the client goes away: its waiter leaves the key's queue.
 */
function handlePermit(ctx: ServiceContext, req: IncomingMessage, res: ServerResponse, op: PermitOp): void {
  trackedBody(ctx, req, res, op, (body) => {
    let call: PermitCall;
    try {
      call = parsePermitCall(body, op);
    } catch (e) {
      if (e instanceof BadRequest) return problem(res, e.status, 'Bad Request', e.message, e.field);
      fail(ctx, res, e);
      return;
    }
    const desk = ctx.engine.permits;
    if (!ctx.engine.domains.has(call.domain)) {
      const name = call.domain.length > 64 ? `${call.domain.slice(0, 64)}…` : call.domain;
      problem(res, 404, 'Not Found', `unknown domain ${JSON.stringify(name)}`, 'domain');
      return;
    }
    if (desk === undefined) {
      problem(res, 404, 'Not Found', 'the config has no concurrency limits (a rule with `concurrency`)', 'domain');
      return;
    }
    let gone: AbortController | undefined;
    if (call.timeoutMs !== undefined) {
      const controller = new AbortController();
      gone = controller;
      res.on('close', () => {
        if (!res.writableFinished) controller.abort();
      });
      call = { ...call, signal: controller.signal };
    }
    permitAnswer(desk, call, op).then(
      (answer) => json(res, 200, answer),
      (e: unknown) => {
        // The client went away while it waited: nobody to answer, and its waiter left the queue.
        if (gone?.signal.aborted === true) return;
        if (e instanceof PermitCallError) return problem(res, 400, 'Bad Request', e.message, e.field);
        fail(ctx, res, e);
      },
    );
  });
}

/** The JSON answer of a permit call. */
async function permitAnswer(desk: PermitDesk, call: PermitCall, op: PermitOp): Promise<unknown> {
  if (op === 'refresh') return desk.refresh(call);
  if (op === 'release') return desk.release(call);
  const { matched, rule, decision: d, refused, waitedMs } = await desk.acquire(call);
  const waited = waitedMs === undefined ? {} : { waitedMs };
  if (refused !== undefined) {
    return {
      matched,
      rule,
      allowed: false,
      limit: refused.limit,
      policy: refused.policy,
      reason: refused.reason,
      ...waited,
    };
  }
  if (d === undefined) return { matched, rule, allowed: true };
  return {
    matched,
    rule,
    allowed: d.allowed,
    limit: d.limit,
    inFlight: d.inFlight,
    remaining: d.remaining,
    retryAfterMs: Number.isFinite(d.retryAfterMs) ? d.retryAfterMs : null,
    resetAfterMs: d.resetAfterMs,
    policy: d.policy,
    ...(d.reason === undefined ? {} : { reason: d.reason }),
    ...(d.permit === undefined
      ? {}
      : { leaseId: d.permit.leaseId, fence: d.permit.fence, leaseMs: desk.leaseMsOf(call) }),
    ...waited,
  };
}

/** Validates the shape of a permit call; the desk checks the entries, the cost and the lease id. */
export function parsePermitCall(text: string, op: PermitOp): PermitCall {
  let body: unknown;
  try {
    body = parseJsonBody(text);
  } catch (error) {
    if (error instanceof JsonBodyError) throw new BadRequest(400, error.message, error.field);
    throw error;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new BadRequest(400, `the body must be a JSON object { domain, entries, … }, got ${showValue(body)}`);
  }
  const o = body as Record<string, unknown>;
  onlyFields(o, op === 'acquire' ? ['domain', 'entries', 'cost', 'timeoutMs'] : ['domain', 'entries', 'leaseId'], '');
  if (typeof o.domain !== 'string' || o.domain.length === 0) {
    throw new BadRequest(400, `domain is required: a non-empty string, got ${showValue(o.domain)}`, 'domain');
  }
  if (Array.isArray(o.entries)) {
    if (o.entries.length > MAX_ENTRIES) {
      throw new BadRequest(400, `entries has ${o.entries.length} entries; at most ${MAX_ENTRIES}`, 'entries');
    }
    o.entries.forEach((e: unknown, j) => {
      if (typeof e === 'object' && e !== null && !Array.isArray(e)) {
        onlyFields(e as Record<string, unknown>, ['key', 'value'], `entries[${j}]`);
      }
    });
  }
  return {
    domain: o.domain,
    entries: o.entries as PermitCall['entries'],
    cost: o.cost as number | undefined,
    leaseId: o.leaseId as string | undefined,
    timeoutMs: o.timeoutMs as number | undefined,
  };
}

function fail(ctx: ServiceContext, res: ServerResponse, error: unknown): void {
  const failure = classify(error, ctx.storeName);
  if (failure.store) ctx.storeFailed(error);
  else if (failure.kind === 'internal') ctx.logger.error({ err: error }, 'internal error answering an HTTP call');
  const status = HTTP_STATUS[failure.kind];
  const titles: Record<number, string> = {
    400: 'Bad Request',
    404: 'Not Found',
    500: 'Internal Server Error',
    503: 'Service Unavailable',
    504: 'Gateway Timeout',
  };
  problem(res, status, titles[status] ?? 'Error', failure.message, failure.field);
}

/** The JSON answer of a decision call. */
function decisionBody(outcomes: readonly DescriptorOutcome[], mode: Mode, headerMaker: RateLimitHeaders): unknown {
  if (mode === 'reset') {
    return { descriptors: outcomes.map((o) => ({ matched: o.matched, rule: o.rule ?? null })) };
  }
  const over = overLimit(outcomes);
  const descriptors = outcomes.map((o) => {
    const d = o.decision;
    return {
      code: o.code,
      matched: o.matched,
      rule: o.rule ?? null,
      shadow: o.shadow,
      unlimited: o.unlimited,
      ...(d === undefined
        ? { allowed: true }
        : {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retryAfterMs: d.retryAfterMs,
            resetAfterMs: d.resetAfterMs,
            ...(d.delayMs === undefined ? {} : { delayMs: d.delayMs }),
            policy: d.policy,
            ...(d.reason === undefined ? {} : { reason: d.reason }),
            policies: d.policies,
          }),
      ...(o.settlement === undefined ? {} : { settlement: o.settlement }),
      ...(o.charged === true ? { charged: true } : {}),
    };
  });
  const headers: Record<string, string> = {};
  for (const h of headerMaker.of(outcomes)) headers[h.key] = h.value;
  return { code: over ? 'OVER_LIMIT' : 'OK', allowed: !over, descriptors, headers };
}

/**
 * Validates the shape of a JSON decision request; the engine checks the rest (sizes, domain). Every
 * refusal names the field and the value it got.
 */
export function parseDecisionRequest(text: string): DecisionRequest {
  const o = jsonObject(text, '{ domain, descriptors }');
  onlyFields(o, ['domain', 'descriptors', 'cost', 'settle'], '');
  if (o.settle !== undefined && typeof o.settle !== 'boolean') {
    throw new BadRequest(400, `settle must be a boolean, got ${showValue(o.settle)}`, 'settle');
  }
  if (typeof o.domain !== 'string') {
    throw new BadRequest(400, `domain is required: a non-empty string, got ${showValue(o.domain)}`, 'domain');
  }
  if (o.cost !== undefined && typeof o.cost !== 'number') {
    throw new BadRequest(400, `cost must be a number, got ${showValue(o.cost)}`, 'cost');
  }
  const descriptors: DescriptorRequest[] = descriptorObjects(o.descriptors, {
    shape: '{ entries: [{ key, value }] }',
    max: MAX_DESCRIPTORS,
    per: 'request',
    nonEmpty: false,
  }).map((dd, i) => {
    const field = `descriptors[${i}]`;
    onlyFields(dd, ['entries', 'cost', 'limit'], field);
    if (dd.cost !== undefined && typeof dd.cost !== 'number') {
      throw new BadRequest(400, `${field}.cost must be a number, got ${showValue(dd.cost)}`, `${field}.cost`);
    }
    if (Array.isArray(dd.entries)) {
      if (dd.entries.length > MAX_ENTRIES) {
        throw new BadRequest(
          400,
          `${field}.entries has ${dd.entries.length} entries; at most ${MAX_ENTRIES}`,
          `${field}.entries`,
        );
      }
      dd.entries.forEach((e: unknown, j) => {
        if (typeof e === 'object' && e !== null && !Array.isArray(e)) {
          onlyFields(e as Record<string, unknown>, ['key', 'value'], `${field}.entries[${j}]`);
        }
      });
    }
    let limit: LimitOverride | undefined;
    if (dd.limit !== undefined) {
      const l = dd.limit;
      const at = `${field}.limit`;
      if (typeof l !== 'object' || l === null || Array.isArray(l)) {
        throw new BadRequest(400, `${at} must be { requestsPerUnit: number, unit: string }, got ${showValue(l)}`, at);
      }
      const ll = l as Record<string, unknown>;
      onlyFields(ll, ['requestsPerUnit', 'unit'], at);
      if (typeof ll.requestsPerUnit !== 'number') {
        throw new BadRequest(
          400,
          `${at}.requestsPerUnit must be a number, got ${showValue(ll.requestsPerUnit)}`,
          `${at}.requestsPerUnit`,
        );
      }
      if (typeof ll.unit !== 'string') {
        throw new BadRequest(400, `${at}.unit must be a string, got ${showValue(ll.unit)}`, `${at}.unit`);
      }
      limit = { requestsPerUnit: ll.requestsPerUnit, unit: ll.unit };
    }
    return { entries: dd.entries as DescriptorRequest['entries'], cost: dd.cost as number | undefined, limit };
  });
  return {
    domain: o.domain,
    descriptors,
    cost: o.cost as number | undefined,
    ...(o.settle === true ? { settle: true } : {}),
  };
}

function onlyFields(o: Record<string, unknown>, fields: readonly string[], at: string): void {
  for (const key of Object.keys(o)) {
    if (!fields.includes(key)) {
      const name = key.length > 64 ? `${key.slice(0, 64)}…` : key;
      const field = at === '' ? name : `${at}.${name}`;
      throw new BadRequest(400, `unknown field ${field} (expected ${fields.join(', ')})`, field);
    }
  }
}

function readBody(req: IncomingMessage, done: (error: BadRequest | undefined, body?: string) => void): void {
  const declared = Number(req.headers['content-length']);
  if (declared > MAX_BODY_BYTES) {
    done(new BadRequest(413, `the body is larger than ${MAX_BODY_BYTES} bytes`));
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let failed = false;
  req.on('data', (chunk: Buffer) => {
    if (failed) return;
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      failed = true;
      done(new BadRequest(413, `the body is larger than ${MAX_BODY_BYTES} bytes`));
      return;
    }
    chunks.push(chunk);
  });
  req.on('end', () => {
    if (!failed)
      done(
        undefined,
        chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8'),
      );
  });
  req.on('error', () => {
    failed = true;
  });
}

async function ready(ctx: ServiceContext, res: ServerResponse): Promise<void> {
  if (ctx.draining) return json(res, 503, { ready: false, reason: 'shutting down' });
  const up = await ctx.probeStore();
  json(
    res,
    up ? 200 : 503,
    up ? { ready: true, store: ctx.storeName } : { ready: false, reason: `the ${ctx.storeName} store is unreachable` },
  );
}

/** Decision rates by policy, store health, latency and the most denied keys: what the live page polls. */
async function stats(ctx: ServiceContext, res: ServerResponse, seconds: number): Promise<void> {
  const up = ctx.draining ? false : await ctx.probeStore();
  const { deniedKeys, deniedKeysTotal, deniedTenants, ...health } = ctx.stats.live(seconds);
  json(res, 200, {
    store: ctx.storeName,
    ...ctx.stats.rates(seconds),
    health: { up, breaker: ctx.engine.limiter.breakerState, ...health },
    deniedKeys,
    deniedKeysTotal,
    deniedTenants,
  });
}

async function metrics(ctx: ServiceContext, res: ServerResponse): Promise<void> {
  try {
    const text = await ctx.metrics.registry.metrics();
    res.writeHead(200, { 'Content-Type': ctx.metrics.registry.contentType });
    res.end(text);
  } catch (error) {
    ctx.logger.error({ err: error }, 'collecting metrics failed');
    problem(res, 500, 'Internal Server Error', 'collecting metrics failed');
  }
}

function serveStatic(root: string, path: string, req: IncomingMessage, res: ServerResponse): boolean {
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return false;
  }
  if (decoded.includes('\0')) return false;
  let file = resolve(join(root, decoded));
  if (file !== root && !file.startsWith(root + sep)) return false;
  try {
    let stat = statSync(file);
    if (stat.isDirectory()) {
      file = join(file, 'index.html');
      stat = statSync(file);
    }
    if (!stat.isFile()) return false;
    res.writeHead(200, {
      'Content-Type': CONTENT_TYPES.get(extname(file).toLowerCase()) ?? 'application/octet-stream',
      'Content-Length': stat.size,
    });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file).pipe(res);
    return true;
  } catch {
    return false;
  }
}

function index(): unknown {
  return {
    service: 'floodgate',
    endpoints: {
      'POST /v1/decide': 'decide and consume',
      'POST /v1/check': 'decide, change nothing',
      'POST /v1/status': 'state of each descriptor, change nothing',
      'POST /v1/reset': 'forget the descriptors',
      'POST /v1/permits/acquire': 'take a permit of a concurrency limit (with timeoutMs, wait for one)',
      'POST /v1/permits/refresh': "extend a permit's lease",
      'POST /v1/permits/release': 'give a permit back',
      'POST /v1/settle': 'charge calls decided with settle: true their actual cost',
      'GET /v1/config': 'the config in use',
      'GET /v1/stats': 'decisions per second by policy',
      'GET /healthz': 'liveness',
      'GET /readyz': 'readiness (store reachable, not shutting down)',
      'GET /metrics': 'Prometheus metrics',
      'GET /openapi.json': 'this API, as OpenAPI 3.1',
    },
  };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}
