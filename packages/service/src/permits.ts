import { createHash } from 'node:crypto';
import {
  type Clock,
  type ConcurrencyPolicy,
  createPermits,
  isFloodgateError,
  type PermitDecision,
  type PermitStore,
  type Permits,
} from 'floodgate';
import {
  boundedKey,
  type CompiledDomain,
  type DescriptorEntry,
  MAX_ENTRIES,
  MAX_ENTRY_LENGTH,
  matchDescriptor,
  type Rule,
} from './rules.js';

/**
 * The descriptor entry that names a request's lease in an Envoy call: its value (Envoy's `x-request-id`,
 * by a `request_headers` action) is turned into the lease's id, so the stream-done call, which may reach
 * another replica of the service, releases the same lease. Not part of the rule match.
 */
export const LEASE_ENTRY = 'floodgate_lease';
/** The entry that marks an Envoy call as the stream-done one: release the lease instead of taking it. */
export const RELEASE_ENTRY = 'floodgate_release';

/** A permit call of the HTTP API (or of an Envoy descriptor): the descriptor, and what it asks for. */
export interface PermitCall {
  readonly domain: string;
  readonly entries: readonly DescriptorEntry[];
  /** acquire: the permit's cost, a whole number. @default 1 */
  readonly cost?: number | undefined;
  /** refresh and release: the lease's id, from the acquire's answer. */
  readonly leaseId?: string | undefined;
  /**
   * acquire: wait up to this long, ms, in the key's queue (kept in the store) when no permit is free;
   * 0 or absent: never wait. At most the desk's `maxWaitMs`.
   */
  readonly timeoutMs?: number | undefined;
  /** acquire: ends a wait (the client went away); the waiter leaves the queue. */
  readonly signal?: AbortSignal | undefined;
  /**
   * An Envoy call's descriptor: its entries are the decoder's strings, of any length (a long key is
   * stored by its digest), so only the HTTP API's bounds on entries are skipped.
   */
  readonly lenient?: boolean | undefined;
}

/** What an acquire answers: the rule it matched, and the permit decision (with the lease when granted). */
export interface PermitAnswer {
  /** False when the descriptor matched no rule with a concurrency limit: nothing is held, allowed. */
  readonly matched: boolean;
  readonly rule: string | null;
  readonly decision: PermitDecision | undefined;
  /** A waiting acquire that got no permit: why (no permit within `timeoutMs`, or the key's queue full). */
  readonly refused?: { readonly reason: WaitRefusal; readonly limit: number; readonly policy: string } | undefined;
  /** A waiting acquire: how long it waited, ms. */
  readonly waitedMs?: number | undefined;
}

/** Why a waiting acquire got no permit. */
export type WaitRefusal = 'timeout' | 'queue-full';

/** How a waiting acquire ended: granted, refused, or abandoned (the client went away). */
export type WaitResult = 'granted' | WaitRefusal | 'abandoned';

/** A permit call the service refuses: bad input, named by its field. */
export class PermitCallError extends Error {
  override readonly name = 'PermitCallError';
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
  }
}

/** How permits went, for the metrics: counted per rule (labels from the config only). */
export interface PermitEvents {
  acquired(rule: Rule): void;
  refused(rule: Rule, reason: 'limit' | 'exceeds-capacity' | WaitRefusal): void;
  /** A waiting acquire ended, after `seconds` from its ask. */
  waited(rule: Rule, result: WaitResult, seconds: number): void;
  /** A release that ended a live lease; `heldMs` when this process granted it (the hold time). */
  released(rule: Rule, heldMs: number | undefined): void;
  /** A lease this process granted whose lease ran out before any release reached this process. */
  expired(rule: Rule): void;
}

/** A lease this process granted, until it is released here or runs out (for in-flight and hold time). */
interface Granted {
  readonly rule: Rule;
  readonly cost: number;
  readonly grantedMs: number;
  readonly expiresMs: number;
}

/** Leases followed at most (their memory bound); past it, new grants are not followed (in flight undercounts). */
const MAX_FOLLOWED = 100_000;

/** The longest wait of an acquire unless the service says otherwise, ms. */
export const DEFAULT_MAX_WAIT_MS = 30_000;

/** One concurrency limit's permits, and the waiters this process holds in its store queues. */
interface Desk {
  readonly permits: Permits;
  /** Ids of the waiters of this process now in a store queue (each leaves on its grant or its leave). */
  readonly queued: Set<string>;
}

