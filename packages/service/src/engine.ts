import {
  createLimiter,
  type Decision,
  fixedWindow,
  isSyncStore,
  type Limiter,
  type Policy,
  type PolicyDecision,
  type Store,
  validateCost,
} from 'floodgate';
import { ENVOY_UNITS, type ServiceConfig } from './config.js';
import {
  type CompiledDomain,
  compileRules,
  type DescriptorEntry,
  matchDescriptor,
  plainKey,
  type Rule,
} from './rules.js';
import { type DecisionStats, OVERRIDE_POLICY_LABEL, type Tally } from './stats.js';

/** Most descriptors in one request. */
export const MAX_DESCRIPTORS = 64;
/** Most entries in one descriptor. */
export const MAX_ENTRIES = 16;
/** Longest descriptor key or value, in characters. */
export const MAX_ENTRY_LENGTH = 1024;
/** Largest `requestsPerUnit` of a request override. */
export const MAX_OVERRIDE_REQUESTS_PER_UNIT = 1e12;
/** Distinct request overrides whose compiled policies are kept; past it the cache starts over. */
const MAX_CACHED_OVERRIDES = 1024;

/** What a call does: `limit` decides and consumes, `check` and `status` change nothing, `reset` forgets. */
export type Mode = 'limit' | 'check' | 'status' | 'reset';

/** How the engine's limiter treats a failing store. */
export interface EngineOptions {
  /** Longest wait for the store on one call, ms; unset for no timer. Ignored by synchronous stores. */
  readonly storeTimeoutMs?: number | undefined;
  /** What a call gets when the store fails: an error (`throw`), admitted (`open`) or denied (`closed`). @default 'throw' */
  readonly failure?: 'throw' | 'open' | 'closed' | undefined;
}

/** A limit sent with a descriptor instead of the configured one (Envoy's descriptor `limit`). */
export interface LimitOverride {
  readonly requestsPerUnit: number;
  /** One of second, minute, hour, day, week, month, year. */
  readonly unit: string;
}

/** One descriptor of a request. */
export interface DescriptorRequest {
  readonly entries: readonly DescriptorEntry[];
  /** This descriptor's cost, instead of the request's. */
  readonly cost?: number | undefined;
  readonly limit?: LimitOverride | undefined;
}

/** A request: a domain and descriptors, each decided on its own (as Envoy's rate limit service does). */
export interface DecisionRequest {
  readonly domain: string;
  readonly descriptors: readonly DescriptorRequest[];
  /** Cost of every descriptor that does not give its own. @default 1 */
  readonly cost?: number | undefined;
}

/** The answer for one descriptor. */
export interface DescriptorOutcome {
  /** `OVER_LIMIT` only when denied by a rule that is not in shadow mode. */
  readonly code: 'OK' | 'OVER_LIMIT';
  /** True when a rule with policies (or an unlimited rule, or a request override) applied. */
  readonly matched: boolean;
  /** The rule's label, when one matched. */
  readonly rule: string | undefined;
  readonly shadow: boolean;
  readonly unlimited: boolean;
  /** The policies applied (for headers), when any. */
  readonly policies: readonly Policy[] | undefined;
  /** The limiter's decision, when policies applied (not for `reset`). */
  readonly decision: Decision | undefined;
}

/** A request the service refuses: bad input, named by its field. */
export class RequestError extends Error {
  override readonly name = 'RequestError';
  constructor(
    readonly kind: 'invalid',
    message: string,
    /** The request field at fault: `descriptors[2].entries[0].value`. */
    readonly field: string,
  ) {
    super(message);
  }
}

const UNIT_MS = ENVOY_UNITS;

/** Units accepted in a {@link LimitOverride}. */
export const OVERRIDE_UNITS: readonly string[] = [...UNIT_MS.keys()];

interface Planned {
  readonly rule: Rule | undefined;
  readonly key: string;
  readonly policies: readonly Policy[] | undefined;
  readonly tallies: readonly Tally[] | undefined;
  readonly shadow: boolean;
  readonly cost: number;
}

