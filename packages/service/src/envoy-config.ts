import { fixedWindow, type Policy } from 'floodgate';
import {
  type ConfigIssue,
  type DescriptorConfig,
  describe,
  ENVOY_UNITS,
  type EnvoyLimitConfig,
  RuleChecker,
  type Segment,
  STOP,
  type YamlDocument,
} from './config.js';

/**
 * One file of envoyproxy/ratelimit's config format: a domain and its descriptors, as that service reads
 * it (https://github.com/envoyproxy/ratelimit, "The configuration format").
 */
export interface EnvoyFileConfig {
  readonly domain: string;
  /** Line of `domain` in the file. */
  readonly line: number;
  readonly descriptors: readonly DescriptorConfig[];
}

/** Longest descriptor `key`, `value`, limit `name` and `domain` of a file, in characters. */
const MAX_TEXT = 1024;
/** Largest `requests_per_unit`: Envoy's field is a uint32. */
export const MAX_REQUESTS_PER_UNIT = 4_294_967_295;

/**
 * The name of the policy an Envoy-format limit of this unit runs as. A counter is a descriptor and a
 * unit, as in envoyproxy/ratelimit, whose cache keys are the descriptor's entries and the window's start:
 * a reload that changes `requests_per_unit` keeps the counts, one that changes the unit starts afresh,
 * and a limit sent by Envoy with the request counts on the same counter as the configured one.
 */
export function envoyPolicyName(unit: string): string {
  return `envoy-per-${unit}`;
}

/**
 * The fixed window an Envoy-format limit is: aligned to the epoch as envoyproxy/ratelimit's windows are
 * (`now / unit * unit`), counting every call, denied ones too, as it adds every hit before comparing.
 */
export function envoyPolicy(requestsPerUnit: number, unit: string): Policy {
  return fixedWindow({
    limit: requestsPerUnit,
    windowMs: ENVOY_UNITS.get(unit) as number,
    countDenied: true,
    name: envoyPolicyName(unit),
  });
}

/**
 * Checks one file of envoyproxy/ratelimit's format with that service's rules (an empty domain or key, a
 * duplicate descriptor, an unknown field, an invalid unit, a unit on an unlimited limit, an empty or
 * self-naming `replaces`, `share_threshold` without a wildcard, a `requests_per_unit` that is not a
 * uint32) and floodgate's bounds; every problem with its line. `quota_mode` is read as the reference
 * reads it (see engine.ts's `overLimit`); `metadata` is accepted and ignored (the service warns of it).
 */
export function checkEnvoyConfig(
  yaml: YamlDocument,
  file?: string,
): { config?: EnvoyFileConfig; issues: ConfigIssue[] } {
  const checker = new EnvoyChecker(yaml.locator, yaml.sourceOf, file);
  let config: EnvoyFileConfig | undefined;
  try {
    config = checker.file(yaml.data);
  } catch (error) {
    if (error !== STOP) throw error;
  }
  const issues = checker.issues.map((i) => ({ ...i, file }));
  return issues.length > 0 || config === undefined ? { issues } : { config, issues };
}

/** The number of rules in descriptor trees. */
export function countRules(descriptors: readonly DescriptorConfig[]): number {
  let n = 0;
  for (const d of descriptors) n += 1 + countRules(d.descriptors);
  return n;
}

class EnvoyChecker extends RuleChecker {
  constructor(
    locator: YamlDocument['locator'],
    sourceOf: YamlDocument['sourceOf'],
    private readonly fileName: string | undefined,
  ) {
    super(locator, sourceOf);
  }

  file(data: unknown): EnvoyFileConfig | undefined {
    if (data === null || data === undefined) {
      this.issue([], 'the file is empty: it needs `domain` and `descriptors`');
      return undefined;
    }
    const root = this.object(data, []);
    if (root === undefined) return undefined;
    this.known(root, [], ['domain', 'descriptors']);
    const domain =
      root.domain === undefined || root.domain === null ? '' : this.text(root.domain, ['domain'], '`domain`');
    if (domain === null) return undefined;
    if (domain.length === 0 || domain.length > MAX_TEXT) {
      this.issue(
        domain.length === 0 && root.domain === undefined ? [] : ['domain'],
        domain.length === 0
          ? 'a config file cannot have an empty `domain`'
          : `\`domain\` has ${domain.length} characters; at most ${MAX_TEXT}`,
      );
      return undefined;
    }
    const descriptors = this.descriptors(root, [], 1);
    return { domain, line: this.locator(['domain'], true).line, descriptors };
  }

  protected override duplicate(d: DescriptorConfig, first: string): string {
    return `duplicate descriptor: key ${JSON.stringify(d.key)}${d.value === undefined ? ' without a value' : ` and value ${JSON.stringify(d.value)}`} is already defined at ${first}`;
  }

