import type { ServerResponse } from 'node:http';

/**
 * Answers an RFC 9457 problem (`application/problem+json`), never cached; `field` names the request field
 * at fault. A response already under way is cut instead: its status can no longer change.
 */
export function problem(res: ServerResponse, status: number, title: string, detail: string, field?: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const text = JSON.stringify({
    type: 'about:blank',
    title,
    status,
    detail,
    ...(field === undefined ? {} : { field }),
  });
  res.writeHead(status, {
    'Content-Type': 'application/problem+json',
    'Content-Length': Buffer.byteLength(text),
    'Cache-Control': 'no-store',
  });
  res.end(text);
}

/** 405 with the `Allow` header. */
export function methodNotAllowed(res: ServerResponse, allow: string): void {
  res.setHeader('Allow', allow);
  problem(res, 405, 'Method Not Allowed', `use ${allow}`);
}