const UNMATCHED: DescriptorOutcome = Object.freeze({
  code: 'OK',
  matched: false,
  rule: undefined,
  shadow: false,
  unlimited: false,
  policies: undefined,
  decision: undefined,
});

/**
 * Turns requests into decisions under one config: matches each descriptor to its rule, then asks the
 * limiter. One engine per loaded config; all engines of a service share the store, so a reload keeps
 * every counter.
 */
export class Engine {
  readonly limiter: Limiter;
  readonly domains: ReadonlyMap<string, CompiledDomain>;
  /** True when the store decides synchronously: callers may skip promises entirely. */
  readonly sync: boolean;
  private readonly overrides = new Map<string, readonly Policy[]>();
  private readonly overrideTally: Map<string, Tally> = new Map();

  constructor(
    readonly config: ServiceConfig,
    store: Store,
    private readonly stats: DecisionStats,
    options: EngineOptions = {},
  ) {
    this.sync = isSyncStore(store);
    this.limiter = createLimiter({
      store,
      prefix: config.prefix,
      ...(options.storeTimeoutMs === undefined || this.sync ? {} : { timeoutMs: options.storeTimeoutMs }),
      ...(options.failure === undefined ? {} : { failure: options.failure }),
    });
    this.domains = compileRules(config, stats);
  }

  /** Decides synchronously; only when {@link sync} is true. Throws {@link RequestError} or store errors. */
  decideSync(request: DecisionRequest, mode: Mode): DescriptorOutcome[] {
    const started = performance.now();
    const plan = this.plan(request, mode);
    const out = new Array<DescriptorOutcome>(plan.length);
    const limiter = this.limiter;
    for (let i = 0; i < plan.length; i++) {
      const p = plan[i] as Planned;
      if (p.policies === undefined) {
        out[i] = p.rule === undefined ? UNMATCHED : unlimitedOutcome(p.rule);
        continue;
      }
      const options = { policies: p.policies, cost: p.cost };
      let decision: Decision | undefined;
      if (mode === 'limit') decision = limiter.limitSync(p.key, options);
      else if (mode === 'check') decision = limiter.checkSync(p.key, options);
      else if (mode === 'status') decision = limiter.statusSync(p.key, options);
      else limiter.resetSync(p.key, options);
      out[i] = this.outcome(p, decision, mode);
    }
    this.stats.latency.record(performance.now() - started);
    return out;
  }

  /** Decides all descriptors concurrently (one round trip to the store in the common case). */
  async decide(request: DecisionRequest, mode: Mode): Promise<DescriptorOutcome[]> {
    if (this.sync) return this.decideSync(request, mode);
    const started = performance.now();
    const plan = this.plan(request, mode);
    const limiter = this.limiter;
    const outcomes = await Promise.all(
      plan.map(async (p): Promise<DescriptorOutcome> => {
        if (p.policies === undefined) return p.rule === undefined ? UNMATCHED : unlimitedOutcome(p.rule);
        const options = { policies: p.policies, cost: p.cost };
        let decision: Decision | undefined;
        if (mode === 'limit') decision = await limiter.limit(p.key, options);
        else if (mode === 'check') decision = await limiter.check(p.key, options);
        else if (mode === 'status') decision = await limiter.status(p.key, options);
        else await limiter.reset(p.key, options);
        return this.outcome(p, decision, mode);
      }),
    );
    this.stats.latency.record(performance.now() - started);
    return outcomes;
  }

  private outcome(p: Planned, decision: Decision | undefined, mode: Mode): DescriptorOutcome {
    let code: 'OK' | 'OVER_LIMIT' = 'OK';
    if (decision !== undefined && !decision.allowed) code = p.shadow ? 'OK' : 'OVER_LIMIT';
    if (decision !== undefined) {
      if (mode === 'limit') count(decision, p.tallies as readonly Tally[], p.shadow);
      if (decision.reason === 'degraded') this.stats.degraded++;
    }
    return {
      code,
      matched: true,
      rule: p.rule?.label,
      shadow: p.shadow,
      unlimited: false,
      policies: p.policies,
      decision,
    };
  }

