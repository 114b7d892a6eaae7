import { createHash } from 'node:crypto';
import type { ConcurrencyPolicy, Policy } from 'floodgate';
import { type DescriptorConfig, type DomainConfig, ENVOY_UNITS, type ServiceConfig } from './config.js';
import { PrefixTrie } from './prefix-trie.js';
import type { DecisionStats, Tally } from './stats.js';

/** Most entries in one descriptor of the HTTP API. */
export const MAX_ENTRIES = 16;
/** Longest descriptor key or value of the HTTP API, in characters. */
export const MAX_ENTRY_LENGTH = 1024;
/** A counter key longer than this is replaced by its SHA-256 (keys of long values, in gRPC requests). */
const MAX_KEY_CHARS = 8192;

/**
 * A counter key within bounds: one longer than {@link MAX_KEY_CHARS} (the entries of a long `:path`, say)
 * is held by its SHA-256, behind a `|` that no key built from entries starts with.
 */
export function boundedKey(key: string): string {
  return key.length > MAX_KEY_CHARS ? `|#${createHash('sha256').update(key).digest('base64url')}` : key;
}

/** One entry of a request descriptor: `remote_address = 10.0.0.1`. */
export interface DescriptorEntry {
  readonly key: string;
  readonly value: string;
}

/**
 * Envoy's `RateLimitResponse.RateLimit.Unit` number of each unit name (rls.proto: WEEK is 7, after YEAR).
 * A Map: a unit name from a request or a config must not find what an object inherits.
 */
export const ENVOY_UNIT_NUMBERS: ReadonlyMap<string, number> = new Map([
  ['second', 1],
  ['minute', 2],
  ['hour', 3],
  ['day', 4],
  ['month', 5],
  ['year', 6],
  ['week', 7],
]);

/** A limit in envoyproxy/ratelimit's terms: how it is reported as `current_limit`, and its window. */
export interface EnvoyLimit {
  readonly requestsPerUnit: number;
  /** Envoy's unit number (see {@link ENVOY_UNIT_NUMBERS}); 0 for an unlimited rule without a unit. */
  readonly unit: number;
  /** The unit's length, ms (0 when there is no unit). */
  readonly windowMs: number;
  /** `rate_limit.name`, reported as `current_limit.name` only when the config gives it. */
  readonly name: string | undefined;
  /** envoyproxy/ratelimit's `quota_mode` of the rule (see engine.ts's `overLimit`). */
  readonly quotaMode?: boolean;
}

/** The `rate_limit` of a rule in envoyproxy/ratelimit's format. */
export interface EnvoyRule extends EnvoyLimit {
  /** Names of the limits this rule replaces when both apply to one request. */
  readonly replaces: readonly string[];
  /** `requests_per_unit: 0`: every call is over the limit. */
  readonly denyAll: boolean;
}

/** The Envoy view of a limit of `requestsPerUnit` per `unit` (a unit name). */
export function envoyLimit(requestsPerUnit: number, unit: string | undefined, name: string | undefined): EnvoyLimit {
  return {
    requestsPerUnit,
    unit: unit === undefined ? 0 : (ENVOY_UNIT_NUMBERS.get(unit) ?? 0),
    windowMs: unit === undefined ? 0 : (ENVOY_UNITS.get(unit) ?? 0),
    name,
  };
}

/** A compiled descriptor rule: what a descriptor's entries lead to. */
export interface Rule {
  readonly domain: string;
  /** Human-readable path of the rule, stable across reloads: `path=/login > remote_address`. */
  readonly label: string;
  /** Frozen, reused for every call: the limiter caches compiled policies per array. */
  readonly policies: readonly Policy[];
  /** One tally per policy, in order. */
  readonly tallies: readonly Tally[];
  /** The rule's concurrency limit: permits per descriptor value (see permits.ts). */
  readonly concurrency: ConcurrencyPolicy | undefined;
  readonly shadow: boolean;
  readonly unlimited: boolean;
  /** Counter key part of this level: `undefined` when each value counts apart. */
  readonly sharedValue: string | undefined;
  /** Rules of the next entry. */
  readonly children: Level;
  /** Line in the config file. */
  readonly line: number;
  /** The config file, when the config was read from several. */
  readonly file: string | undefined;
  /** The rule's limit in envoyproxy/ratelimit's format (domains of that format). */
  readonly envoy: EnvoyRule | undefined;
  /** Counts of a rule that denies every call (`requests_per_unit: 0`). */
  readonly denyTally: Tally | undefined;
  /**
   * `charge_on_stream_done`: a call that carries its own cost (Envoy's stream-done call) is charged it
   * past the limit as a debt and answered OK; any other call only checks.
   */
  readonly chargeOnStreamDone: boolean;
}

