import type { IncomingMessage, ServerResponse } from 'node:http';
import { isFloodgateError } from 'floodgate';
import { OVERRIDE_SCOPES, type OverrideScope, type Overrides } from 'floodgate/overrides';
import type { ServiceContext } from '../context.js';
import type { DecisionRequest, DescriptorOutcome, Mode } from '../engine.js';
import { methodNotAllowed, problem } from '../problem.js';

/** Largest admin request body, bytes: an override carries at most 16 policies and a short note. */
export const MAX_ADMIN_BODY_BYTES = 64 * 1024;

/** What the admin API uses of the HTTP API (passed in, so neither module imports the other). */
export interface AdminHelpers {
  parseDecisionRequest(text: string): DecisionRequest;
  decisionBody(outcomes: readonly DescriptorOutcome[], mode: Mode): unknown;
  /** Answers an error the way the HTTP API does (store failures, bad requests). */
  fail(error: unknown): void;
}

/**
 * The admin API under `/v1/admin/`: overrides (`GET /v1/admin/overrides`, and `GET`, `PUT`, `DELETE`
 * `/v1/admin/overrides/<scope>/<id>`), a key's state (`POST /v1/admin/state`, `POST /v1/admin/reset`)
 * and who is limited (`GET /v1/admin/top-denied`). Every call is authenticated; every change is
 * written as one audit log line (who, what, when). Answers 404 when the service has no admin API.
 */
export function handleAdmin(
  ctx: ServiceContext,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  query: string,
  helpers: AdminHelpers,
): void {
  const auth = ctx.admin;
  const overrides = ctx.overrides;
  if (auth === undefined || overrides === undefined) {
    problem(res, 404, 'Not Found', 'this service has no admin API (see docs/service.md, "Admin API")');
    return;
  }
  const who = auth.authenticate(req);
  if (!who.ok) {
    if (who.status === 401) res.setHeader('WWW-Authenticate', 'Bearer realm="floodgate-admin"');
    problem(res, who.status, who.status === 401 ? 'Unauthorized' : 'Forbidden', who.detail);
    return;
  }
  const audit = (action: string, detail: Record<string, unknown>) => {
    ctx.logger.info({ audit: { who: who.who, action, at: new Date().toISOString(), ...detail } }, `admin ${action}`);
  };
  const route = path.slice('/v1/admin/'.length);
  const run = (work: () => Promise<void>) => {
    work().catch((error: unknown) => {
      if (isFloodgateError(error) && error.code.startsWith('ERR_INVALID')) {
        problem(res, 400, 'Bad Request', error.message, error.option);
      } else helpers.fail(error);
    });
  };
  if (route === 'overrides') {
    if (req.method !== 'GET') {
      methodNotAllowed(res, 'GET');
      return;
    }
    run(async () => json(res, 200, await overrides.list(listOptions(query))));
    return;
  }
  if (route.startsWith('overrides/')) {
    const target = parseTarget(route.slice('overrides/'.length));
    if (target === undefined) {
      problem(res, 404, 'Not Found', `expected /v1/admin/overrides/<${OVERRIDE_SCOPES.join('|')}>/<id, URL-encoded>`);
      return;
    }
    overrideRoute(req, res, overrides, target, audit, run);
    return;
  }
  if (route === 'state' || route === 'reset') {
    if (req.method !== 'POST') {
      methodNotAllowed(res, 'POST');
      return;
    }
    const mode: Mode = route === 'state' ? 'status' : 'reset';
    readBody(req, res, (text) =>
      run(async () => {
        const request = helpers.parseDecisionRequest(text);
        const outcomes = await ctx.engine.decide(request, mode);
        if (mode === 'reset') audit('reset', { domain: request.domain, descriptors: request.descriptors.length });
        json(res, 200, helpers.decisionBody(outcomes, mode));
      }),
    );
    return;
  }
  if (route === 'top-denied' && ctx.topDenied !== undefined) {
    if (req.method !== 'GET') {
      methodNotAllowed(res, 'GET');
      return;
    }
    const n = topDeniedCount(query);
    if (n === undefined) {
      problem(res, 400, 'Bad Request', `n must be an integer from 1 to ${MAX_TOP_DENIED}`, 'n');
      return;
    }
    json(res, 200, ctx.topDenied(n));
    return;
  }
  problem(res, 404, 'Not Found', `no admin route ${req.method} ${path}`);
}

