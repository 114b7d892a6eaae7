import { createHash } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  ConfigError,
  type ConfigIssue,
  checkFloodgateConfig,
  type DescriptorConfig,
  type DomainConfig,
  MAX_ISSUES,
  MAX_RULES,
  readConfigFile,
  readYaml,
  type ServiceConfig,
  unreadable,
  type YamlDocument,
} from './config.js';
import { checkEnvoyConfig, countRules, type EnvoyFileConfig } from './envoy-config.js';

/** Most config files read from a directory. */
export const MAX_CONFIG_FILES = 1000;
/** Most bytes of config read from a directory, all files together (16 MiB). */
export const MAX_DIRECTORY_BYTES = 16 * 1024 * 1024;

/** How configs are read. */
export interface ConfigLoadOptions {
  /**
   * Merge the descriptors of a domain that several files of envoyproxy/ratelimit's format define (its
   * `MERGE_DOMAIN_CONFIG`); otherwise such a domain is refused, as that service refuses it by default.
   * @default false
   */
  mergeDomains?: boolean;
}

/** A config read from a file or a directory. */
export interface LoadedConfig {
  readonly config: ServiceConfig;
  /** SHA-256 of what was read: of the file's text, or of every file's name and text in a directory. */
  readonly sha256: string;
  /** The files read, in the order read. */
  readonly files: readonly string[];
}

/**
 * Reads a config from a file or a directory. A file is floodgate's own format (`domains:`) or
 * envoyproxy/ratelimit's (`domain:` and `descriptors:`), told apart by its top-level fields. A directory
 * is read as envoyproxy/ratelimit reads its runtime directory: every `*.yaml` and `*.yml` file in it
 * (not in subdirectories, not hidden), in name order; each one domain of that format, and at most one in
 * floodgate's own format beside them. A domain defined twice is refused, unless `mergeDomains` and every
 * definition is in envoyproxy/ratelimit's format. Throws {@link ConfigError} with every problem of every
 * file, each with its file, line and column.
 *
 * @example
 * ```ts
 * const { config } = loadConfigPath('/etc/ratelimit/config', { mergeDomains: true });
 * ```
 */
export function loadConfigPath(path: string, options: ConfigLoadOptions = {}): LoadedConfig {
  let directory: boolean;
  try {
    directory = statSync(path).isDirectory();
  } catch (error) {
    throw unreadable(error, path);
  }
  if (!directory) {
    const text = readConfigFile(path);
    return { config: parseConfigText(text, path, options), sha256: sha256(text), files: [path] };
  }
  const files = configFilesIn(path);
  const hash = createHash('sha256');
  const sources: { file: string; text: string }[] = [];
  let bytes = 0;
  let written = 0;
  for (const file of files) {
    const text = readConfigFile(file);
    bytes += Buffer.byteLength(text, 'utf8');
    written += writtenRules(text);
    if (written > MAX_RULES) {
      throw new ConfigError(
        [
          {
            path: '',
            line: 0,
            column: 0,
            message: `the config files hold more than ${MAX_RULES} descriptor rules (${written} written out by ${file.slice(path.length + 1)}, before any file is parsed)`,
          },
        ],
        path,
      );
    }
    if (bytes > MAX_DIRECTORY_BYTES) {
      throw new ConfigError(
        [
          {
            path: '',
            line: 0,
            column: 0,
            message: `the config files hold more than ${MAX_DIRECTORY_BYTES} bytes (16 MiB) together`,
          },
        ],
        path,
      );
    }
    hash.update(`${file.slice(path.length)}\0${text}\0`);
    sources.push({ file, text });
  }
  return { config: combine(sources, options, path), sha256: hash.digest('hex'), files };
}

/**
 * The rules a config text writes out in block style, one per line that starts a list item with `key:`
 * (`- key: user`): fewer than it holds (flow-style rules and aliases are not counted), never more outside
 * a block scalar holding such lines, so a directory whose files write out more than {@link MAX_RULES} is
 * refused as it is read, before the slow part (parsing and checking every file: 77 s and 568 MiB for
 * 1,000 files of 16 kB) begins.
 */
function writtenRules(text: string): number {
  return text.match(/^[ \t]*-[ \t]+key[ \t]*:/gm)?.length ?? 0;
}

/**
 * Parses one config text of either format (see {@link loadConfigPath}).
 *
 * @example
 * ```ts
 * const config = parseConfigText('domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: second, requests_per_unit: 10 }\n');
 * ```
 */
export function parseConfigText(text: string, file?: string, options: ConfigLoadOptions = {}): ServiceConfig {
  return combine([{ file, text }], options, file);
}

/** The config files of a directory, in name order: `*.yaml` and `*.yml`, not hidden, files only. */
function configFilesIn(directory: string): string[] {
  let names: string[];
  try {
    names = readdirSync(directory);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ConfigError(
      [{ path: '', line: 0, column: 0, message: `cannot read the directory: ${reason}` }],
      directory,
    );
  }
  const files: string[] = [];
  for (const name of names.sort()) {
    if (name.startsWith('.') || !/\.ya?ml$/i.test(name)) continue;
    const file = join(directory, name);
    try {
      // Followed links count as what they point to (Kubernetes mounts ConfigMap keys as links).
      if (!statSync(file).isFile()) continue;
    } catch {
      continue;
    }
    files.push(file);
    if (files.length > MAX_CONFIG_FILES) {
      throw new ConfigError(
        [{ path: '', line: 0, column: 0, message: `more than ${MAX_CONFIG_FILES} config files in the directory` }],
        directory,
      );
    }
  }
  return files;
}

