import type { Clock } from '../clock.js';
import { FloodgateError } from '../errors.js';
import { toStoreError } from '../stores/store-errors.js';
import type { PermitStore } from './store.js';

/** What a permit needs of the {@link Permits} that granted it. */
export interface PermitHost {
  readonly store: PermitStore;
  readonly leaseUs: number;
  /** The policy's limit. */
  readonly limit: number;
  /** The caller's clock, or undefined: the store's. */
  readonly clock: Clock | undefined;
}

/** Local time, ms, to measure how long a store call took. */
export function localMs(clock: Clock | undefined): number {
  return clock === undefined ? performance.now() : clock.nowUs() / 1000;
}

/**
 * A granted concurrency permit: give it back with `release()` (or `await using`), extend its lease with
 * `refresh()`. `signal` aborts, with `ERR_LEASE_LOST`, once the lease may have run out: it fires at the
 * expiry the store gave minus the time the grant took to arrive, so never after the store frees the
 * permit. `fence` strictly increases per key: pass it to a resource that must refuse stale holders.
 */
export class Permit {
  /** The user key. */
  readonly key: string;
  /** The lease's id in the store: enough to release or refresh it from another process. */
  readonly leaseId: string;
  /** The cost held. */
  readonly cost: number;
  /** The grant's fencing token: larger than every earlier grant's on this key. */
  readonly fence: number;
  /** Aborts (reason: a `FloodgateError` with code `ERR_LEASE_LOST`) once the lease may be lost. */
  readonly signal: AbortSignal;
  readonly #host: PermitHost;
  readonly #storageKey: string;
  readonly #controller = new AbortController();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #sleep: AbortController | undefined;
  #released: Promise<boolean> | undefined;
  #onEnd: ((end: 'released' | 'lost') => void) | undefined;

  /** @internal Built by {@link Permits}. */
  constructor(
    host: PermitHost,
    grant: { key: string; storageKey: string; leaseId: string; cost: number; fence: number },
    /** How long the lease lasts from the moment the call was sent, ms of local time. */
    leftMs: number,
    /** Told once when the permit ends: released, or its lease given up as lost (telemetry). */
    onEnd?: (end: 'released' | 'lost') => void,
  ) {
    this.#onEnd = onEnd;
    this.key = grant.key;
    this.leaseId = grant.leaseId;
    this.cost = grant.cost;
    this.fence = grant.fence;
    this.signal = this.#controller.signal;
    this.#host = host;
    this.#storageKey = grant.storageKey;
    this.#arm(leftMs);
  }

  /** True once the permit was released or its lease given up as lost. */
  get done(): boolean {
    return this.#released !== undefined || this.signal.aborted;
  }

  /**
   * Gives the permit back. Idempotent: every call resolves to whether the first one ended a live lease
   * (false when the lease had already run out).
   */
  release(): Promise<boolean> {
    if (this.#released === undefined) {
      this.#disarm();
      const host = this.#host;
      const send = async () =>
        (
          await host.store.release(this.#storageKey, {
            limit: host.limit,
            leaseId: this.leaseId,
            nowUs: host.clock?.nowUs(),
          })
        ).released;
      const released: Promise<boolean> = send().catch((error: unknown) => {
        // A release that failed may be tried again; until then the lease runs on in the store.
        if (this.#released === released) this.#released = undefined;
        throw toStoreError(host.store.name, error);
      });
      this.#released = released;
      this.#ended('released');
    }
    return this.#released;
  }

  /**
   * Extends the lease to `leaseMs` from now on the store's clock. Resolves to false, aborting `signal`,
   * when the lease already ran out: a refresh never takes back a permit that was lost. A store failure
   * rejects and leaves the lease (and its timer) as it was.
   */
  async refresh(): Promise<boolean> {
    if (this.done) return false;
    const host = this.#host;
    const sentMs = localMs(host.clock);
    let reply: Awaited<ReturnType<PermitStore['refresh']>>;
    try {
      reply = await host.store.refresh(this.#storageKey, {
        limit: host.limit,
        leaseUs: host.leaseUs,
        leaseId: this.leaseId,
        nowUs: host.clock?.nowUs(),
      });
    } catch (error) {
      throw toStoreError(host.store.name, error);
    }
    if (this.#released !== undefined) return false;
    if (!reply.refreshed) {
      this.#lose('the lease had run out when it was refreshed');
      return false;
    }
    this.#disarm();
    this.#arm((reply.expiresAtUs - reply.nowUs) / 1000 - (localMs(host.clock) - sentMs));
    return true;
  }

  /** `await using permit = …`: releases the permit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** The permit's data (for logs): key, leaseId, cost, fence. */
  toJSON(): { key: string; leaseId: string; cost: number; fence: number } {
    return { key: this.key, leaseId: this.leaseId, cost: this.cost, fence: this.fence };
  }

  #arm(leftMs: number): void {
    const clock = this.#host.clock;
    if (leftMs <= 0) {
      this.#lose('the lease ran out');
      return;
    }
    if (clock === undefined) {
      this.#timer = setTimeout(() => this.#lose('the lease ran out'), Math.min(Math.ceil(leftMs), 2 ** 31 - 1));
      // A permit never keeps the process alive on its own.
      this.#timer.unref?.();
      return;
    }
    const sleep = new AbortController();
    this.#sleep = sleep;
    clock.sleep(leftMs, sleep.signal).then(
      () => {
        if (this.#sleep === sleep) this.#lose('the lease ran out');
      },
      () => {},
    );
  }

  /** Tells `onEnd` the first time the permit ends (a release tried again is not a second end). */
  #ended(end: 'released' | 'lost'): void {
    const onEnd = this.#onEnd;
    if (onEnd === undefined) return;
    this.#onEnd = undefined;
    onEnd(end);
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#sleep?.abort();
    this.#sleep = undefined;
  }

  #lose(why: string): void {
    this.#disarm();
    if (this.#released !== undefined || this.signal.aborted) return;
    this.#ended('lost');
    this.#controller.abort(
      new FloodgateError('ERR_LEASE_LOST', `the permit on ${JSON.stringify(this.key.slice(0, 60))} was lost: ${why}`),
    );
  }
}
