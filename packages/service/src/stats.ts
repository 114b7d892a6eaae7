import { type DeniedKey, DeniedKeys, LatencyHistogram, type LatencySummary } from './live-stats.js';

/** Running counts of one policy of one rule; plain fields, so the hot path only increments numbers. */
export class Tally {
  allowed = 0;
  denied = 0;
  /** Denied by a rule in shadow mode: answered OK, counted here. */
  shadowDenied = 0;
}

/** The labels of a {@link Tally}: all come from the config, never from request data. */
export interface TallyLabels {
  readonly domain: string;
  readonly rule: string;
  readonly policy: string;
}

/** Policy label of decisions made with a limit sent in the request (Envoy's descriptor `limit`). */
export const OVERRIDE_POLICY_LABEL = 'request-override';

/**
 * The tenant of a counter key built from a descriptor's entries (`domain|key=value|…`, where `\\`, `|`
 * and `=` inside a part are escaped by a backslash): the value of its `tenant` entry, unescaped. A key
 * held by its digest has none.
 */
export function tenantOfKey(key: string): string | undefined {
  if (!key.includes('tenant=')) return undefined;
  let part = 0;
  let entryKey = '';
  let value = '';
  let inValue = false;
  for (let i = 0; i <= key.length; i++) {
    const c = key[i];
    if (c === '\\') {
      const next = key[++i] ?? '';
      if (inValue) value += next;
      else entryKey += next;
    } else if (c === '|' || c === undefined) {
      if (part > 0 && inValue && entryKey === 'tenant') return value === '' ? undefined : value;
      part++;
      entryKey = '';
      value = '';
      inValue = false;
    } else if (c === '=' && !inValue) {
      inValue = true;
    } else if (inValue) value += c;
    else entryKey += c;
  }
  return undefined;
}

/** Samples (about one a second) per epoch of the denied-keys sketch. */
const DENIED_KEYS_EPOCH_SAMPLES = 30;

/** Store health, latency and the most denied keys, as served by the live stats endpoint. */
export interface LiveStats {
  readonly storeErrorsPerSecond: number;
  readonly storeErrorsTotal: number;
  readonly degradedPerSecond: number;
  readonly degradedTotal: number;
  readonly latency: LatencySummary;
  /** Most denied first; counts may be over by `error` (a bounded sketch, not a list of every key). */
  readonly deniedKeys: readonly DeniedKey[];
  /** Denials the sketch counted over the same span. */
  readonly deniedKeysTotal: number;
  /** The most denied tenants (a descriptor's `tenant` entry), as `deniedKeys`. */
  readonly deniedTenants: readonly DeniedKey[];
}

/** Rates over the window asked for, and totals, as served by the live stats endpoint. */
export interface DecisionRate {
  allowedPerSecond: number;
  deniedPerSecond: number;
  shadowDeniedPerSecond: number;
  allowedTotal: number;
  deniedTotal: number;
  shadowDeniedTotal: number;
}

/** The rates of one policy: a decision counts under every policy it admitted or that denied it. */
export interface PolicyRate extends TallyLabels, DecisionRate {}

/**
 * Decision counts by (domain, rule, policy), kept across config reloads so counters stay monotonic, plus
 * a short history of totals for per-second rates. The label set is bounded by the config.
 */
export class DecisionStats {
  private readonly tallies = new Map<string, { labels: TallyLabels; tally: Tally }>();
  /** Descriptors of a known domain that matched no rule with policies. */
  readonly unmatched = new Map<string, Tally>();
  /**
   * Every decision once, whatever its number of policies (a decision under three policies counts three
   * times in the policies' tallies, so their sum is not a count of decisions).
   */
  readonly decisions = new Tally();
  /** Requests naming a domain the config does not define. */
  unknownDomain = 0;
  /** gRPC calls over the limit answered OK overall by the global shadow mode. */
  globalShadow = 0;
  /** Decisions made without the store (its failure policy answered: `reason: 'degraded'`). */
  degraded = 0;
  /** Store operations that failed or timed out (fed by the limiter's `storeError` events). */
  storeErrors = 0;
  /** The most denied keys, in bounded memory (fed by the limiter's `decision` events). */
  readonly deniedKeys = new DeniedKeys();
  /**
   * The most denied tenants (the value of a descriptor's `tenant` entry), in bounded memory: a tenant
   * counts the denials of all its keys.
   */
  readonly deniedTenants = new DeniedKeys();
  /** Time the engine takes per request (limiter and store), per second. */
  readonly latency = new LatencyHistogram();
  private history: {
    atMs: number;
    totals: Map<string, [number, number, number]>;
    decisions: [number, number, number];
    storeErrors: number;
    degraded: number;
  }[] = [];
  private samples = 0;

