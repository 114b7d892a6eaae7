import { describeValue, FloodgateError, invalid } from '../../errors.js';
import { booleanOption, checkOptionsObject, wholeOption } from './options.js';

/** The outcome of a call that failed alone in a batch that went through: see {@link callFailed}. */
export class CallFailure {
  constructor(readonly error: unknown) {}
}

/** Marks one call of a batch as failed with `error` (the batch's other calls keep their outcomes). */
export function callFailed(error: unknown): CallFailure {
  return new CallFailure(error);
}

/** What a batch's sender is told besides its calls. */
export interface Batch {
  /** The lane the batch was sent on. */
  readonly lane: number | string;
  /**
   * Runs `retry` once every other batch in flight on this lane has come back or asked for its own retry,
   * the retries one after another in the order their batches were first sent, and sends nothing new on the
   * lane meanwhile. For a sender whose batches go down one ordered connection (`ordered: true`) and that
   * must send a batch again (Redis `NOSCRIPT`: `EVALSHA` failed, `EVAL` loads the script), so calls on one
   * key still take effect in the order they were made.
   */
  retryInOrder<T>(retry: () => Promise<T>): Promise<T>;
}

/** Options of {@link createBatcher}. */
export interface BatcherOptions<C, R> {
  /** Names the store in errors: `the <name> store is closed`. */
  readonly name: string;
  /**
   * Sends one batch of calls (in the order they were submitted, per key) and resolves to one outcome per
   * call, in the same order: its result, or {@link callFailed} for a call that failed alone. A rejection,
   * or a thrown error, fails every call of the batch with that error. Calls on one key in one batch must
   * take effect in the batch's order.
   */
  send(calls: readonly C[], batch: Batch): Promise<readonly (R | CallFailure)[]>;
  /** The lane of a call: lanes batch and count what is in flight apart (a Redis Cluster slot). @default one lane */
  lane?(call: C): number | string;
  /**
   * The key a call decides on: calls on one key take effect in the order they were submitted. Required
   * unless `ordered` is true and there is no `group`.
   */
  key?(call: C): string;
  /** Calls share a batch only with calls of the same group (`Object.is`). @default one group */
  group?(call: C): unknown;
  /**
   * True when the batches sent on one lane take effect in the order they are sent (one pipelined
   * connection, as Redis runs scripts): calls on one key may then be in flight in several batches at once.
   * False when batches in flight may overtake each other (a pool of connections): a call then waits
   * while a batch in flight holds a call on its key. @default false
   */
  readonly ordered?: boolean;
  /** Batches in flight at once per lane. */
  readonly maxInFlight: number;
  /** Most calls in one batch. */
  readonly maxBatchSize: number;
  /** Most calls waiting to be sent, over all lanes; one more is refused with `ERR_QUEUE_FULL`. @default 100000 */
  readonly maxQueued?: number;
  /**
   * Wait one microtask before sending a call that could go at once, so that calls made in the same tick
   * share its batch. Else a call that finds its lane free goes alone, at once. @default false
   */
  readonly waitForTick?: boolean;
}

/** What is waiting and in flight, for tests and metrics. */
export interface BatcherStats {
  /** Calls waiting to be sent. */
  readonly queued: number;
  /** Batches sent and not yet answered. */
  readonly inFlight: number;
  /** Lanes with calls waiting or in flight (idle lanes are forgotten). */
  readonly lanes: number;
}

/**
 * The request batcher of the network stores: while a lane has `maxInFlight` batches in flight, the calls
 * that arrive wait, and go together in the next batch.
 */
export interface Batcher<C, R> {
  /** Queues a call; resolves to its outcome, rejects with its error (or the batch's). */
  submit(call: C): Promise<R>;
  /**
   * Refuses new calls (`ERR_CLOSED`) and resolves once every call already submitted is answered: those
   * waiting are still sent. Every call gets the same promise.
   */
  close(): Promise<void>;
  stats(): BatcherStats;
}

interface Entry<C, R> {
  readonly call: C;
  readonly key: string | undefined;
  readonly resolve: (outcome: R) => void;
  readonly reject: (error: unknown) => void;
}