/** Most keys (and tenants) one top-denied report lists: the sketch's capacity. */
export const MAX_TOP_DENIED = 128;

/** The `n` of a top-denied query (20 when absent); undefined when it is not an integer in range. */
function topDeniedCount(query: string): number | undefined {
  const raw = new URLSearchParams(query).get('n');
  if (raw === null) return 20;
  if (!/^[0-9]{1,4}$/.test(raw)) return undefined;
  const n = Number(raw);
  return n >= 1 && n <= MAX_TOP_DENIED ? n : undefined;
}

function overrideRoute(
  req: IncomingMessage,
  res: ServerResponse,
  overrides: Overrides,
  target: { scope: OverrideScope; id: string },
  audit: (action: string, detail: Record<string, unknown>) => void,
  run: (work: () => Promise<void>) => void,
): void {
  switch (req.method) {
    case 'GET':
      run(async () => {
        const found = await overrides.get(target);
        if (found === undefined) problem(res, 404, 'Not Found', 'no override for this target');
        else json(res, 200, found);
      });
      return;
    case 'PUT':
      readBody(req, res, (text) =>
        run(async () => {
          let input: unknown;
          try {
            input = JSON.parse(text);
          } catch {
            problem(res, 400, 'Bad Request', 'the body must be JSON: { policies, expiresAt?, note? }');
            return;
          }
          const stored = await overrides.set(target, input as never);
          audit('set-override', { target, policies: stored.policies, expiresAt: stored.expiresAt });
          json(res, 200, stored);
        }),
      );
      return;
    case 'DELETE':
      run(async () => {
        const removed = await overrides.delete(target);
        audit('delete-override', { target, removed });
        json(res, 200, { removed });
      });
      return;
    default:
      methodNotAllowed(res, 'GET, PUT, DELETE');
  }
}

/** `<scope>/<URL-encoded id>` → the target; undefined when malformed. */
function parseTarget(rest: string): { scope: OverrideScope; id: string } | undefined {
  const slash = rest.indexOf('/');
  if (slash === -1) return undefined;
  const scope = rest.slice(0, slash);
  if (!(OVERRIDE_SCOPES as readonly string[]).includes(scope)) return undefined;
  let id: string;
  try {
    id = decodeURIComponent(rest.slice(slash + 1));
  } catch {
    return undefined;
  }
  return { scope: scope as OverrideScope, id };
}

function listOptions(query: string): { scope?: OverrideScope; cursor?: string; limit?: number } {
  const params = new URLSearchParams(query);
  const out: { scope?: OverrideScope; cursor?: string; limit?: number } = {};
  const scope = params.get('scope');
  if (scope !== null) out.scope = scope as OverrideScope;
  const cursor = params.get('cursor');
  if (cursor !== null) out.cursor = cursor;
  const limit = params.get('limit');
  if (limit !== null) out.limit = /^\d{1,7}$/.test(limit) ? Number(limit) : Number.NaN;
  return out;
}

function readBody(req: IncomingMessage, res: ServerResponse, done: (text: string) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let failed = false;
  req.on('data', (chunk: Buffer) => {
    if (failed) return;
    size += chunk.length;
    if (size > MAX_ADMIN_BODY_BYTES) {
      failed = true;
      res.setHeader('Connection', 'close');
      problem(res, 413, 'Payload Too Large', `an admin body is at most ${MAX_ADMIN_BODY_BYTES} bytes`);
      return;
    }
    chunks.push(chunk);
  });
  req.on('end', () => {
    if (!failed) done(Buffer.concat(chunks).toString('utf8'));
  });
  req.on('error', () => {
    failed = true;
  });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    'Cache-Control': 'no-store',
  });
  res.end(text);
}
