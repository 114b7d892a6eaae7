import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import type { Decision, Limiter } from '../../src/index.js';

/** One call made under load: when it started and ended (ms, performance.now()), and what it got. */
export interface Call {
  readonly key: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly decision?: Decision;
  readonly error?: unknown;
}

export interface LoadOptions {
  /** Concurrent callers. */
  workers: number;
  /** Keys the callers go through, round robin. */
  keys: readonly string[];
  /** Pause between two calls of one caller, ms (a call answered at once must still let timers run). */
  pauseMs?: number;
}

/** Calls `limiter.limit` from several callers until `stop()`; every call is recorded, errors included. */
export function startLoad(limiter: Limiter, options: LoadOptions): { calls: Call[]; stop(): Promise<void> } {
  const calls: Call[] = [];
  let running = true;
  let next = 0;
  const pauseMs = options.pauseMs ?? 2;
  const worker = async () => {
    while (running) {
      const key = options.keys[next++ % options.keys.length] as string;
      const startMs = performance.now();
      try {
        const decision = await limiter.limit(key);
        calls.push({ key, startMs, endMs: performance.now(), decision });
      } catch (error) {
        calls.push({ key, startMs, endMs: performance.now(), error });
      }
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  };
  const done = Promise.all(Array.from({ length: options.workers }, worker));
  return {
    calls,
    async stop() {
      running = false;
      await done;
    },
  };
}

/**
 * Watches how late this process's event loop runs. No timeout can fire earlier than the loop gets to it,
 * so a wait is judged against the timeout plus the slack plus the worst lag seen while it ran (on a busy
 * two-core machine running other test files, that lag is the noise; on a quiet one it is a few ms).
 */
export function watchLag(): { stop(): number } {
  const histogram = monitorEventLoopDelay({ resolution: 5 });
  histogram.enable();
  return {
    stop() {
      histogram.disable();
      return histogram.max / 1e6;
    },
  };
}

/** Collects unhandled rejections while a fault test runs, so the test can fail on any. */
export function watchUnhandled(): { readonly reasons: unknown[]; dispose(): void } {
  const reasons: unknown[] = [];
  const onRejection = (reason: unknown) => reasons.push(reason);
  process.on('unhandledRejection', onRejection);
  return {
    reasons,
    dispose: () => process.removeListener('unhandledRejection', onRejection),
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Calls decided by the store (not degraded), admitted, per key. */
export function storeAdmissions(calls: readonly Call[]): Map<string, number> {
  const admitted = new Map<string, number>();
  for (const call of calls) {
    if (call.decision?.allowed === true && call.decision.reason !== 'degraded') {
      admitted.set(call.key, (admitted.get(call.key) ?? 0) + 1);
    }
  }
  return admitted;
}

/** The longest a call waited, ms. */
export function longestWait(calls: readonly Call[]): number {
  let longest = 0;
  for (const call of calls) longest = Math.max(longest, call.endMs - call.startMs);
  return longest;
}

/**
 * When service came back: the end of the first call, started after `fromMs`, that the store decided
 * (undefined if none did).
 */
export function firstStoreDecisionAfter(calls: readonly Call[], fromMs: number): number | undefined {
  let first: number | undefined;
  for (const call of calls) {
    if (call.startMs >= fromMs && call.decision !== undefined && call.decision.reason !== 'degraded') {
      if (first === undefined || call.endMs < first) first = call.endMs;
    }
  }
  return first;
}
