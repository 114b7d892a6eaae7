import type { IncomingMessage, ServerResponse } from 'node:http';
import { PROBLEM_CONTENT_TYPE, type RateLimitOutcome, type RequestAccess } from './core.js';

/** Reads a Node.js `IncomingMessage`: the socket peer and the raw headers. */
export const incomingMessageAccess: RequestAccess<IncomingMessage> = {
  peer: (request) => request.socket?.remoteAddress,
  header: (request, name) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  },
};

/** Copies the outcome's headers onto a Node.js response. */
export function setOutcomeHeaders(response: ServerResponse, outcome: RateLimitOutcome): void {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i += 2) response.setHeader(headers[i] as string, headers[i + 1] as string);
}

/** Ends a Node.js response with the outcome's denial. */
export function sendDenial(response: ServerResponse, outcome: RateLimitOutcome): void {
  response.statusCode = outcome.status;
  setOutcomeHeaders(response, outcome);
  response.end(outcome.body);
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
