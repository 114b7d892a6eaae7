// What the waiting workers (redis/permit-wait-worker.ts, redis/cluster-wait-worker.ts,
// sql/permit-wait-worker.ts) share: the order a test sends, the permits of each policy it names, and the
// message loop. Each worker says how it holds a permit and what it reports of it.
import { concurrency, createPermits, type Permit, type Permits } from '../../src/index.js';
import type { PermitStore } from '../../src/permits/store.js';

/** One wait a test orders from a worker. */
export interface WaitOrder {
  prefix: string;
  key: string;
  label: string;
  limit: number;
  cost: number;
  /** ms to hold the permit once granted. */
  holdMs: number;
  pollMs: number;
}

/**
 * Serves the test's orders: each waits (`permits.acquire`) for a permit under the order's policy (the
 * permits of one prefix, limit and poll made once), and `hold` holds it and says what to report; a
 * failure is reported with the order's label. `'exit'` closes the worker's connections (`close`) and ends it.
 */
export function serveWaitOrders<R>(
  store: PermitStore | (() => PermitStore),
  hold: (order: WaitOrder, permit: Permit) => Promise<R>,
  close: () => Promise<unknown>,
): void {
  const sets = new Map<string, Permits>();
  const run = async (m: WaitOrder): Promise<R> => {
    const id = `${m.prefix} ${m.limit} ${m.pollMs}`;
    let permits = sets.get(id);
    if (permits === undefined) {
      permits = createPermits({
        store: typeof store === 'function' ? store() : store,
        policy: concurrency({ limit: m.limit, leaseMs: 30_000 }),
        prefix: m.prefix,
        pollMs: m.pollMs,
      });
      sets.set(id, permits);
    }
    const { permit } = await permits.acquire(m.key, { cost: m.cost });
    return hold(m, permit);
  };
  process.on('message', (message: WaitOrder | 'exit') => {
    if (message === 'exit') {
      void close().then(() => process.exit(0));
      return;
    }
    void run(message).then(
      (reply) => process.send?.(reply),
      (error: unknown) => process.send?.({ label: message.label, error: String(error) }),
    );
  });
  process.send?.('ready');
}

/** Sleeps `ms` (a worker holding its permit). */
export const holdFor = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
