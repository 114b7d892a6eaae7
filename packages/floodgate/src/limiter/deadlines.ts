/** What a call's `expire` is given when its time is up: no store rejects with it. */
export const TIMED_OUT: unique symbol = Symbol('timed out');

/** A call waiting for the store, with the moment it times out. */
export interface Waiting {
  /** `performance.now()` ms at which the call times out (set when its wait starts). */
  at: number;
  /**
   * Fails the call with the timeout (given `TIMED_OUT`; a store's own reject, `Store.decideTimed`, which
   * the store sets); let go (undefined) once the call has an answer.
   */
  expire: ((timedOut: unknown) => void) | undefined;
  /**
   * Whether the call has an answer or has timed out: kept by the deadlines alone, so that a store writing
   * `expire` late cannot make a call wait twice.
   */
  done: boolean;
}

/**
 * The `timeoutMs` of a limiter's store calls, for all of them with one timer. Every call waits the same
 * time, so calls time out in the order they started: they wait in a queue, and a single timer is set for
 * the first one still waiting. A call that gets its answer is only marked; the answered calls at the front
 * leave at once (one at a time, the commonest case, the queue is never longer than one), and the timer,
 * once it fires, fails every call whose time is up and is set again for the next one. So a call fails at
 * the same moment a timer of its own would fire (`setTimeout(…, timeoutMs)` from its start), and a call
 * costs a clock read and no timer of its own: setting and clearing a timer for each call cost more than a
 * quarter of what a lone call to a local Redis spends in the client (bench/redis.ts, sequential latency).
 *
 * The timer is unreferenced whenever no call waits, so it never keeps the process alive on its own, and
 * referenced while one does, as a timer of each call's own would be. Answered calls behind one still
 * waiting are swept out once they are more than twice the calls still waiting, and those the front has
 * passed are dropped once they are as many as the calls behind them, so the queue holds at most about four
 * times the calls in flight (and a few hundred more), however long calls keep overlapping.
 */
/** How many passed entries may wait at the front of the queue before they are dropped (`dropPassed`). */
const PASSED = 256;

export class Deadlines {
  private queue: Waiting[] = [];
  private head = 0;
  private waiting = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** When the timer fires, `performance.now()` ms; 0 when it is not set. */
  private firesAt = 0;
  /** While `fire` fails calls: a call started by one of them is timed by the timer `fire` sets last. */
  private firing = false;

  constructor(private readonly timeoutMs: number) {}

  /** Starts a call's wait: `expire` runs once its time is up, unless `answered` is called first. */
  start(expire: (timedOut: unknown) => void): Waiting {
    return this.track({ at: 0, expire, done: false });
  }

  /**
   * Starts the wait of a call made already, whose entry a store filled in (`Store.decideTimed`: the
   * store sets `expire` as it takes the call, and the call is sent before the deadline's bookkeeping).
   */
  track(entry: Waiting): Waiting {
    entry.at = performance.now() + this.timeoutMs;
    this.queue.push(entry);
    if (this.waiting++ === 0 && !this.firing) {
      if (this.timer === undefined || this.firesAt === 0) this.arm(this.timeoutMs);
      else if (entry.at < this.firesAt) {
        // The timer was set for a call that has since been answered, later than this call's time: set it again.
        clearTimeout(this.timer);
        this.arm(this.timeoutMs);
      } else {
        this.timer.ref();
      }
    }
    return entry;
  }

  /**
   * The call has its answer (or failed): it no longer times out. False when its time was up first (it
   * has failed with the timeout, and the answer comes too late).
   */
  answered(entry: Waiting): boolean {
    if (entry.done) return false;
    entry.done = true;
    entry.expire = undefined;
    if (--this.waiting === 0) {
      this.queue = [];
      this.head = 0;
      this.timer?.unref();
      return true;
    }
    const queue = this.queue;
    while (this.head < queue.length && (queue[this.head] as Waiting).done) this.head++;
    if (queue.length - this.head > 2 * this.waiting + 64) this.sweep();
    else if (this.head >= PASSED && 2 * this.head >= queue.length) this.dropPassed();
    return true;
  }

  /**
   * Drops the entries the front has passed. Without it, calls that keep overlapping (the count waiting
   * never back to 0) would keep every entry of every call since the last quiet moment, each one outliving
   * young collections and copied into the old generation.
   */
  private dropPassed(): void {
    this.queue = this.queue.slice(this.head);
    this.head = 0;
  }

  /** Drops the answered calls from the queue. */
  private sweep(): void {
    const left: Waiting[] = [];
    for (let i = this.head; i < this.queue.length; i++) {
      const entry = this.queue[i] as Waiting;
      if (!entry.done) left.push(entry);
    }
    this.queue = left;
    this.head = 0;
  }

  private arm(ms: number): void {
    this.firesAt = performance.now() + ms;
    this.timer = setTimeout(() => this.fire(), ms);
  }

  /** Fails the calls whose time is up, and sets the timer for the next one. */
  private fire(): void {
    this.firesAt = 0;
    const now = performance.now();
    const queue = this.queue;
    this.firing = true;
    try {
      while (this.head < queue.length) {
        const entry = queue[this.head] as Waiting;
        if (!entry.done) {
          if (entry.at > now) break;
          const expire = entry.expire;
          entry.done = true;
          entry.expire = undefined;
          this.waiting--;
          // May start calls at once (a failure's listeners, its fallback): they join this queue.
          expire?.(TIMED_OUT);
        }
        this.head++;
      }
    } finally {
      this.firing = false;
    }
    if (this.head >= this.queue.length) {
      // Every call has its answer (an expire may have started calls of its own: they are in this.queue).
      if (this.waiting === 0) {
        this.queue = [];
        this.head = 0;
      }
      return;
    }
    if (this.head >= PASSED && 2 * this.head >= this.queue.length) this.dropPassed();
    // Node fires a timer on the millisecond it is due, which may be a fraction before the time asked.
    this.arm(Math.max(1, (this.queue[this.head] as Waiting).at - now));
  }
}
