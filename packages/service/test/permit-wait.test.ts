// Waiting permit acquires over the HTTP API (`timeoutMs`), on the memory store and on Redis: the grant
// on a release, the timeout, the bounds (the server's longest wait, the rule's maxQueue), the client
// that goes away, and the queued gauge and wait histogram of /metrics.
import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Service, startService } from '../src/service.js';

// Long enough that the waiters of the flood below are all sent before the first could time out.
const MAX_WAIT_MS = 60_000;
const MAX_QUEUE = 50;

function configFor(prefix: string): string {
  return `prefix: ${prefix}
domains:
  - domain: wait
    descriptors:
      - key: job
        concurrency: { limit: 1, leaseMs: 60000, maxQueue: ${MAX_QUEUE} }
`;
}

describe.each([
  ['memory', 'memory'],
  ['redis', 'redis://127.0.0.1:6379'],
])('HTTP API: waiting permit acquires on %s', (_name, store) => {
  let service: Service;
  let url: string;
  beforeAll(async () => {
    service = await startService({
      config: configFor(`wait-${randomBytes(6).toString('hex')}`),
      store,
      httpPort: 0,
      grpcPort: false,
      logger: 'silent',
      drainTimeoutMs: 2000,
      maxPermitWaitMs: MAX_WAIT_MS,
    });
    url = `http://127.0.0.1:${service.httpPort}`;
  });
  afterAll(async () => {
    await service?.close();
  });

  const call = async (path: string, body: unknown, signal?: AbortSignal) => {
    const response = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      ...(signal === undefined ? {} : { signal }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const job = (value: string) => [{ key: 'job', value }];
  const acquire = (value: string, extra: Record<string, unknown> = {}, signal?: AbortSignal) =>
    call('/v1/permits/acquire', { domain: 'wait', entries: job(value), ...extra }, signal);
  const release = (value: string, leaseId: unknown) =>
    call('/v1/permits/release', { domain: 'wait', entries: job(value), leaseId });
  /** A sample of /metrics with these labels (0 when absent). */
  const metric = async (name: string, labels: string) => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  const rule = 'domain="wait",rule="job"';
  /** Polls /metrics until the queued gauge reads `count` (the waiters' asks are on their way). */
  const queuedReaches = async (count: number) => {
    for (let i = 0; i < 500; i++) {
      if ((await metric('floodgate_permits_queued', rule)) === count) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await metric('floodgate_permits_queued', rule)).toBe(count);
  };

  it('grants a waiting acquire on the release that frees its permit, counted in the wait histogram', async () => {
    const held = await acquire('a');
    expect(held.body.allowed).toBe(true);
    const grantedBefore = await metric('floodgate_permit_wait_seconds_count', `${rule},result="granted"`);
    const waiting = acquire('a', { timeoutMs: MAX_WAIT_MS });
    await queuedReaches(1);
    expect((await release('a', held.body.leaseId)).body.released).toBe(true);
    const got = await waiting;
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ matched: true, rule: 'job', allowed: true, inFlight: 1, limit: 1 });
    expect(got.body.leaseId).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(got.body.fence as number).toBeGreaterThan(held.body.fence as number);
    expect(typeof got.body.waitedMs).toBe('number');
    expect(got.body.waitedMs as number).toBeLessThan(MAX_WAIT_MS);
    expect(await metric('floodgate_permits_queued', rule)).toBe(0);
    expect(await metric('floodgate_permit_wait_seconds_count', `${rule},result="granted"`)).toBe(grantedBefore + 1);
    // A free permit is granted to a waiting acquire at once.
    expect((await release('a', got.body.leaseId)).body.released).toBe(true);
    const free = await acquire('a', { timeoutMs: MAX_WAIT_MS });
    expect(free.body).toMatchObject({ allowed: true, inFlight: 1 });
    await release('a', free.body.leaseId);
  });

  it('answers a wait that ran out as refused for timeout, leaving the queue empty', async () => {
    const held = await acquire('b');
    const timedOut = await acquire('b', { timeoutMs: 50 });
    expect(timedOut.status).toBe(200);
    expect(timedOut.body).toMatchObject({ matched: true, rule: 'job', allowed: false, reason: 'timeout', limit: 1 });
    expect(timedOut.body.waitedMs as number).toBeGreaterThanOrEqual(50);
    expect(timedOut.body.leaseId).toBeUndefined();
    expect(await metric('floodgate_permits_refused_total', `${rule},reason="timeout"`)).toBeGreaterThanOrEqual(1);
    expect(await metric('floodgate_permit_wait_seconds_count', `${rule},result="timeout"`)).toBeGreaterThanOrEqual(1);
    expect(await metric('floodgate_permits_queued', rule)).toBe(0);
    await release('b', held.body.leaseId);
    // A call that does not wait goes behind every waiter: granted, so nobody is left in the queue.
    const next = await acquire('b');
    expect(next.body.allowed).toBe(true);
    await release('b', next.body.leaseId);
  });

  it('refuses a timeoutMs that is not a whole number of ms up to the server maximum, naming the field', async () => {
    for (const timeoutMs of [MAX_WAIT_MS + 1, -1, 1.5, '100', null, 1e300]) {
      const r = await acquire('c', { timeoutMs });
      expect(r.status).toBe(400);
      expect(r.body.field).toBe('timeoutMs');
      expect(String(r.body.detail)).toContain(`0 to ${MAX_WAIT_MS}`);
    }
    // timeoutMs on a refresh or a release is an unknown field.
    const r = await call('/v1/permits/release', {
      domain: 'wait',
      entries: job('c'),
      leaseId: 'A'.repeat(22),
      timeoutMs: 10,
    });
    expect(r.status).toBe(400);
    // Nothing was taken by the refused calls: the permit is free.
    const free = await acquire('c');
    expect(free.body.allowed).toBe(true);
    await release('c', free.body.leaseId);
  });

  it('bounds thousands of waiting acquires from one client by maxQueue, and the waiters that go away leave the queue', async () => {
    const held = await acquire('d');
    expect(held.body.allowed).toBe(true);
    const fullBefore = await metric('floodgate_permits_refused_total', `${rule},reason="queue-full"`);
    const abandonedBefore = await metric('floodgate_permit_wait_seconds_count', `${rule},result="abandoned"`);
    const n = 2000;
    const controllers = Array.from({ length: n }, () => new AbortController());
    const answered: { status: number; body: Record<string, unknown> }[] = [];
    const pending = new Set<number>();
    const failed: unknown[] = [];
    // One client's connections, a few hundred at a time (as a client's pool holds them): the refused
    // calls free theirs at once, the waiting ones keep theirs.
    const agent = new Agent({ keepAlive: true, maxSockets: 256 });
    const body = JSON.stringify({ domain: 'wait', entries: job('d'), timeoutMs: MAX_WAIT_MS });
    const post = (signal: AbortSignal) =>
      new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
        const req = request(
          `${url}/v1/permits/acquire`,
          { method: 'POST', agent, signal, headers: { 'content-type': 'application/json' } },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => {
              text += chunk;
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    const calls = controllers.map((c, i) => {
      pending.add(i);
      return post(c.signal).then(
        (r) => {
          pending.delete(i);
          answered.push(r);
          return r;
        },
        (error: unknown) => {
          pending.delete(i);
          if (!c.signal.aborted) failed.push(error);
          return error;
        },
      );
    });
    // Everyone past maxQueue is refused at once; the queue holds maxQueue of them.
    const deadline = performance.now() + 50_000;
    while (answered.length < n - MAX_QUEUE && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(failed).toEqual([]);
    expect(answered.length).toBe(n - MAX_QUEUE);
    expect(answered.every((r) => r.status === 200 && r.body.allowed === false && r.body.reason === 'queue-full')).toBe(
      true,
    );
    await queuedReaches(MAX_QUEUE);
    expect(await metric('floodgate_permits_refused_total', `${rule},reason="queue-full"`)).toBe(
      fullBefore + n - MAX_QUEUE,
    );
    // The waiters go away: their places leave the store's queue.
    const waiting = [...pending];
    expect(waiting.length).toBe(MAX_QUEUE);
    for (const i of waiting.slice(0, MAX_QUEUE / 2)) controllers[i]?.abort();
    await queuedReaches(MAX_QUEUE / 2);
    for (const i of waiting.slice(MAX_QUEUE / 2)) controllers[i]?.abort();
    await queuedReaches(0);
    await Promise.all(calls);
    agent.destroy();
    expect(failed).toEqual([]);
    expect(answered.length).toBe(n - MAX_QUEUE);
    expect(await metric('floodgate_permit_wait_seconds_count', `${rule},result="abandoned"`)).toBe(
      abandonedBefore + MAX_QUEUE,
    );
    // The store's queue is empty: released, the permit goes to a call that does not wait (which a single
    // waiter left in the queue would hold back), and a new waiter is granted at once.
    await release('d', held.body.leaseId);
    const next = await acquire('d');
    expect(next.body.allowed).toBe(true);
    await release('d', next.body.leaseId);
    const again = await acquire('d', { timeoutMs: MAX_WAIT_MS });
    expect(again.body).toMatchObject({ allowed: true });
    expect(again.body.waitedMs as number).toBeLessThan(MAX_WAIT_MS);
    await release('d', again.body.leaseId);
  }, 120_000);
});
