import type { CompiledPolicy } from '../../src/model/index.js';

/**
 * The exact sliding log, as the model kept it before entries were coalesced: every event, `(time, cost)`
 * oldest first, with the model's rules (live costs summed newest first, the minimum gap from the newest
 * event, a logged denied attempt keeping only the shortest newest run that exceeds the limit). The
 * reference the coalesced log is compared with. Dropping dead entries moves a start index, so a long
 * flood costs O(live entries) per call, not a copy of the log.
 */
export class ExactLog {
  private readonly times: number[] = [];
  private readonly costs: number[] = [];
  private start = 0;

  constructor(private readonly c: CompiledPolicy) {}

  /** Entries still held (dead ones included until the next append drops them). */
  get length(): number {
    return this.times.length - this.start;
  }

  /** Whether the exact log admits `cost` at `nowUs`. */
  admits(nowUs: number, cost: number): boolean {
    const c = this.c;
    let sum = 0;
    for (let i = this.times.length - 1; i >= this.start && (this.times[i] as number) > nowUs - c.a; i--) {
      sum += this.costs[i] as number;
    }
    const last = this.length > 0 ? (this.times[this.times.length - 1] as number) : -1;
    const gapOk = !(c.b > 0 && cost > 0 && last >= 0 && nowUs - last < c.b);
    return sum + cost <= c.limit && gapOk;
  }

  /** Drops the dead entries, then logs the event (merged with the newest at the same µs). */
  append(nowUs: number, cost: number): void {
    while (this.start < this.times.length && (this.times[this.start] as number) <= nowUs - this.c.a) this.start++;
    const n = this.times.length;
    if (n > this.start && this.times[n - 1] === nowUs) this.costs[n - 1] = (this.costs[n - 1] as number) + cost;
    else {
      this.times.push(nowUs);
      this.costs.push(cost);
    }
  }

  /** A logged denied attempt: appended, then only the shortest newest run exceeding the limit is kept. */
  logDenied(nowUs: number, cost: number): void {
    this.append(nowUs, cost);
    let sum = 0;
    let keep = this.times.length;
    while (keep > this.start && sum <= this.c.limit) {
      keep--;
      sum += this.costs[keep] as number;
    }
    this.start = keep;
  }

  /** One call deciding on its own (no penalty box): whether it is admitted; the log records it. */
  call(nowUs: number, cost: number): boolean {
    if (cost > this.c.limit) return false;
    const allowed = this.admits(nowUs, cost);
    if (cost === 0) return allowed;
    if (allowed) this.append(nowUs, cost);
    else if (this.c.c === 1) this.logDenied(nowUs, cost);
    return allowed;
  }
}