/**
 * The concurrency limits of a config: each rule with `concurrency` has its permits (on the service's
 * permit store), keyed by the descriptor as its rate policies are. One per engine (per loaded config);
 * the leases live in the store, so a reload keeps them.
 */
export class PermitDesk {
  readonly #domains: ReadonlyMap<string, CompiledDomain>;
  readonly #store: PermitStore;
  readonly #prefix: string;
  readonly #clock: Clock | undefined;
  readonly #events: PermitEvents | undefined;
  readonly #maxWaitMs: number;
  readonly #desks = new Map<ConcurrencyPolicy, Desk & { readonly rule: Rule }>();
  readonly #followed = new Map<string, Granted>();

  constructor(
    domains: ReadonlyMap<string, CompiledDomain>,
    store: PermitStore,
    prefix: string,
    clock: Clock | undefined,
    events: PermitEvents | undefined,
    maxWaitMs = DEFAULT_MAX_WAIT_MS,
  ) {
    this.#domains = domains;
    this.#store = store;
    this.#prefix = prefix;
    this.#clock = clock;
    this.#events = events;
    this.#maxWaitMs = maxWaitMs;
  }

  /** Waiters this process holds in a store queue now, by rule (the queued gauge). */
  queued(): Map<Rule, number> {
    const out = new Map<Rule, number>();
    for (const desk of this.#desks.values()) if (desk.queued.size > 0) out.set(desk.rule, desk.queued.size);
    return out;
  }

  /** Leases granted by this process and not yet released here nor run out, by rule (the in-flight gauge). */
  inFlight(): Map<Rule, number> {
    this.#sweep();
    const out = new Map<Rule, number>();
    for (const g of this.#followed.values()) out.set(g.rule, (out.get(g.rule) ?? 0) + g.cost);
    return out;
  }

  /**
   * Takes a permit for the descriptor; with `timeoutMs`, waits for one in the key's queue (see
   * {@link PermitCall.timeoutMs}). A descriptor without a concurrency rule is allowed, holding nothing.
   * A wait whose `signal` aborts rejects with the library's `ERR_ABORTED`, having left the queue.
   */
  async acquire(call: PermitCall, leaseId?: string): Promise<PermitAnswer> {
    const cost = checkCost(call.cost);
    const timeoutMs = this.#checkTimeout(call.timeoutMs);
    const found = this.#match(call);
    if (found === undefined) return { matched: false, rule: null, decision: undefined };
    const { rule, key, permits } = found;
    if (timeoutMs > 0 && cost <= permits.policy.limit) return this.#wait(found, cost, timeoutMs, call.signal);
    const decision = await permits.limit(key, leaseId === undefined ? { cost } : { cost, leaseId });
    const events = this.#events;
    if (decision.permit === undefined) {
      events?.refused(rule, decision.reason ?? 'limit');
    } else {
      events?.acquired(rule);
      this.#follow(decision.permit.leaseId, rule, cost, permits.policy.leaseMs);
    }
    return { matched: true, rule: rule.label, decision };
  }

  /** A waiting acquire: granted, refused (timeout, queue full) as an answer, abandoned as `ERR_ABORTED`. */
  async #wait(
    found: { rule: Rule; key: string; permits: Permits },
    cost: number,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<PermitAnswer> {
    const { rule, key, permits } = found;
    if (typeof this.#store.wait !== 'function' || typeof this.#store.leave !== 'function') {
      throw new PermitCallError(
        `the service's ${this.#store.name} permit store cannot wait: omit timeoutMs (or give 0)`,
        'timeoutMs',
      );
    }
    const events = this.#events;
    const startedMs = performance.now();
    const waited = (result: WaitResult) => {
      const ms = performance.now() - startedMs;
      events?.waited(rule, result, ms / 1000);
      return Math.round(ms);
    };
    try {
      const decision = await permits.acquire(key, { cost, timeoutMs, ...(signal === undefined ? {} : { signal }) });
      const waitedMs = waited('granted');
      events?.acquired(rule);
      this.#follow(decision.permit.leaseId, rule, cost, permits.policy.leaseMs);
      return { matched: true, rule: rule.label, decision, waitedMs };
    } catch (error) {
      const code = isFloodgateError(error) ? error.code : undefined;
      if (code === 'ERR_TIMEOUT' || code === 'ERR_QUEUE_FULL') {
        const reason = code === 'ERR_TIMEOUT' ? 'timeout' : 'queue-full';
        const waitedMs = waited(reason);
        events?.refused(rule, reason);
        const { limit, name } = permits.policy;
        return {
          matched: true,
          rule: rule.label,
          decision: undefined,
          refused: { reason, limit, policy: name },
          waitedMs,
        };
      }
      if (code === 'ERR_ABORTED') waited('abandoned');
      throw error;
    }
  }

  #checkTimeout(timeoutMs: unknown): number {
    if (timeoutMs === undefined) return 0;
    const max = this.#maxWaitMs;
    if (typeof timeoutMs !== 'number' || !Number.isSafeInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > max) {
      throw new PermitCallError(
        `timeoutMs must be a whole number of ms from 0 to ${max} (the service's longest wait), got ${show(timeoutMs)}`,
        'timeoutMs',
      );
    }
    return timeoutMs;
  }

  /** The lease length of the concurrency limit a descriptor matches, ms (undefined when none). */
  leaseMsOf(call: PermitCall): number | undefined {
    return this.#match(call)?.permits.policy.leaseMs;
  }

  /** Extends a live lease; false when it is not live (it is never taken back). */
  async refresh(call: PermitCall): Promise<{ matched: boolean; rule: string | null; refreshed: boolean }> {
    const leaseId = checkLeaseId(call.leaseId);
    const found = this.#match(call);
    if (found === undefined) return { matched: false, rule: null, refreshed: false };
    const refreshed = await found.permits.refresh(found.key, leaseId);
    const followed = this.#followed.get(leaseId);
    if (refreshed && followed !== undefined) {
      this.#followed.set(leaseId, { ...followed, expiresMs: this.#nowMs() + found.permits.policy.leaseMs });
    }
    return { matched: true, rule: found.rule.label, refreshed };
  }

  /** Ends a lease; true only for the call that ended a live one. */
  async release(
    call: PermitCall,
    leaseId = checkLeaseId(call.leaseId),
  ): Promise<{
    matched: boolean;
    rule: string | null;
    released: boolean;
  }> {
    const found = this.#match(call);
    if (found === undefined) return { matched: false, rule: null, released: false };
    const released = await found.permits.release(found.key, leaseId);
    const followed = this.#followed.get(leaseId);
    this.#followed.delete(leaseId);
    if (released) {
      this.#events?.released(found.rule, followed === undefined ? undefined : this.#nowMs() - followed.grantedMs);
    }
    return { matched: true, rule: found.rule.label, released };
  }

  /**
   * An Envoy descriptor's permit: one ending in a `floodgate_lease` entry (and then, for the stream-done
   * call, a `floodgate_release` one). Undefined for any other descriptor. The lease's id is derived from
   * the lease entry's value and the descriptor's key, so every replica derives the same one.
   */
  envoyLease(
    domain: string,
    entries: readonly DescriptorEntry[],
  ): { entries: DescriptorEntry[]; leaseId: string; release: boolean } | undefined {
    let end = entries.length;
    let release = false;
    if (end > 0 && entries[end - 1]?.key === RELEASE_ENTRY) {
      release = true;
      end--;
    }
    const lease = end > 0 ? entries[end - 1] : undefined;
    if (lease?.key !== LEASE_ENTRY || end < 2) return undefined;
    const rest = entries.slice(0, end - 1);
    const leaseId = createHash('sha256').update(`${domain}\u0000${lease.value}`).digest('base64url').slice(0, 22);
    return { entries: rest, leaseId, release };
  }

  #match(call: PermitCall): { rule: Rule; key: string; permits: Permits } | undefined {
    const domainName = call.domain;
    if (typeof domainName !== 'string' || domainName.length === 0) {
      throw new PermitCallError('domain is required: a non-empty string', 'domain');
    }
    if (call.lenient !== true) checkEntries(call.entries);
    const domain = this.#domains.get(domainName);
    if (domain === undefined) return undefined;
    const match = matchDescriptor(domain, call.entries);
    const policy = match?.rule.concurrency;
    if (match === undefined || policy === undefined) return undefined;
    let desk = this.#desks.get(policy);
    if (desk === undefined) {
      const queued = new Set<string>();
      const permits = createPermits({
        store: queueCounted(this.#store, queued),
        policy,
        prefix: this.#prefix,
        ...(this.#clock === undefined ? {} : { clock: this.#clock }),
      });
      desk = { rule: match.rule, permits, queued };
      this.#desks.set(policy, desk);
    }
    const permits = desk.permits;
    return { rule: match.rule, key: boundedKey(match.key), permits };
  }

  #follow(leaseId: string, rule: Rule, cost: number, leaseMs: number): void {
    this.#sweep();
    if (this.#followed.size >= MAX_FOLLOWED) return;
    const nowMs = this.#nowMs();
    this.#followed.set(leaseId, { rule, cost, grantedMs: nowMs, expiresMs: nowMs + leaseMs });
  }

  /** Leases followed here that ran out with no release seen: expired (a crash, a stall, or a release through another replica). */
  #sweep(): void {
    const nowMs = this.#nowMs();
    for (const [id, g] of this.#followed) {
      if (g.expiresMs > nowMs) continue;
      this.#followed.delete(id);
      this.#events?.expired(g.rule);
    }
  }

  #nowMs(): number {
    return this.#clock === undefined ? Date.now() : this.#clock.nowUs() / 1000;
  }
}