  /** The tally of a (domain, rule, policy), created on first use. */
  tally(domain: string, rule: string, policy: string): Tally {
    const id = `${domain}\0${rule}\0${policy}`;
    let entry = this.tallies.get(id);
    if (entry === undefined) {
      entry = { labels: { domain, rule, policy }, tally: new Tally() };
      this.tallies.set(id, entry);
    }
    return entry.tally;
  }

  /** The unmatched-descriptor tally of a known domain. */
  unmatchedTally(domain: string): Tally {
    let tally = this.unmatched.get(domain);
    if (tally === undefined) {
      tally = new Tally();
      this.unmatched.set(domain, tally);
    }
    return tally;
  }

  /** Every tally with its labels. */
  entries(): IterableIterator<{ labels: TallyLabels; tally: Tally }> {
    return this.tallies.values();
  }

  /** Records the current totals; called about once a second. Keeps the last minute. */
  sample(nowMs: number): void {
    // Only tallies that counted something: a config of 50,000 rules keeps a minute of samples, and most
    // rules are idle; a tally missing from a sample had counted nothing then.
    const totals = new Map<string, [number, number, number]>();
    for (const [id, { tally }] of this.tallies) {
      if (tally.allowed !== 0 || tally.denied !== 0 || tally.shadowDenied !== 0) {
        totals.set(id, [tally.allowed, tally.denied, tally.shadowDenied]);
      }
    }
    const { allowed, denied, shadowDenied } = this.decisions;
    this.history.push({
      atMs: nowMs,
      totals,
      decisions: [allowed, denied, shadowDenied],
      storeErrors: this.storeErrors,
      degraded: this.degraded,
    });
    if (this.history.length > 61) this.history = this.history.slice(-61);
    this.latency.rotate();
    // The denied-keys list covers the last 30 to 60 seconds.
    if (++this.samples % DENIED_KEYS_EPOCH_SAMPLES === 0) {
      this.deniedKeys.rotate();
      this.deniedTenants.rotate();
    }
  }

  /**
   * Store health and decision latency over the last `windowSeconds` of samples, and the most denied
   * keys of the last 30 to 60 seconds.
   */
  live(windowSeconds = 1, topKeys = 10): LiveStats {
    const last = this.history[this.history.length - 1];
    const first = this.history[Math.max(0, this.history.length - 1 - windowSeconds)];
    const spanS = last !== undefined && first !== undefined ? (last.atMs - first.atMs) / 1000 : 0;
    const rate = (now: number, before: number) => (spanS > 0 ? round((now - before) / spanS) : 0);
    const denied = this.deniedKeys.top(topKeys);
    const tenants = this.deniedTenants.top(topKeys);
    return {
      storeErrorsPerSecond: rate(last?.storeErrors ?? 0, first?.storeErrors ?? 0),
      storeErrorsTotal: this.storeErrors,
      degradedPerSecond: rate(last?.degraded ?? 0, first?.degraded ?? 0),
      degradedTotal: this.degraded,
      latency: this.latency.summary(Math.max(1, windowSeconds)),
      deniedKeys: denied.keys,
      deniedKeysTotal: denied.total,
      deniedTenants: tenants.keys,
    };
  }

  /**
   * Rates over the last `windowSeconds` of samples (by default the last second): of every decision, each
   * counted once, and per policy.
   */
  rates(windowSeconds = 1): { windowSeconds: number; decisions: DecisionRate; policies: PolicyRate[] } {
    const last = this.history[this.history.length - 1];
    const first = this.history[Math.max(0, this.history.length - 1 - windowSeconds)];
    const spanS = last !== undefined && first !== undefined ? (last.atMs - first.atMs) / 1000 : 0;
    const rate = (tally: Tally, now: readonly number[], before: readonly number[]): DecisionRate => {
      const perSecond = (i: 0 | 1 | 2) => (spanS > 0 ? round(((now[i] ?? 0) - (before[i] ?? 0)) / spanS) : 0);
      return {
        allowedPerSecond: perSecond(0),
        deniedPerSecond: perSecond(1),
        shadowDeniedPerSecond: perSecond(2),
        allowedTotal: tally.allowed,
        deniedTotal: tally.denied,
        shadowDeniedTotal: tally.shadowDenied,
      };
    };
    const policies: PolicyRate[] = [];
    for (const [id, { labels, tally }] of this.tallies) {
      const now =
        last === undefined ? [tally.allowed, tally.denied, tally.shadowDenied] : (last.totals.get(id) ?? NOTHING);
      policies.push({ ...labels, ...rate(tally, now, first?.totals.get(id) ?? NOTHING) });
    }
    const d = this.decisions;
    const decisions = rate(d, last?.decisions ?? [d.allowed, d.denied, d.shadowDenied], first?.decisions ?? NOTHING);
    return { windowSeconds: spanS, decisions, policies };
  }
}

const NOTHING: readonly [number, number, number] = [0, 0, 0];

function round(n: number): number {
  return Math.round(n * 100) / 100;
}
