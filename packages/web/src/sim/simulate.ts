import {
  createLimiter,
  type Decision,
  type DecisionReason,
  definePolicy,
  type Limiter,
  memoryStore,
  type Policy,
  type PolicyInput,
} from 'floodgate';
import { createHttpRateLimiter, type HeaderFormat, type RateLimitOutcome } from 'floodgate/http';
import { type CompiledPolicy, compilePolicy, type State } from 'floodgate/model';
import type { StoreRequest, StoreResult, SyncStore } from 'floodgate/store';
import { type ManualClock, manualClock } from 'floodgate/testing';
import { type LevelScale, levelScale, type Readout, readState } from './state.js';
import { arrivals, type Traffic } from './traffic.js';

/**
 * When every run starts: midnight UTC, so clock-aligned windows of a second, a minute, an hour or a
 * day begin with the run, as they do on a server at the top of the hour.
 */
export const SIM_START_MS = Date.UTC(2030, 0, 1);
const START_US = SIM_START_MS * 1000;

/** The key every simulated request uses: one client, as seen by one policy. */
export const SIM_KEY = 'client';

/** One side of a comparison. */
export interface SideInput {
  /** Any policy, as data (`{ algorithm: 'gcra', limit: 10, periodMs: 1000 }`), validated by the library. */
  readonly policy: PolicyInput;
}

/** One request of a run and the limiter's answer. */
export interface SimulatedCall {
  /** µs after the start of the run. */
  readonly atUs: number;
  readonly allowed: boolean;
  readonly reason: DecisionReason | undefined;
  readonly remaining: number;
  readonly retryAfterMs: number;
  readonly resetAfterMs: number;
  readonly delayMs: number;
  /** The plotted level right after the call. */
  readonly level: number;
}

/** A whole run: every call, and the state chart's curve. */
export interface Simulation {
  readonly policy: Policy;
  readonly compiled: CompiledPolicy;
  readonly scale: LevelScale;
  readonly durationUs: number;
  readonly calls: readonly SimulatedCall[];
  readonly admitted: number;
  readonly denied: number;
  /** The state over time: sample instants (µs after start) with the level and the penalty box. */
  readonly curve: { readonly atUs: number[]; readonly level: number[]; readonly blocked: number[] };
}

/**
 * A memory store that remembers the last state it stored for each policy, so the page can draw it.
 * Decisions are the memory store's own: this only copies what it returns.
 */
function recordingStore(): SyncStore & { readonly states: (State | undefined)[] } {
  const inner = memoryStore();
  const states: (State | undefined)[] = [];
  const record = (request: StoreRequest, result: StoreResult): StoreResult => {
    if (request.commit) {
      result.evaluations.forEach((e, i) => {
        if (e.next !== undefined) states[i] = [...e.next];
      });
    }
    return result;
  };
  return {
    name: 'memory',
    hasOwnClock: false,
    states,
    decide: (request) => Promise.resolve(record(request, inner.decideSync(request))),
    decideSync: (request) => record(request, inner.decideSync(request)),
    reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
    resetSync: (prefix, key, policies) => inner.resetSync(prefix, key, policies),
  };
}

/**
 * A run in progress: the library's limiter over the memory store, on a manual clock, fed the traffic's
 * arrivals one by one. Exactly what `floodgate serve` runs for one key on the memory store.
 */
export class Replay {
  readonly policy: Policy;
  readonly compiled: CompiledPolicy;
  readonly clock: ManualClock;
  readonly limiter: Limiter;
  readonly times: readonly number[];
  readonly durationUs: number;
  readonly cost: number;
  private readonly store: ReturnType<typeof recordingStore>;
  private nowUs = 0;
  /** Index of the next arrival. */
  next = 0;

  constructor(side: SideInput, traffic: Traffic) {
    this.policy = definePolicy(side.policy);
    this.compiled = compilePolicy(this.policy);
    this.clock = manualClock({ startMs: SIM_START_MS });
    this.store = recordingStore();
    this.limiter = createLimiter({ store: this.store, clock: this.clock, policies: [this.policy], prefix: 'sim' });
    this.times = arrivals(traffic, START_US);
    this.durationUs = Math.round(traffic.durationMs * 1000);
    this.cost = traffic.cost ?? 1;
  }

  /** The state the store holds now (undefined while untouched). */
  get state(): State | undefined {
    return this.store.states[0];
  }