  /** Validates the whole request and matches every descriptor before the store is touched. */
  private plan(request: DecisionRequest, mode: Mode): Planned[] {
    const domainName = request.domain;
    if (typeof domainName !== 'string' || domainName.length === 0) {
      throw new RequestError(
        'invalid',
        `domain is required: a non-empty string, got ${showValue(domainName)}`,
        'domain',
      );
    }
    const descriptors = request.descriptors;
    if (!Array.isArray(descriptors) || descriptors.length === 0) {
      throw new RequestError(
        'invalid',
        `descriptors is required: a non-empty list, got ${showValue(descriptors)}`,
        'descriptors',
      );
    }
    if (descriptors.length > MAX_DESCRIPTORS) {
      throw new RequestError(
        'invalid',
        `at most ${MAX_DESCRIPTORS} descriptors per request, got ${descriptors.length}`,
        'descriptors',
      );
    }
    const requestCost = request.cost ?? 1;
    checkCost(requestCost, 'cost');
    const domain = this.domains.get(domainName);
    // An unknown domain is answered OK, unmatched, as Envoy expects of a rate limit service; the HTTP
    // API refuses it before calling the engine.
    if (domain === undefined) this.stats.unknownDomain++;
    const plan = new Array<Planned>(descriptors.length);
    for (let i = 0; i < descriptors.length; i++) {
      const d = descriptors[i] as DescriptorRequest;
      checkEntries(d, i);
      const cost = d.cost ?? requestCost;
      if (d.cost !== undefined) checkCost(d.cost, `descriptors[${i}].cost`);
      if (domain === undefined) {
        plan[i] = { rule: undefined, key: '', policies: undefined, tallies: undefined, shadow: false, cost };
        continue;
      }
      const match = matchDescriptor(domain, d.entries);
      const rule = match?.rule;
      if (d.limit !== undefined) {
        const policies = this.override(d.limit, i);
        const tally = this.overrideTallyOf(domain.domain);
        const key = match?.key ?? plainKey(domain.domain, d.entries);
        plan[i] = { rule, key, policies, tallies: [tally], shadow: rule?.shadow ?? domain.shadow, cost };
      } else if (rule === undefined || (rule.policies.length === 0 && !rule.unlimited)) {
        if (mode === 'limit') domain.unmatched.allowed++;
        plan[i] = { rule: undefined, key: '', policies: undefined, tallies: undefined, shadow: false, cost };
      } else if (rule.unlimited) {
        plan[i] = { rule, key: '', policies: undefined, tallies: undefined, shadow: rule.shadow, cost };
      } else {
        plan[i] = {
          rule,
          key: (match as { key: string }).key,
          policies: rule.policies,
          tallies: rule.tallies,
          shadow: rule.shadow,
          cost,
        };
      }
    }
    return plan;
  }

  /** The policy of a request override; one frozen array per distinct limit, so the limiter compiles it once. */
  private override(limit: LimitOverride, index: number): readonly Policy[] {
    const field = `descriptors[${index}].limit`;
    const unitMs = typeof limit.unit === 'string' ? UNIT_MS.get(limit.unit) : undefined;
    if (unitMs === undefined) {
      throw new RequestError(
        'invalid',
        `${field}.unit must be one of ${OVERRIDE_UNITS.join(', ')}, got ${showValue(limit.unit)}`,
        `${field}.unit`,
      );
    }
    const n = limit.requestsPerUnit;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_OVERRIDE_REQUESTS_PER_UNIT) {
      throw new RequestError(
        'invalid',
        `${field}.requestsPerUnit must be an integer from 1 to 1e12, got ${showValue(n)}`,
        `${field}.requestsPerUnit`,
      );
    }
    const id = `${n}/${limit.unit}`;
    let policies = this.overrides.get(id);
    if (policies === undefined) {
      policies = Object.freeze([fixedWindow({ limit: n, windowMs: unitMs, name: `override-${n}-per-${limit.unit}` })]);
      // Bounded: overrides come from requests.
      if (this.overrides.size >= MAX_CACHED_OVERRIDES) this.overrides.clear();
      this.overrides.set(id, policies);
    }
    return policies;
  }

  private overrideTallyOf(domain: string): Tally {
    let tally = this.overrideTally.get(domain);
    if (tally === undefined) {
      tally = this.stats.tally(domain, '(request override)', OVERRIDE_POLICY_LABEL);
      this.overrideTally.set(domain, tally);
    }
    return tally;
  }
}