/** True for the top level of a file of envoyproxy/ratelimit's format: `domain`, not `domains`. */
function isEnvoyFormat(data: unknown): boolean {
  return (
    typeof data === 'object' &&
    data !== null &&
    !Array.isArray(data) &&
    Object.hasOwn(data, 'domain') &&
    !Object.hasOwn(data, 'domains')
  );
}

/** Checks every file, then puts their domains together; every problem of every file is reported. */
function combine(
  sources: readonly { file: string | undefined; text: string }[],
  options: ConfigLoadOptions,
  where: string | undefined,
): ServiceConfig {
  const issues: ConfigIssue[] = [];
  const add = (found: readonly ConfigIssue[], file: string | undefined) => {
    for (const issue of found) if (issues.length < MAX_ISSUES) issues.push({ ...issue, file: issue.file ?? file });
  };
  let own: { config: ServiceConfig; file: string | undefined } | undefined;
  const envoy: { config: EnvoyFileConfig; file: string | undefined }[] = [];
  for (const { file, text } of sources) {
    if (issues.length >= MAX_ISSUES) break;
    let yaml: YamlDocument;
    try {
      yaml = readYaml(text, file);
      // envoyproxy/ratelimit reads its files with Go's yaml.v2, which speaks YAML 1.1 (`yes` is true).
      if (isEnvoyFormat(yaml.data)) {
        yaml = readYaml(text, file, '1.1');
        const checked = checkEnvoyConfig(yaml, file);
        add(checked.issues, file);
        if (checked.config !== undefined) envoy.push({ config: checked.config, file });
        continue;
      }
      const config = checkFloodgateConfig(yaml, file);
      if (own !== undefined) {
        add(
          [
            {
              path: '',
              line: 1,
              column: 1,
              message: `a second config of floodgate's format (the first is ${own.file}): a directory holds at most one, beside any number of envoyproxy/ratelimit's`,
            },
          ],
          file,
        );
        continue;
      }
      own = { config, file };
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      add(error.issues, file);
    }
  }
  const domains: DomainConfig[] = [...(own?.config.domains ?? [])];
  const byName = new Map<string, { index: number; file: string | undefined; format: 'floodgate' | 'envoy' }>();
  for (const d of domains) byName.set(d.domain, { index: byName.size, file: own?.file, format: 'floodgate' });
  let rules = countRules(domains.flatMap((d) => d.descriptors));
  for (const { config, file } of envoy) {
    rules += countRules(config.descriptors);
    const seen = byName.get(config.domain);
    if (seen === undefined) {
      byName.set(config.domain, { index: domains.length, file, format: 'envoy' });
      domains.push({ domain: config.domain, shadow: false, descriptors: config.descriptors, format: 'envoy' });
      continue;
    }
    if (seen.format !== 'envoy' || !options.mergeDomains) {
      add(
        [
          {
            path: 'domain',
            line: config.line,
            column: 1,
            message:
              seen.format === 'envoy'
                ? `duplicate domain ${JSON.stringify(config.domain)}, also in ${seen.file}: merge the files' descriptors with --merge-domain-config (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)`
                : `duplicate domain ${JSON.stringify(config.domain)}, also in ${seen.file} (floodgate's format): a domain is written in one format`,
          },
        ],
        file,
      );
      continue;
    }
    // envoyproxy/ratelimit merges a domain's top-level descriptors; one defined twice is refused.
    const merged = domains[seen.index] as DomainConfig;
    const descriptors: DescriptorConfig[] = [...merged.descriptors];
    const ids = new Map(descriptors.map((d) => [`${d.key}\0${d.value ?? ''}`, d]));
    for (const d of config.descriptors) {
      const first = ids.get(`${d.key}\0${d.value ?? ''}`);
      if (first !== undefined) {
        add(
          [
            {
              path: 'descriptors',
              line: d.line,
              column: 1,
              message: `duplicate descriptor in domain ${JSON.stringify(config.domain)}: key ${JSON.stringify(d.key)}${d.value === undefined ? ' without a value' : ` and value ${JSON.stringify(d.value)}`} is already defined in ${first.file} line ${first.line}`,
            },
          ],
          file,
        );
        continue;
      }
      ids.set(`${d.key}\0${d.value ?? ''}`, d);
      descriptors.push(d);
    }
    domains[seen.index] = { ...merged, descriptors };
  }
  if (rules > MAX_RULES && issues.length === 0) {
    add(
      [
        {
          path: '',
          line: 0,
          column: 0,
          message: `the config files hold ${rules} descriptor rules; at most ${MAX_RULES}`,
        },
      ],
      undefined,
    );
  }
  if (issues.length > 0) throw new ConfigError(issues, where);
  return { prefix: own?.config.prefix ?? 'floodgate', domains };
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
