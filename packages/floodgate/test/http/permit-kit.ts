import { request as httpRequest } from 'node:http';
import { vi } from 'vitest';
import { memoryPermitStore, type PermitStore } from '../../src/index.js';

/**
 * A permit store (the memory one by default) that also counts the leases live in it (granted minus
 * released), so a test sees the permits in flight without asking for one. Every call goes to the real
 * store.
 */
export class CountedPermits implements PermitStore {
  readonly name: string;
  readonly store: PermitStore;
  inFlight = 0;
  constructor(store: PermitStore = memoryPermitStore()) {
    this.store = store;
    this.name = store.name;
  }
  async acquire(key: string, args: Parameters<PermitStore['acquire']>[1]) {
    const reply = await this.store.acquire(key, args);
    if (reply.granted) this.inFlight += args.cost;
    return reply;
  }
  refresh(key: string, args: Parameters<PermitStore['refresh']>[1]) {
    return this.store.refresh(key, args);
  }
  async release(key: string, args: Parameters<PermitStore['release']>[1]) {
    const reply = await this.store.release(key, args);
    // Every permit of these tests costs 1.
    if (reply.released) this.inFlight -= 1;
    return reply;
  }
}

/** Handlers that wait on a gate the test opens, by id (`?mode=wait&id=…`). */
export class Gates {
  readonly #open = new Map<string, () => void>();
  readonly #waiting = new Map<string, Promise<void>>();
  /** Ids of handlers that started waiting. */
  readonly entered = new Set<string>();

  wait(id: string, signal?: AbortSignal): Promise<void> {
    this.entered.add(id);
    let wait = this.#waiting.get(id);
    if (wait === undefined) {
      wait = new Promise<void>((resolve) => {
        this.#open.set(id, resolve);
        signal?.addEventListener('abort', () => resolve(), { once: true });
      });
      this.#waiting.set(id, wait);
    }
    return wait;
  }

  open(id: string): void {
    this.#open.get(id)?.();
  }

  openAll(): void {
    for (const open of this.#open.values()) open();
  }
}

/** What a handler of these apps does, by `?mode=`: answer at once, wait on its gate, or throw. */
export type Mode = 'ok' | 'wait' | 'throw';

export function modeOf(url: string | undefined): { mode: Mode; id: string } {
  const params = new URL(url ?? '/', 'http://x').searchParams;
  return { mode: (params.get('mode') ?? 'ok') as Mode, id: params.get('id') ?? '' };
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A GET over real HTTP; `abort` destroys the request (the client goes away) when it resolves. */
export function get(base: string, path: string, abort?: Promise<void>): Promise<Answer | 'aborted'> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }),
      );
      res.on('error', () => resolve('aborted'));
    });
    req.on('error', (error) => (abort === undefined ? reject(error) : resolve('aborted')));
    req.end();
    void abort?.then(() => req.destroy());
  });
}

/** Waits until `done()` holds (a server's event has happened), failing after 5 s. */
export async function until(done: () => boolean, what: string): Promise<void> {
  await vi.waitFor(
    () => {
      if (!done()) throw new Error(`never happened: ${what}`);
    },
    { timeout: 5000, interval: 2 },
  );
}
