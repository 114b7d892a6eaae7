import type { IncomingMessage, ServerResponse } from 'node:http';
import { PROBLEM_CONTENT_TYPE, type RateLimitOutcome, type RequestAccess } from './core.js';

/** Reads a Node.js `IncomingMessage`: the socket peer and the raw headers (node:http has no proxy setting). */
export const incomingMessageAccess: RequestAccess<IncomingMessage> = {
  peer: (request) => request.socket?.remoteAddress,
  header: (request, name) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  },
};

/** What Express adds to a request: `req.ip` (under `trust proxy`) and `req.app`. */
interface ExpressRequestLike {
  readonly ip?: string;
  readonly app?: { get?(setting: string): unknown };
}

/** True when an Express app's `trust proxy` setting trusts any proxy (`false` and `0` trust none). */
export function expressTrustsProxy(request: object): boolean {
  const app = (request as ExpressRequestLike).app;
  return typeof app?.get === 'function' && Boolean(app.get('trust proxy'));
}

/** Reads an Express request: `req.ip`, which follows the app's `trust proxy` setting. */
export const expressAccess: RequestAccess<IncomingMessage> = {
  ...incomingMessageAccess,
  address: (request) => (request as ExpressRequestLike).ip,
  trustsProxy: expressTrustsProxy,
};

/** Copies the outcome's headers onto a Node.js response. */
export function setOutcomeHeaders(response: ServerResponse, outcome: RateLimitOutcome): void {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i += 2) response.setHeader(headers[i] as string, headers[i + 1] as string);
}

/** Prepares a denial for a `handler`: its status and headers, but not the content type of a body it writes. */
export function setDenialHeaders(response: ServerResponse, outcome: RateLimitOutcome): void {
  response.statusCode = outcome.status;
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i += 2) {
    if (headers[i] !== 'Content-Type') response.setHeader(headers[i] as string, headers[i + 1] as string);
  }
}

/** Ends a Node.js response with the outcome's denial. */
export function sendDenial(response: ServerResponse, outcome: RateLimitOutcome): void {
  response.statusCode = outcome.status;
  setOutcomeHeaders(response, outcome);
  response.end(outcome.body);
}

/** Settles an admitted request's cost once its response is over: finished, or cut off (then it stays counted). */
export function settleOnClose(response: ServerResponse, settle: NonNullable<RateLimitOutcome['settle']>): void {
  // The client may have gone away while the decision was pending: 'close' was emitted already.
  if (response.closed || response.destroyed) {
    void settle(response.writableFinished ? response.statusCode : undefined);
    return;
  }
  response.once('close', () => {
    void settle(response.writableFinished ? response.statusCode : undefined);
  });
}

/** A 500 answer for an error that escaped the middleware, when nothing was sent yet. */
export function sendInternalError(response: ServerResponse): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  response.statusCode = 500;
  response.setHeader('Content-Type', PROBLEM_CONTENT_TYPE);
  response.setHeader('Cache-Control', 'no-store');
  response.end(JSON.stringify({ type: 'about:blank', title: 'Internal Server Error', status: 500 }));
}