/**
 * The store as the desk's permits see it: the same calls, and `queued` holds the ids of the waiters now
 * in a queue (added when a wait answers queued, taken out by the grant, a full queue, or the leave that
 * every wait giving up makes, even when that leave fails).
 */
function queueCounted(store: PermitStore, queued: Set<string>): PermitStore {
  const { wait, leave } = store;
  if (typeof wait !== 'function' || typeof leave !== 'function') return store;
  return {
    name: store.name,
    acquire: (key, args) => store.acquire(key, args),
    refresh: (key, args) => store.refresh(key, args),
    release: (key, args) => store.release(key, args),
    async wait(key, args) {
      const reply = await wait.call(store, key, args);
      if (reply.queued) queued.add(args.leaseId);
      else queued.delete(args.leaseId);
      return reply;
    },
    leave(key, args) {
      queued.delete(args.leaseId);
      return leave.call(store, key, args);
    },
    ...(typeof store.watch === 'function'
      ? { watch: (store.watch as NonNullable<PermitStore['watch']>).bind(store) }
      : {}),
    ...(typeof store.watching === 'function'
      ? { watching: (store.watching as NonNullable<PermitStore['watching']>).bind(store) }
      : {}),
  };
}

function checkCost(cost: unknown): number {
  if (cost === undefined) return 1;
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 1) {
    throw new PermitCallError(
      `cost must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER}, got ${show(cost)}`,
      'cost',
    );
  }
  return cost;
}

