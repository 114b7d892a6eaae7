// An OpenAI-style proxy with a tokens-per-minute budget per user, the way an LLM gateway charges: a
// request is admitted on an estimate (its prompt, guessed from its length, plus its `max_tokens`), and
// settled at what the response's `usage.total_tokens` says it cost. Unused tokens come back at once; a
// response that cost more than its estimate is charged past the budget, a debt the user's next requests
// wait for. A request whose response never reports usage stays charged at its estimate, never at zero.
// A fake upstream model runs in the same file, so it all runs offline; a manual clock stands in for time.
//
//   npm run build && npx tsx packages/floodgate/examples/openai-proxy.ts
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLimiter, type Decision, gcra } from 'floodgate';
import { manualClock } from 'floodgate/testing';

const TOKENS_PER_MINUTE = 10_000;
const clock = manualClock({ startMs: Date.UTC(2030, 0, 1, 12) });
const budget = createLimiter({
  prefix: 'llm',
  clock,
  // A meter: the budget refills continuously (10,000 a minute), and a debt is owed time it drains.
  policies: gcra({ name: 'tokens-per-minute', limit: TOKENS_PER_MINUTE, periodMs: 60_000 }),
});

interface ChatRequest {
  model: string;
  messages: { role: string; content: string }[];
  max_tokens?: number;
}

/** The proxy's guess of a prompt's tokens: about four characters a token (the model counts its own). */
function estimatePrompt(body: ChatRequest): number {
  return Math.ceil(body.messages.reduce((n, m) => n + m.content.length, 0) / 4);
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > 1_000_000) throw new Error('body too large');
    chunks.push(chunk as Buffer);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(text);
}

/** The fake model: counts three characters a token, writes 30% of max_tokens, or all of it for an essay. */
function fakeUpstream(): Server {
  return createServer((req, res) => void answerAsModel(req, res));
}

async function answerAsModel(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = (await readJson(req)) as ChatRequest;
  const text = body.messages.map((m) => m.content).join(' ');
  if (text.includes('crash')) return send(res, 500, { error: { message: 'upstream failed' } });
  const prompt = Math.ceil(text.length / 3);
  const max = body.max_tokens ?? 1024;
  const completion = text.includes('essay') ? max : Math.floor(max * 0.3);
  send(res, 200, {
    id: 'chatcmpl-fake',
    object: 'chat.completion',
    model: body.model,
    choices: [{ index: 0, message: { role: 'assistant', content: '…' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
  });
}

/** POSTs JSON to the upstream; resolves to its status and parsed body. */
function forward(port: number, body: ChatRequest): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const out = request(
      { port, method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' } },
      (res) => {
        readJson(res).then(
          (parsed) => resolve({ status: res.statusCode ?? 502, body: parsed as Record<string, unknown> }),
          reject,
        );
      },
    );
    out.on('error', reject);
    out.end(JSON.stringify(body));
  });
}

/** OpenAI's own rate-limit headers, for the tokens budget. */
function limitHeaders(decision: Decision): Record<string, string> {
  return {
    'x-ratelimit-limit-tokens': String(TOKENS_PER_MINUTE),
    'x-ratelimit-remaining-tokens': String(decision.remaining),
  };
}

/** The proxy: per user (the bearer key), admit on the estimate, forward, settle at the usage reported. */
function proxy(upstreamPort: number): Server {
  return createServer((req, res) => void handle(upstreamPort, req, res));
}

async function handle(upstreamPort: number, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const user = req.headers.authorization?.replace(/^Bearer /, '') ?? 'anonymous';
  let body: ChatRequest;
  try {
    body = (await readJson(req)) as ChatRequest;
  } catch {
    return send(res, 400, { error: { message: 'the body must be JSON', type: 'invalid_request_error' } });
  }
  const maxTokens = body.max_tokens;
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
    return send(res, 400, {
      error: {
        message: 'max_tokens is required: it is the budget held for the reply',
        type: 'invalid_request_error',
      },
    });
  }
  const estimate = estimatePrompt(body) + maxTokens;
  const decision = await budget.limit(user, { cost: estimate, settle: true });
  if (!decision.allowed) {
    const retry = Number.isFinite(decision.retryAfterMs)
      ? { 'retry-after': String(Math.ceil(decision.retryAfterMs / 1000)) }
      : {};
    return send(
      res,
      429,
      {
        error: {
          message: `Rate limit reached for tokens per minute: requested ${estimate}`,
          type: 'tokens',
          code: 'rate_limit_exceeded',
        },
      },
      { ...limitHeaders(decision), ...retry },
    );
  }
  let upstream: { status: number; body: Record<string, unknown> };
  try {
    upstream = await forward(upstreamPort, body);
  } catch {
    // No response: the call stays charged at its estimate.
    return send(res, 502, { error: { message: 'upstream unreachable' } });
  }
  const used = (upstream.body.usage as { total_tokens?: unknown } | undefined)?.total_tokens;
  let after = decision;
  if (typeof used === 'number' && Number.isFinite(used) && used >= 0) {
    await budget.settle(user, decision, { cost: used });
    after = await budget.status(user);
  }
  send(res, upstream.status, upstream.body, limitHeaders(after));
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

const upstream = fakeUpstream();
const gateway = proxy(await listen(upstream));
const port = await listen(gateway);

/** A client call through the proxy; prints one line. */
async function chat(user: string, content: string, maxTokens: number): Promise<void> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${user}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake-1', messages: [{ role: 'user', content }], max_tokens: maxTokens }),
  });
  const body = (await response.json()) as { usage?: { total_tokens: number }; error?: { message: string } };
  const left = response.headers.get('x-ratelimit-remaining-tokens');
  const retry = response.headers.get('retry-after');
  const seconds = `${((clock.nowMs() - Date.UTC(2030, 0, 1, 12)) / 1000).toFixed(0).padStart(3)}s`;
  const what =
    response.status === 200
      ? `200, used ${body.usage?.total_tokens} tokens`
      : `${response.status} ${body.error?.message}${retry === null ? '' : `, retry after ${retry} s`}`;
  console.log(
    `t=${seconds} ${user.padEnd(5)} max_tokens ${String(maxTokens).padStart(5)}: ${what}; ${left ?? '-'} tokens left`,
  );
}

const question = 'What is a rate limiter? '.repeat(10);
// Three at once: each holds its estimate (60 + 3000) while it runs, and gives back what it did not use.
await Promise.all([chat('alice', question, 3000), chat('alice', question, 3000), chat('alice', question, 3000)]);
// Held, not charged: 9,000 tokens asked for, so 9,000 must fit now.
await chat('alice', question, 9000);
// A long prompt: the proxy guessed 4 characters a token (about 7,000 in all), the model counted
// 3 (about 9,000). The
// difference is charged past the budget: a debt alice's next requests wait for.
await chat('alice', `an essay on ${'x'.repeat(24_000)}`, 1000);
await chat('alice', question, 10);
await chat('bob', question, 2000);
// The upstream fails and reports no usage: the call stays charged at its estimate (2060), not at zero.
await chat('bob', `crash ${question}`, 2000);
console.log(`bob's budget after the failed call: ${(await budget.status('bob')).remaining} tokens`);
// Time passes: the debt drains at 10,000 tokens a minute.
clock.advance(30_000);
await chat('alice', question, 10);
clock.advance(60_000);
await chat('alice', question, 9000);
gateway.close();
upstream.close();
