import type { Policy } from 'floodgate';
import type { DescriptorConfig, DomainConfig, ServiceConfig } from './config.js';
import type { DecisionStats, Tally } from './stats.js';

/** One entry of a request descriptor: `remote_address = 10.0.0.1`. */
export interface DescriptorEntry {
  readonly key: string;
  readonly value: string;
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
  readonly shadow: boolean;
  readonly unlimited: boolean;
  /** Counter key part of this level: `undefined` when each value counts apart. */
  readonly sharedValue: string | undefined;
  /** Rules of the next entry. */
  readonly children: Level;
  /** Line in the config file. */
  readonly line: number;
}

/**
 * The prefix rules of one key, by prefix, with the distinct prefix lengths longest first: matching a
 * value looks up one prefix of it per distinct length, however many rules there are, instead of trying
 * every prefix (a config of 50,000 `path: /p123/*` rules would cost 50,000 comparisons per entry).
 */
export class Prefixes {
  private readonly rules = new Map<string, Rule>();
  private lengths: number[] = [];

  add(prefix: string, rule: Rule): void {
    if (!this.rules.has(prefix) && !this.lengths.includes(prefix.length)) {
      this.lengths.push(prefix.length);
      this.lengths.sort((a, b) => b - a);
    }
    this.rules.set(prefix, rule);
  }

  /** The rule of the longest prefix of `value`. */
  match(value: string): Rule | undefined {
    const lengths = this.lengths;
    for (let i = 0; i < lengths.length; i++) {
      const length = lengths[i] as number;
      if (length > value.length) continue;
      const rule = this.rules.get(length === value.length ? value : value.slice(0, length));
      if (rule !== undefined) return rule;
    }
    return undefined;
  }
}

/** The rules of one nesting level, indexed for matching. */
export class Level {
  /** key → value → rule, for exact values. */
  readonly exact = new Map<string, Map<string, Rule>>();
  /** key → prefix rules. */
  readonly prefixes = new Map<string, Prefixes>();
  /** key → rule matching any value. */
  readonly any = new Map<string, Rule>();

  /** The most specific rule for an entry: exact value, then longest prefix, then any value. */
  match(key: string, value: string): Rule | undefined {
    const exact = this.exact.get(key)?.get(value);
    if (exact !== undefined) return exact;
    const rule = this.prefixes.get(key)?.match(value);
    if (rule !== undefined) return rule;
    return this.any.get(key);
  }
}

/** A domain's compiled rules. */
export interface CompiledDomain {
  readonly domain: string;
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
  const root = compileLevel(d.domain, d.descriptors, d.shadow, '', rules, stats);
  return { domain: d.domain, shadow: d.shadow, root, rules, unmatched: stats.unmatchedTally(d.domain) };
}

function compileLevel(
  domain: string,
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
    const wildcard = d.value === undefined || d.value.endsWith('*');
    const rule: Rule = {
      domain,
      label,
      policies: Object.freeze([...d.policies]),
      tallies: d.policies.map((p) => stats.tally(domain, label, p.name)),
      shadow: effectiveShadow,
      unlimited: d.unlimited,
      sharedValue: d.shared && wildcard ? (d.value ?? '*') : undefined,
      children: new Level(),
      line: d.line,
    };
    out.push(rule);
    (rule as { children: Level }).children = compileLevel(domain, d.descriptors, effectiveShadow, label, out, stats);
    if (d.value === undefined) {
      level.any.set(d.key, rule);
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