function checkLeaseId(leaseId: unknown): string {
  if (typeof leaseId !== 'string' || !/^[A-Za-z0-9_-]{22}$/.test(leaseId)) {
    throw new PermitCallError(`leaseId must be the 22 characters an acquire answered, got ${show(leaseId)}`, 'leaseId');
  }
  return leaseId;
}

function checkEntries(entries: unknown): void {
  if (!Array.isArray(entries) || entries.length === 0) {
    throw new PermitCallError(`entries must be a non-empty list of { key, value }, got ${show(entries)}`, 'entries');
  }
  if (entries.length > MAX_ENTRIES) {
    throw new PermitCallError(`entries has ${entries.length} entries; at most ${MAX_ENTRIES}`, 'entries');
  }
  entries.forEach((e: unknown, j) => {
    if (typeof e !== 'object' || e === null || Array.isArray(e)) {
      throw new PermitCallError(`entries[${j}] must be an object { key, value }, got ${show(e)}`, `entries[${j}]`);
    }
    for (const part of ['key', 'value'] as const) {
      const text = (e as Record<string, unknown>)[part];
      if (typeof text !== 'string' || text.length === 0 || text.length > MAX_ENTRY_LENGTH) {
        throw new PermitCallError(
          `entries[${j}].${part} must be a string of 1 to ${MAX_ENTRY_LENGTH} characters, got ${show(text)}`,
          `entries[${j}].${part}`,
        );
      }
    }
  });
}

/** A request value as a message shows it: bounded, whatever the client sent. */
function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'number') return String(value);
  if (Array.isArray(value)) return `a list of ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'an object';
  if (typeof value === 'string') {
    const text = JSON.stringify(value.length > 64 ? value.slice(0, 64) : value);
    return value.length > 64 ? `${text.slice(0, -1)}…" (${value.length} characters)` : text;
  }
  return typeof value;
}