  protected override descriptor(data: unknown, path: Segment[], depth: number): DescriptorConfig | undefined {
    this.countRule(path);
    const o = this.object(data, path);
    if (o === undefined) return undefined;
    this.known(o, path, [
      'key',
      'value',
      'rate_limit',
      'descriptors',
      'shadow_mode',
      'detailed_metric',
      'value_to_metric',
      'share_threshold',
      'quota_mode',
      'metadata',
    ]);
    const key = o.key === undefined || o.key === null ? '' : this.text(o.key, [...path, 'key'], '`key`');
    if (key === null) return undefined;
    if (key.length === 0 || key.length > MAX_TEXT) {
      this.issue(
        o.key === undefined ? path : [...path, 'key'],
        key.length === 0
          ? 'a descriptor has an empty `key`'
          : `\`key\` has ${key.length} characters; at most ${MAX_TEXT}`,
      );
      return undefined;
    }
    let value: string | undefined;
    if (o.value !== undefined && o.value !== null) {
      const text = this.text(o.value, [...path, 'value'], '`value`');
      if (text !== null && text.length > MAX_TEXT) {
        this.issue([...path, 'value'], `\`value\` has ${text.length} characters; at most ${MAX_TEXT}`);
      } else if (text !== null && text.length > 0) {
        value = text;
      }
    }
    const shadow = this.flag(o, 'shadow_mode', path) ?? false;
    // Accepted as the reference reads them; floodgate's metrics never carry descriptor values.
    this.flag(o, 'detailed_metric', path);
    this.flag(o, 'value_to_metric', path);
    const shared = this.flag(o, 'share_threshold', path) ?? false;
    if (shared && (value === undefined || !value.includes('*'))) {
      this.issue(
        [...path, 'share_threshold'],
        `share_threshold can only be used with a wildcard value (one with \`*\`), got ${value === undefined ? 'no value' : JSON.stringify(value)}`,
      );
    }
    const quotaMode = this.flag(o, 'quota_mode', path) === true;
    // Any value, as the reference reads it (a struct it sends back as dynamic metadata): not checked.
    const metadata = o.metadata !== undefined && o.metadata !== null;
    let envoy: EnvoyLimitConfig | undefined;
    let policies: Policy[] = [];
    let unlimited = false;
    if (o.rate_limit !== undefined && o.rate_limit !== null) {
      const limit = this.rateLimit(o.rate_limit, [...path, 'rate_limit']);
      if (limit !== undefined) {
        envoy = quotaMode ? { ...limit.envoy, quotaMode } : limit.envoy;
        unlimited = limit.unlimited;
        if (!unlimited && envoy.unit !== undefined && envoy.requestsPerUnit > 0) {
          policies = [envoyPolicy(envoy.requestsPerUnit, envoy.unit)];
        }
      }
    }
    const descriptors = this.descriptors(o, path, depth + 1);
    const { line } = this.locator(path, false);
    return {
      key,
      value,
      policies,
      shadow,
      shared,
      unlimited,
      descriptors,
      line,
      file: this.fileName,
      envoy,
      ...(metadata ? { metadata } : {}),
    };
  }

  private rateLimit(data: unknown, path: Segment[]): { envoy: EnvoyLimitConfig; unlimited: boolean } | undefined {
    const o = this.object(data, path);
    if (o === undefined) return undefined;
    this.known(o, path, ['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces']);
    const unlimited = this.flag(o, 'unlimited', path) ?? false;
    let unitText = '';
    if (o.unit !== undefined && o.unit !== null) {
      unitText = this.text(o.unit, [...path, 'unit'], '`unit`') ?? '';
    }
    // Envoy's RateLimitResponse.RateLimit.Unit names, in any case; UNKNOWN is not a unit.
    const unit = ENVOY_UNITS.has(unitText.toLowerCase()) ? unitText.toLowerCase() : undefined;
    if (unlimited && unit !== undefined) {
      this.issue([...path, 'unit'], 'should not specify a rate limit unit when unlimited');
    } else if (!unlimited && unit === undefined) {
      this.issue(
        o.unit === undefined ? path : [...path, 'unit'],
        `invalid rate limit unit ${JSON.stringify(unitText)} (expected one of ${[...ENVOY_UNITS.keys()].join(', ')})`,
      );
    }
    let requestsPerUnit = 0;
    const rpu = o.requests_per_unit;
    if (rpu !== undefined && rpu !== null) {
      if (typeof rpu !== 'number' || !Number.isInteger(rpu) || rpu < 0 || rpu > MAX_REQUESTS_PER_UNIT) {
        this.issue(
          [...path, 'requests_per_unit'],
          `must be a whole number from 0 to ${MAX_REQUESTS_PER_UNIT} (0 denies every call), got ${describe(rpu)}`,
        );
      } else {
        requestsPerUnit = rpu;
      }
    }
    let name: string | undefined;
    if (o.name !== undefined && o.name !== null) {
      const text = this.text(o.name, [...path, 'name'], '`name`');
      if (text !== null && text.length > MAX_TEXT) {
        this.issue([...path, 'name'], `\`name\` has ${text.length} characters; at most ${MAX_TEXT}`);
      } else if (text !== null && text.length > 0) {
        name = text;
      }
    }
    const replaces: string[] = [];
    this.list(o, 'replaces', path, false)?.forEach((item, i) => {
      const at = [...path, 'replaces', i];
      const entry = this.object(item, at);
      if (entry === undefined) return;
      this.known(entry, at, ['name']);
      const replaced =
        entry.name === undefined || entry.name === null ? '' : this.text(entry.name, [...at, 'name'], '`name`');
      if (replaced === null) return;
      if (replaced.length === 0) {
        this.issue(at, 'should not have an empty `replaces` entry: give the `name` of the limit it replaces');
      } else if (replaced === name) {
        this.issue(
          [...at, 'name'],
          `replaces should not contain the name of the same descriptor (${JSON.stringify(name)})`,
        );
      } else {
        replaces.push(replaced);
      }
    });
    return { envoy: { unit, requestsPerUnit, name, replaces }, unlimited };
  }
}