function unlimitedOutcome(rule: Rule): DescriptorOutcome {
  return {
    code: 'OK',
    matched: true,
    rule: rule.label,
    shadow: rule.shadow,
    unlimited: true,
    policies: undefined,
    decision: undefined,
  };
}

/** Counts a decision: every policy of an admitted call admitted it; a denial counts on the policies that denied. */
function count(decision: Decision, tallies: readonly Tally[], shadow: boolean): void {
  const parts = decision.policies;
  if (decision.allowed) {
    for (let i = 0; i < tallies.length; i++) (tallies[i] as Tally).allowed++;
    return;
  }
  for (let i = 0; i < parts.length; i++) {
    if ((parts[i] as PolicyDecision).allowed) continue;
    const tally = tallies[i];
    if (tally === undefined) continue;
    if (shadow) tally.shadowDenied++;
    else tally.denied++;
  }
}

/** The library's one cost domain (0, or MIN_COST to MAX_COST), reported against the request's field. */
function checkCost(cost: unknown, field: string): void {
  try {
    validateCost(cost, field);
  } catch (error) {
    throw new RequestError('invalid', (error as Error).message, field);
  }
}

/**
 * A request value as an error message shows it: JSON, cut to 64 characters, so a message never grows
 * with what a client sent; `NaN` and infinities by name, lists and objects by kind.
 */
export function showValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'number') return String(value);
  if (Array.isArray(value)) return `a list of ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'an object';
  if (typeof value === 'string') {
    const text = JSON.stringify(value.length > 64 ? value.slice(0, 64) : value);
    return value.length > 64 ? `${text.slice(0, -1)}…" (${value.length} characters)` : text;
  }
  return typeof value === 'bigint' ? `${value}n` : String(value);
}

function checkEntries(d: DescriptorRequest, index: number): void {
  const entries = d?.entries;
  const field = `descriptors[${index}].entries`;
  if (!Array.isArray(entries) || entries.length === 0) {
    throw new RequestError(
      'invalid',
      `${field} must be a non-empty list of { key, value }, got ${showValue(entries)}`,
      field,
    );
  }
  if (entries.length > MAX_ENTRIES) {
    throw new RequestError('invalid', `${field} has ${entries.length} entries; at most ${MAX_ENTRIES}`, field);
  }
  for (let j = 0; j < entries.length; j++) {
    const e = entries[j] as DescriptorEntry;
    if (typeof e !== 'object' || e === null || Array.isArray(e)) {
      throw new RequestError(
        'invalid',
        `${field}[${j}] must be an object { key, value }, got ${showValue(e)}`,
        `${field}[${j}]`,
      );
    }
    checkText(e.key, `${field}[${j}].key`);
    checkText(e.value, `${field}[${j}].value`);
  }
}

function checkText(text: unknown, field: string): void {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_ENTRY_LENGTH) {
    throw new RequestError(
      'invalid',
      typeof text === 'string'
        ? `${field} must be 1 to ${MAX_ENTRY_LENGTH} characters, got ${text.length}`
        : `${field} must be a string, got ${showValue(text)}`,
      field,
    );
  }
}