  /** Moves the clock to `atUs` after the start (never backwards). */
  moveTo(atUs: number): void {
    if (atUs > this.nowUs) {
      this.clock.advanceUs(atUs - this.nowUs);
      this.nowUs = atUs;
    }
  }

  /** Reads the state at the clock's instant. */
  read(): Readout {
    return readState(this.compiled, this.state, START_US + this.nowUs, START_US);
  }

  /** Sends the next arrival through the limiter. */
  step(): { atUs: number; decision: Decision } {
    const atUs = this.times[this.next++] as number;
    this.moveTo(atUs);
    const decision = this.limiter.limitSync(SIM_KEY, { cost: this.cost });
    return { atUs, decision };
  }
}

/** Points of the state curve between calls (the curve is exact at calls; these fill in the drift). */
const CURVE_SAMPLES = 600;

/** Runs a whole side over the traffic. Throws the library's `FloodgateError` for an invalid policy. */
export function simulate(side: SideInput, traffic: Traffic): Simulation {
  const replay = new Replay(side, traffic);
  const calls: SimulatedCall[] = [];
  const atUs: number[] = [];
  const level: number[] = [];
  const blocked: number[] = [];
  const sample = (t: number) => {
    const readout = replay.read();
    atUs.push(t);
    level.push(readout.level);
    blocked.push(readout.blockedMs > 0 ? 1 : 0);
  };
  const durationUs = replay.durationUs;
  const gridUs = Math.max(1, durationUs / CURVE_SAMPLES);
  let grid = 0;
  let admitted = 0;
  while (replay.next < replay.times.length) {
    const t = replay.times[replay.next] as number;
    for (; grid * gridUs < t; grid++) {
      const g = Math.round(grid * gridUs);
      replay.moveTo(g);
      sample(g);
    }
    replay.moveTo(t);
    sample(t);
    const { decision } = replay.step();
    sample(t);
    if (decision.allowed) admitted++;
    calls.push({
      atUs: t,
      allowed: decision.allowed,
      reason: decision.reason,
      remaining: decision.remaining,
      retryAfterMs: decision.retryAfterMs,
      resetAfterMs: decision.resetAfterMs,
      delayMs: decision.delayMs ?? 0,
      level: level[level.length - 1] as number,
    });
  }
  for (; grid * gridUs <= durationUs; grid++) {
    const g = Math.round(grid * gridUs);
    replay.moveTo(g);
    sample(g);
  }
  return {
    policy: replay.policy,
    compiled: replay.compiled,
    scale: levelScale(replay.compiled),
    durationUs,
    calls,
    admitted,
    denied: calls.length - admitted,
    curve: { atUs, level, blocked },
  };
}

/** What a client sending one request at an instant receives, and the state it meets. */
export interface Probe {
  /** µs after the start. */
  readonly atUs: number;
  /** The state just before the request (every traffic request up to this instant included). */
  readonly before: Readout;
  /** The status, headers and body of the library's HTTP middleware for this request. */
  readonly outcome: RateLimitOutcome;
  /** The last request of the traffic at or before this instant, and its decision. */
  readonly lastCall: { readonly atUs: number; readonly decision: Decision } | undefined;
}

/**
 * Sends the traffic up to `atUs` (inclusive), then one more request at `atUs` through the library's HTTP
 * middleware (`floodgate/http`), which formats the headers as a server using it sends them.
 */
export async function probe(side: SideInput, traffic: Traffic, atUs: number, headers: HeaderFormat): Promise<Probe> {
  const replay = new Replay(side, traffic);
  let lastCall: Probe['lastCall'];
  while (replay.next < replay.times.length && (replay.times[replay.next] as number) <= atUs) {
    lastCall = replay.step();
  }
  replay.moveTo(atUs);
  const before = replay.read();
  const middleware = createHttpRateLimiter<undefined>(
    {
      limiter: replay.limiter,
      key: () => SIM_KEY,
      cost: replay.cost,
      headers,
      // The middleware waits out queue delays on its clock; a probe reports them instead of waiting.
      clock: { nowUs: () => replay.clock.nowUs(), sleep: () => Promise.resolve() },
    },
    { peer: () => undefined, header: () => undefined },
  );
  const outcome = (await middleware(undefined)) as RateLimitOutcome;
  return { atUs, before, outcome, lastCall };
}