interface Retry {
  /** The number its batch was first sent under. */
  readonly at: number;
  readonly retry: () => Promise<unknown>;
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * What a lane of batches keeps to run failed batches again in order (see {@link Batch.retryInOrder}):
 * the batcher's lanes, and the Redis store's (a script call that came back `NOSCRIPT`).
 */
export interface InOrderRetries {
  /** Batches in flight. */
  inFlight: number;
  /** A batch asked to run again in order: nothing new is sent. */
  recovering: boolean;
  retries: Retry[];
}

/**
 * Runs `retry` again in order with the lane's other retries: the lane sends nothing new until every batch
 * in flight has come back or waits to run again; then they run one after another in the order they were
 * first sent (`at`), and `resume` lets the queue go.
 */
export function retryInOrder<T>(
  lane: InOrderRetries,
  at: number,
  retry: () => Promise<T>,
  resume: () => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    lane.recovering = true;
    lane.retries.push({ at, retry, resolve: resolve as (reply: unknown) => void, reject });
    recover(lane, resume);
  });
}

/**
 * Once every batch in flight on a recovering lane has come back or is waiting to run again, runs those
 * again one after another in the order they were first sent, then calls `resume` to let the queue go.
 */
export function recover(lane: InOrderRetries, resume: () => void): void {
  if (lane.retries.length === 0 || lane.retries.length < lane.inFlight) return;
  const retries = lane.retries.sort((x, y) => x.at - y.at);
  lane.retries = [];
  void (async () => {
    for (const { retry, resolve, reject } of retries) {
      try {
        resolve(await retry());
      } catch (error) {
        reject(error);
      }
    }
    lane.recovering = false;
    resume();
  })();
}

/**
 * The calls a store took and has not answered yet, and its `close()`: a closed store takes no more calls,
 * and `close()` resolves once the last call taken is answered. Every `close()` gets the same promise: a
 * second one neither hangs the first nor resolves early.
 */
export class PendingCalls {
  /** Calls taken and not yet answered. */
  count = 0;
  closed = false;
  private closing: Promise<void> | undefined;
  private idle: (() => void) | undefined;

  /** `n` calls were answered: resolves `close()` when they were the last. */
  answered(n: number): void {
    this.count -= n;
    if (this.count === 0 && this.idle !== undefined) {
      this.idle();
      this.idle = undefined;
    }
  }

  close(): Promise<void> {
    this.closed = true;
    this.closing ??=
      this.count === 0
        ? Promise.resolve()
        : new Promise((resolve) => {
            this.idle = resolve;
          });
    return this.closing;
  }
}

interface Lane<C, R> extends InOrderRetries {
  readonly id: number | string;
  queue: Entry<C, R>[];
  /** Numbers the batches in the order they were sent. */
  sent: number;
  /** For unordered lanes: the keys of the calls in flight, with how many calls hold each. */
  readonly busy: Map<string, number>;
  /** A flush is due at the end of this tick (`waitForTick`). */
  scheduled: boolean;
}

/**
 * Creates a request batcher. It reads no clock and sets no timer: a batch goes when its lane has room,
 * so a lone call pays no delay, and under load each batch carries what arrived while the previous ones
 * were in flight. Bounded: `maxQueued` calls waiting, `maxInFlight` batches of at most `maxBatchSize`
 * calls in flight per lane; lanes exist only while they hold calls.
 *
 * @example
 * ```ts
 * const batcher = createBatcher<Call, Result>({
 *   name: 'kv',
 *   key: (call) => call.key,
 *   maxInFlight: 4,
 *   maxBatchSize: 128,
 *   send: (calls) => server.decideMany(calls), // one round trip for the whole batch
 * });
 * const result = await batcher.submit(call);
 * ```
 */
