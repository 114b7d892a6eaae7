import type { Store } from '../../src/index.js';

/**
 * A store that is the given one, and counts the refunds (and settles) it has finished: a request's cost is given back
 * after its response went out, so a test waits for the refund before its next request.
 */
export class Watched implements Store {
  readonly name: string;
  readonly hasOwnClock: boolean;
  private done = 0;
  private waiters: { count: number; resolve: () => void }[] = [];
  constructor(private readonly inner: Store) {
    this.name = inner.name;
    this.hasOwnClock = inner.hasOwnClock;
  }
  decide: Store['decide'] = (request) => this.inner.decide(request);
  reset: Store['reset'] = (prefix, key, policies) => this.inner.reset(prefix, key, policies);
  refund: NonNullable<Store['refund']> = async (request) => {
    await (this.inner.refund as NonNullable<Store['refund']>).call(this.inner, request);
    this.done++;
    for (const waiter of this.waiters.filter((w) => this.done >= w.count)) waiter.resolve();
    this.waiters = this.waiters.filter((w) => this.done < w.count);
  };
  settle: NonNullable<Store['settle']> = async (request) => {
    await (this.inner.settle as NonNullable<Store['settle']>).call(this.inner, request);
    this.done++;
    for (const waiter of this.waiters.filter((w) => this.done >= w.count)) waiter.resolve();
    this.waiters = this.waiters.filter((w) => this.done < w.count);
  };
  /** Resolves once `count` refunds and settles have finished since the store was made. */
  refunded(count: number): Promise<void> {
    if (this.done >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }
  get refunds(): number {
    return this.done;
  }
}