/**
 * The prefix rules of one key, in a trie: matching a value walks it once, linear in its length however
 * many rules and distinct prefix lengths there are (a config of 50,000 `path: /p123/*` rules, or 1,000
 * prefix lengths against values of 990 characters, costs one pass over the value).
 */
export class Prefixes {
  private readonly rules = new PrefixTrie<Rule>();

  add(prefix: string, rule: Rule): void {
    this.rules.set(prefix, rule);
  }

  /** The rule of the longest prefix of `value`. */
  match(value: string): Rule | undefined {
    return this.rules.longest(value);
  }
}

/**
 * True when `value` matches a wildcard pattern split on its `*`s (`parts`, at least two): each `*` stands
 * for any run of characters, an empty one too. The first part must start the value, the last end it,
 * and the others follow in order in between, each taken at its first place (which leaves the most room
 * for the rest, so a match is never missed).
 */
export function wildcardMatch(parts: readonly string[], value: string): boolean {
  const first = parts[0] as string;
  const last = parts[parts.length - 1] as string;
  if (value.length < first.length + last.length || !value.startsWith(first) || !value.endsWith(last)) return false;
  let at = first.length;
  const end = value.length - last.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i] as string;
    const found = value.indexOf(part, at);
    if (found === -1 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

/**
 * The wildcard rules of one key in envoyproxy/ratelimit's format: a value with `*` anywhere matches as
 * that service matches it, and of several that match, the one written first wins. Patterns with one
 * trailing `*` (most of them) are looked up by prefix, in a trie walked once per value; the others are
 * tried in order, each until one written earlier has matched.
 */
export class Wildcards {
  private readonly prefixes = new PrefixTrie<{ rule: Rule; order: number }>();
  private readonly patterns: { parts: string[]; rule: Rule; order: number }[] = [];
  private count = 0;

  add(pattern: string, rule: Rule): void {
    const order = this.count++;
    const parts = pattern.split('*');
    if (parts.length === 2 && parts[1] === '') {
      const prefix = parts[0] as string;
      if (this.prefixes.has(prefix)) return;
      this.prefixes.set(prefix, { rule, order });
    } else {
      this.patterns.push({ parts, rule, order });
    }
  }

  /** The first-written wildcard rule that matches `value`. */
  match(value: string): Rule | undefined {
    let best: { rule: Rule; order: number } | undefined;
    this.prefixes.prefixesOf(value, (found) => {
      if (best === undefined || found.order < best.order) best = found;
    });
    for (const p of this.patterns) {
      if (best !== undefined && p.order > best.order) break;
      if (wildcardMatch(p.parts, value)) return p.rule;
    }
    return (best as { rule: Rule } | undefined)?.rule;
  }
}

/** The rules of one nesting level, indexed for matching. */
export class Level {
  /** key → value → rule, for exact values. */
  readonly exact = new Map<string, Map<string, Rule>>();
  /** key → prefix rules. */
  readonly prefixes = new Map<string, Prefixes>();
  /** key → wildcard rules of envoyproxy/ratelimit's format. */
  readonly wildcards = new Map<string, Wildcards>();
  /** key → rule matching any value. */
  readonly any = new Map<string, Rule>();

  /**
   * The most specific rule for an entry: exact value, then longest prefix (or, in envoyproxy/ratelimit's
   * format, the first wildcard written that matches), then any value.
   */
  match(key: string, value: string): Rule | undefined {
    const exact = this.exact.get(key)?.get(value);
    if (exact !== undefined) return exact;
    const rule = this.prefixes.get(key)?.match(value) ?? this.wildcards.get(key)?.match(value);
    if (rule !== undefined) return rule;
    return this.any.get(key);
  }
}

/** A domain's compiled rules. */
export interface CompiledDomain {
  readonly domain: string;
  /** `envoy` for a domain of envoyproxy/ratelimit's format: its counting and answers. */
  readonly format: 'floodgate' | 'envoy';
  readonly shadow: boolean;
  readonly root: Level;
  /** Every rule of the domain, depth first (for metrics and listings). */
  readonly rules: readonly Rule[];
  /** Descriptors of this domain that matched no rule with policies. */
  readonly unmatched: Tally;
}

/** Compiles a config into per-domain matching trees. */
export function compileRules(config: ServiceConfig, stats: DecisionStats): Map<string, CompiledDomain> {
  const domains = new Map<string, CompiledDomain>();
  for (const d of config.domains) domains.set(d.domain, compileDomain(d, stats));
  return domains;
}

function compileDomain(d: DomainConfig, stats: DecisionStats): CompiledDomain {
  const rules: Rule[] = [];
  const format = d.format ?? 'floodgate';
  const root = compileLevel(d.domain, format, d.descriptors, d.shadow, '', rules, stats);
  return { domain: d.domain, format, shadow: d.shadow, root, rules, unmatched: stats.unmatchedTally(d.domain) };
}

/** Policy label of the counts of a rule that denies every call. */
const DENY_ALL_LABEL = 'requests-per-unit-0';

function compileLevel(
  domain: string,
  format: 'floodgate' | 'envoy',
  descriptors: readonly DescriptorConfig[],
  shadow: boolean,
  parentLabel: string,
  out: Rule[],
  stats: DecisionStats,
): Level {
  const level = new Level();
  for (const d of descriptors) {
    const own = d.value === undefined ? d.key : `${d.key}=${d.value}`;
    const label = parentLabel === '' ? own : `${parentLabel} > ${own}`;
    const effectiveShadow = d.shadow ?? shadow;
    const envoyWildcard = format === 'envoy' && d.value?.includes('*') === true;
    const wildcard = d.value === undefined || d.value.endsWith('*') || envoyWildcard;
    const e = d.envoy;
    const envoy: EnvoyRule | undefined =
      e === undefined
        ? undefined
        : {
            ...envoyLimit(e.requestsPerUnit, e.unit, e.name),
            replaces: e.replaces,
            denyAll: !d.unlimited && e.unit !== undefined && e.requestsPerUnit === 0,
            ...(e.quotaMode === true ? { quotaMode: true } : {}),
          };
    const rule: Rule = {
      domain,
      label,
      policies: Object.freeze([...d.policies]),
      tallies: d.policies.map((p) => stats.tally(domain, label, p.name)),
      concurrency: d.concurrency,
      shadow: effectiveShadow,
      unlimited: d.unlimited,
      sharedValue: d.shared && wildcard ? (d.value ?? '*') : undefined,
      children: new Level(),
      line: d.line,
      file: d.file,
      envoy,
      denyTally: envoy?.denyAll ? stats.tally(domain, label, DENY_ALL_LABEL) : undefined,
      chargeOnStreamDone: d.chargeOnStreamDone === true,
    };
    out.push(rule);
    (rule as { children: Level }).children = compileLevel(
      domain,
      format,
      d.descriptors,
      effectiveShadow,
      label,
      out,
      stats,
    );
    if (d.value === undefined) {
      level.any.set(d.key, rule);
    } else if (envoyWildcard) {
      let wildcards = level.wildcards.get(d.key);
      if (wildcards === undefined) {
        wildcards = new Wildcards();
        level.wildcards.set(d.key, wildcards);
      }
      wildcards.add(d.value, rule);
    } else if (d.value.endsWith('*')) {
      let prefixes = level.prefixes.get(d.key);
      if (prefixes === undefined) {
        prefixes = new Prefixes();
        level.prefixes.set(d.key, prefixes);
      }
      prefixes.add(d.value.slice(0, -1), rule);
    } else {
      let values = level.exact.get(d.key);
      if (values === undefined) {
        values = new Map();
        level.exact.set(d.key, values);
      }
      values.set(d.value, rule);
    }
  }
  return level;
}

const SPECIAL = /[\\|=]/;

function escapePart(s: string): string {
  return SPECIAL.test(s) ? s.replace(/[\\|=]/g, '\\$&') : s;
}

/** What a descriptor matched: its rule, and its key in the limiter. */
export interface Match {
  readonly rule: Rule;
  /**
   * `domain|key=value|key=value`, with `\`, `|` and `=` escaped so two descriptors never share a key by
   * accident; a shared wildcard rule puts `\*` and its pattern in place of the value.
   */
  readonly key: string;
}

/** The rule a descriptor's entries lead to and its key, or `undefined` when some entry matches no rule. */
export function matchDescriptor(domain: CompiledDomain, entries: readonly DescriptorEntry[]): Match | undefined {
  let level = domain.root;
  let rule: Rule | undefined;
  let key = escapePart(domain.domain);
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i] as DescriptorEntry;
    rule = level.match(entry.key, entry.value);
    if (rule === undefined) return undefined;
    const shared = rule.sharedValue;
    key += `|${escapePart(entry.key)}=${shared === undefined ? escapePart(entry.value) : `\\*${escapePart(shared)}`}`;
    level = rule.children;
  }
  return rule === undefined ? undefined : { rule, key };
}

/** Key of a descriptor that matched no rule but carries its own limit: every entry counts apart. */
export function plainKey(domain: string, entries: readonly DescriptorEntry[]): string {
  let key = escapePart(domain);
  for (const e of entries) key += `|${escapePart(e.key)}=${escapePart(e.value)}`;
  return key;
}