export function createBatcher<C, R>(options: BatcherOptions<C, R>): Batcher<C, R> {
  checkOptionsObject(options, 'batcher options');
  if (typeof options.send !== 'function') throw invalid('ERR_INVALID_OPTION', 'send', options.send, 'a function');
  const maxInFlight = wholeOption('maxInFlight', options.maxInFlight, 1, 1024);
  const maxBatchSize = wholeOption('maxBatchSize', options.maxBatchSize, 1, 100_000);
  const maxQueued = wholeOption('maxQueued', options.maxQueued ?? 100_000, 0, 10_000_000);
  const ordered = booleanOption('ordered', options.ordered ?? false);
  if (options.key === undefined && (!ordered || options.group !== undefined)) {
    throw new FloodgateError(
      'ERR_INVALID_OPTION',
      'key must be a function when batches are unordered or grouped: calls on one key keep their order by it',
      { option: 'key' },
    );
  }
  return new RequestBatcher(options, maxInFlight, maxBatchSize, maxQueued, ordered);
}

class RequestBatcher<C, R> implements Batcher<C, R> {
  private readonly lanes = new Map<number | string, Lane<C, R>>();
  private readonly laneOf: ((call: C) => number | string) | undefined;
  private readonly keyOf: ((call: C) => string) | undefined;
  private readonly groupOf: ((call: C) => unknown) | undefined;
  private readonly waitForTick: boolean;
  /** Calls waiting to be sent. */
  private queued = 0;
  /** Calls submitted and not yet answered. */
  private readonly pending = new PendingCalls();
  private inFlight = 0;

  constructor(
    private readonly options: BatcherOptions<C, R>,
    private readonly maxInFlight: number,
    private readonly maxBatchSize: number,
    private readonly maxQueued: number,
    private readonly ordered: boolean,
  ) {
    this.laneOf = options.lane;
    this.keyOf = options.key;
    this.groupOf = options.group;
    this.waitForTick = options.waitForTick === true;
  }

  submit(call: C): Promise<R> {
    if (this.pending.closed) {
      return Promise.reject(new FloodgateError('ERR_CLOSED', `the ${this.options.name} store is closed`));
    }
    const id = this.laneOf === undefined ? 0 : this.laneOf(call);
    const key = this.keyOf?.(call);
    let lane = this.lanes.get(id);
    const goesNow = !this.waitForTick && (lane === undefined || (lane.queue.length === 0 && this.hasRoom(lane, key)));
    if (!goesNow && this.queued >= this.maxQueued) {
      return Promise.reject(
        new FloodgateError(
          'ERR_QUEUE_FULL',
          `the ${this.options.name} store has ${this.maxQueued} calls waiting to be sent already (maxQueued)`,
          { option: 'maxQueued' },
        ),
      );
    }
    if (lane === undefined) {
      lane = {
        id,
        queue: [],
        inFlight: 0,
        sent: 0,
        busy: new Map(),
        scheduled: false,
        recovering: false,
        retries: [],
      };
      this.lanes.set(id, lane);
    }
    const current = lane;
    this.pending.count++;
    return new Promise<R>((resolve, reject) => {
      const entry: Entry<C, R> = { call, key, resolve, reject };
      if (goesNow) {
        this.dispatch(current, [entry]);
        return;
      }
      current.queue.push(entry);
      this.queued++;
      if (this.waitForTick && !current.scheduled) {
        current.scheduled = true;
        queueMicrotask(() => {
          current.scheduled = false;
          this.flush(current);
        });
      }
    });
  }

  close(): Promise<void> {
    return this.pending.close();
  }

  stats(): BatcherStats {
    return { queued: this.queued, inFlight: this.inFlight, lanes: this.lanes.size };
  }

  /** Whether a call on `key` may go in a new batch on this lane now. */
  private hasRoom(lane: Lane<C, R>, key: string | undefined): boolean {
    return (
      lane.inFlight < this.maxInFlight && !lane.recovering && (this.ordered || key === undefined || !lane.busy.has(key))
    );
  }

  private dispatch(lane: Lane<C, R>, entries: Entry<C, R>[]): void {
    lane.inFlight++;
    this.inFlight++;
    const at = lane.sent++;
    if (!this.ordered) {
      for (const { key } of entries) {
        if (key !== undefined) lane.busy.set(key, (lane.busy.get(key) ?? 0) + 1);
      }
    }
    void this.run(lane, entries, at);
  }

  private async run(lane: Lane<C, R>, entries: Entry<C, R>[], at: number): Promise<void> {
    const batch: Batch = {
      lane: lane.id,
      retryInOrder: <T>(retry: () => Promise<T>) => retryInOrder(lane, at, retry, () => this.flush(lane)),
    };
    try {
      const outcomes = await this.options.send(
        entries.map((e) => e.call),
        batch,
      );
      if (!Array.isArray(outcomes) || outcomes.length !== entries.length) {
        throw new FloodgateError(
          'ERR_STORE_PROTOCOL',
          `the ${this.options.name} store's batch of ${entries.length} calls came back with ${
            Array.isArray(outcomes) ? `${outcomes.length} outcomes` : describeValue(outcomes)
          }`,
        );
      }
      for (let i = 0; i < entries.length; i++) {
        const entry = entries[i] as Entry<C, R>;
        const outcome = outcomes[i] as R | CallFailure;
        if (outcome instanceof CallFailure) entry.reject(outcome.error);
        else entry.resolve(outcome);
      }
    } catch (error) {
      for (const entry of entries) entry.reject(error);
    } finally {
      lane.inFlight--;
      this.inFlight--;
      this.pending.answered(entries.length);
      if (!this.ordered) {
        for (const { key } of entries) {
          if (key === undefined) continue;
          const left = (lane.busy.get(key) as number) - 1;
          if (left === 0) lane.busy.delete(key);
          else lane.busy.set(key, left);
        }
      }
      if (lane.recovering) recover(lane, () => this.flush(lane));
      else this.flush(lane);
    }
  }

  /** Sends what waits on a lane, as far as its room allows; forgets the lane once it is idle. */
  private flush(lane: Lane<C, R>): void {
    while (lane.queue.length > 0 && lane.inFlight < this.maxInFlight && !lane.recovering) {
      const entries = this.take(lane);
      if (entries.length === 0) break;
      this.queued -= entries.length;
      this.dispatch(lane, entries);
    }
    this.settle(lane);
  }

  /**
   * The next batch of a lane: its calls in the order they were submitted, skipping (and keeping for
   * later) a call whose key a batch in flight holds (unordered lanes), a call of another group than the
   * batch's first, and every call on a key a skipped call holds, so calls on one key never overtake each
   * other.
   */
  private take(lane: Lane<C, R>): Entry<C, R>[] {
    const queue = lane.queue;
    const max = this.maxBatchSize;
    if (this.groupOf === undefined && (this.ordered || lane.busy.size === 0)) {
      if (queue.length <= max) {
        lane.queue = [];
        return queue;
      }
      lane.queue = queue.splice(max);
      return queue;
    }
    const batch: Entry<C, R>[] = [];
    const rest: Entry<C, R>[] = [];
    let held: Set<string> | undefined;
    let group: unknown;
    let i = 0;
    for (; i < queue.length && batch.length < max; i++) {
      const entry = queue[i] as Entry<C, R>;
      const key = entry.key;
      let waits = key !== undefined && ((!this.ordered && lane.busy.has(key)) || held?.has(key) === true);
      if (!waits && this.groupOf !== undefined) {
        const g = this.groupOf(entry.call);
        if (batch.length === 0) group = g;
        else waits = !Object.is(g, group);
      }
      if (waits) {
        rest.push(entry);
        if (key !== undefined) {
          held ??= new Set();
          held.add(key);
        }
      } else {
        batch.push(entry);
      }
    }
    lane.queue = i === queue.length ? rest : rest.concat(queue.slice(i));
    return batch;
  }

  /** Forgets an idle lane. */
  private settle(lane: Lane<C, R>): void {
    if (
      lane.inFlight === 0 &&
      lane.queue.length === 0 &&
      !lane.scheduled &&
      !lane.recovering &&
      this.lanes.get(lane.id) === lane
    ) {
      this.lanes.delete(lane.id);
    }
  }
}
