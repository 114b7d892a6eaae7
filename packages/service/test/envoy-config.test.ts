// envoyproxy/ratelimit's config format: every valid config of test/envoy/ loads unchanged, every invalid
// one is refused with its reason and its line, and a directory is read as that service reads its runtime
// directory (one domain per file, merged on request), beside at most one file of floodgate's format.
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { EXIT, main } from '../src/cli.js';
import { ConfigError, type DescriptorConfig, type DomainConfig } from '../src/config.js';
import { loadConfigPath, MAX_CONFIG_FILES, parseConfigText } from '../src/config-files.js';

const HERE = fileURLToPath(new URL('./envoy/', import.meta.url));
const temporary: string[] = [];
afterAll(() => {
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

/** A directory holding these files. */
function directory(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-envoy-'));
  temporary.push(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

function refusal(load: () => unknown): ConfigError {
  try {
    load();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('the config loaded');
}

function rule(domain: DomainConfig, ...path: [string, string | undefined][]): DescriptorConfig {
  let list = domain.descriptors;
  let found: DescriptorConfig | undefined;
  for (const [key, value] of path) {
    found = list.find((d) => d.key === key && d.value === value);
    if (found === undefined) throw new Error(`no rule ${key}=${value}`);
    list = found.descriptors;
  }
  return found as DescriptorConfig;
}

const only = (file: string): DomainConfig => {
  const { config } = loadConfigPath(join(HERE, 'valid', file));
  expect(config.domains).toHaveLength(1);
  return config.domains[0] as DomainConfig;
};

describe("envoyproxy/ratelimit's config format", () => {
  it('loads every valid config unchanged, each as one domain of that format', () => {
    const files = readdirSync(join(HERE, 'valid'));
    expect(files.length).toBeGreaterThanOrEqual(15);
    for (const file of files) {
      const domain = only(file);
      expect(domain.format, file).toBe('envoy');
    }
  });

  it('reads each rule as written: limits, units, unlimited, deny-all, names, replaces, shadow and sharing', () => {
    const nested = only('nested.yaml');
    expect(nested.domain).toBe('test-domain');
    expect(rule(nested, ['key1', 'value1'], ['subkey1', undefined]).envoy).toMatchObject({
      unit: 'second',
      requestsPerUnit: 5,
    });
    expect(rule(nested, ['key1', 'value1'], ['subkey1', 'subvalue1']).envoy?.requestsPerUnit).toBe(10);
    const whitelisted = rule(nested, ['key2', 'value3']);
    expect([whitelisted.envoy, whitelisted.policies]).toEqual([undefined, []]);
    expect(rule(nested, ['key5', 'value5'], ['subkey5', 'subvalue5']).envoy?.requestsPerUnit).toBe(25);
    expect(rule(nested, ['key6', undefined]).unlimited).toBe(true);
    // A limit is a fixed window of one unit that counts every call.
    expect(rule(nested, ['key2', undefined]).policies).toEqual([
      expect.objectContaining({ algorithm: 'fixed-window', limit: 20, windowMs: 60_000, countDenied: true }),
    ]);

    const edge = only('edge-per-ip.yaml');
    const denied = rule(edge, ['remote_address', '50.0.0.5']);
    expect([denied.envoy?.requestsPerUnit, denied.policies]).toEqual([0, []]);

    const replaces = only('replaces.yaml');
    expect(rule(replaces, ['key_1', 'value_1'], ['user', 'bkthomps']).envoy?.name).toBe('specific_limit');
    expect(rule(replaces, ['key_2', 'value_2'], ['user', 'bkthomps']).envoy?.replaces).toEqual(['specific_limit']);

    const shadow = only('shadow.yaml');
    expect(rule(shadow, ['service', undefined], ['user', 'user-a']).shadow).toBe(true);
    // shadow_mode belongs to its rule alone: the reference never inherits it.
    expect(rule(shadow, ['service', undefined], ['user', 'user-b']).shadow).toBe(false);

    const units = only('units.yaml');
    expect(units.descriptors.map((d) => [d.envoy?.unit, d.envoy?.requestsPerUnit])).toEqual([
      ['second', 1],
      ['minute', 2],
      ['hour', 3],
      ['day', 4],
      ['week', 5],
      ['month', 6],
      ['year', 4294967295],
    ]);
    expect(rule(units, ['w', undefined]).policies[0]).toMatchObject({ windowMs: 604_800_000 });

    const share = only('share-threshold.yaml');
    expect(rule(share, ['files', 'files/*']).shared).toBe(true);
    expect(rule(share, ['path', 'path/*'], ['file', 'file/*']).shared).toBe(false);

    // YAML 1.1, as Go's yaml.v2 reads it: `yes` is true, and a value keeps the text written.
    const yaml11 = only('yaml-1.1.yaml');
    expect(yaml11.descriptors.map((d) => [d.value, d.shadow])).toEqual([
      ['007', true],
      ['on', false],
    ]);
    expect(only('no-descriptors.yaml').descriptors).toEqual([]);
  });

  const invalid: [file: string, line: number, reason: RegExp][] = [
    ['empty-domain.yaml', 1, /cannot have an empty `domain`/],
    ['empty-key.yaml', 3, /a descriptor has an empty `key`/],
    [
      'duplicate-key.yaml',
      6,
      /duplicate descriptor: key "key1" and value "value1" is already defined at descriptors\[0\]/,
    ],
    ['bad-unit.yaml', 5, /invalid rate limit unit "foo"/],
    ['no-unit.yaml', 5, /invalid rate limit unit ""/],
    ['replaces-self.yaml', 9, /replaces should not contain the name of the same descriptor \("mine"\)/],
    ['replaces-empty.yaml', 8, /should not have an empty `replaces` entry/],
    ['misspelled-rate-limit.yaml', 5, /unknown field `ratelimit`/],
    ['misspelled-requests-per-unit.yaml', 7, /unknown field `requestsperunit`/],
    ['non-string-key.yaml', 1, /unknown field `0.25`/],
    ['non-map-list.yaml', 3, /must be a mapping \(key: value\), got "a"/],
    ['unlimited-with-unit.yaml', 6, /should not specify a rate limit unit when unlimited/],
    ['share-threshold-without-wildcard.yaml', 5, /share_threshold can only be used with a wildcard value/],
    ['requests-per-unit.yaml', 4, /requests_per_unit: must be a whole number from 0 to 4294967295 .*, got -5/],
  ];
  it.each(invalid)('refuses %s with its reason and line', (file, line, reason) => {
    const error = refusal(() => loadConfigPath(join(HERE, 'invalid', file)));
    const first = error.issues[0];
    expect(first?.line).toBe(line);
    expect(first?.file).toBe(join(HERE, 'invalid', file));
    expect(`${first?.path ? `${first.path}: ` : ''}${first?.message}`).toMatch(reason);
  });

  it('refuses a file that is not YAML, with the line where it breaks', () => {
    // Written here rather than under invalid/: the repository's formatter parses every *.yaml file.
    const dir = directory({
      'bad-yaml.yaml': 'domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit: { unit: second\n',
    });
    const error = refusal(() => loadConfigPath(join(dir, 'bad-yaml.yaml')));
    expect(error.issues[0]?.line).toBe(5);
    expect(error.issues[0]?.file).toBe(join(dir, 'bad-yaml.yaml'));
    expect(error.issues[0]?.message).toMatch(/^YAML: /);
  });

  it('covers every invalid file', () => {
    expect(readdirSync(join(HERE, 'invalid')).sort()).toEqual(invalid.map(([file]) => file).sort());
  });

  it('reports every bad requests_per_unit: negative, fraction, text, above a uint32', () => {
    const error = refusal(() => loadConfigPath(join(HERE, 'invalid', 'requests-per-unit.yaml')));
    expect(error.issues.map((i) => i.message.replace(/.*, got /, ''))).toEqual(['-5', '1.5', '"many"', '4294967296']);
  });
});

describe('a directory of config files', () => {
  it('reads every *.yaml and *.yml file in name order, not hidden or other files', () => {
    const dir = directory({
      'b.yml': 'domain: b\ndescriptors:\n  - { key: k, rate_limit: { unit: second, requests_per_unit: 1 } }\n',
      'a.yaml': 'domain: a\ndescriptors:\n',
      '.hidden.yaml': 'not: [a config',
      'notes.txt': 'not a config',
    });
    const loaded = loadConfigPath(dir);
    expect(loaded.config.domains.map((d) => d.domain)).toEqual(['a', 'b']);
    expect(loaded.files.map((f) => f.slice(dir.length + 1))).toEqual(['a.yaml', 'b.yml']);
    // An empty directory is a config without domains, as the reference starts without any.
    expect(loadConfigPath(directory({})).config.domains).toEqual([]);
  });

  it("refuses a domain defined twice, unless merging (the reference's MERGE_DOMAIN_CONFIG)", () => {
    const merge = join(HERE, 'merge');
    const error = refusal(() => loadConfigPath(merge));
    expect(error.issues[0]?.message).toMatch(
      /duplicate domain "test-domain", also in .*one\.yaml: merge .* --merge-domain-config/,
    );
    expect(error.issues[0]?.file).toBe(join(merge, 'two.yaml'));
    const merged = loadConfigPath(merge, { mergeDomains: true }).config.domains;
    expect(merged).toHaveLength(1);
    expect(merged[0]?.descriptors.map((d) => [d.key, d.value, d.envoy?.requestsPerUnit])).toEqual([
      ['key1', 'value1', 10],
      ['key2', 'value2', 20],
    ]);
    // The same descriptor in two merged files is refused, naming the first.
    const again = directory({
      'one.yaml':
        'domain: d\ndescriptors:\n  - { key: key1, value: value1, rate_limit: { unit: second, requests_per_unit: 1 } }\n',
      'two.yaml':
        'domain: d\ndescriptors:\n  - { key: key1, value: value1, rate_limit: { unit: second, requests_per_unit: 2 } }\n',
    });
    const duplicate = refusal(() => loadConfigPath(again, { mergeDomains: true }));
    expect(duplicate.issues[0]?.message).toMatch(
      /duplicate descriptor in domain "d": key "key1" and value "value1" is already defined in .*one\.yaml line 3/,
    );
  });

  it("holds one file of floodgate's format beside envoyproxy/ratelimit's, each domain in one format", () => {
    const own =
      'prefix: mixed\ndomains:\n  - domain: api\n    descriptors:\n      - { key: ip, policies: [{ algorithm: gcra, limit: 5, periodMs: 1000 }] }\n';
    const envoy = 'domain: edge\ndescriptors:\n  - { key: ip, rate_limit: { unit: second, requests_per_unit: 5 } }\n';
    const mixed = loadConfigPath(directory({ 'floodgate.yaml': own, 'edge.yaml': envoy })).config;
    expect(mixed.prefix).toBe('mixed');
    expect(mixed.domains.map((d) => [d.domain, d.format ?? 'floodgate'])).toEqual([
      ['api', 'floodgate'],
      ['edge', 'envoy'],
    ]);
    const two = refusal(() => loadConfigPath(directory({ 'a.yaml': own, 'b.yaml': own })));
    expect(two.issues[0]?.message).toMatch(/a second config of floodgate's format/);
    const both = refusal(() => loadConfigPath(directory({ 'a.yaml': own, 'b.yaml': envoy.replace('edge', 'api') })));
    expect(both.issues[0]?.message).toMatch(/duplicate domain "api", also in .*a\.yaml \(floodgate's format\)/);
  });

  it('reports the problems of every file, each with its file and line', () => {
    const dir = directory({
      'a.yaml': 'domain: a\ndescriptors:\n  - key: ""\n',
      'b.yaml': 'domain: b\ndescriptors:\n  - { key: k, rate_limit: { unit: fortnight } }\n',
    });
    const error = refusal(() => loadConfigPath(dir));
    expect(error.issues.map((i) => [i.file?.slice(dir.length + 1), i.line])).toEqual([
      ['a.yaml', 3],
      ['b.yaml', 3],
    ]);
    expect(error.message).toMatch(/a\.yaml:3:\d+ descriptors\[0\]\.key: a descriptor has an empty `key`/);
  });

  it(`refuses more than ${MAX_CONFIG_FILES} files`, () => {
    const files: Record<string, string> = {};
    for (let i = 0; i <= MAX_CONFIG_FILES; i++) files[`d${i}.yaml`] = `domain: d${i}\ndescriptors:\n`;
    expect(refusal(() => loadConfigPath(directory(files))).message).toMatch(/more than 1000 config files/);
  });

  it('parses either format from text', () => {
    expect(parseConfigText('domain: x\ndescriptors:\n').domains[0]?.format).toBe('envoy');
    expect(parseConfigText('domains: []\n').domains).toEqual([]);
  });
});

describe('floodgate check-config', () => {
  const run = async (...args: string[]) => {
    let out = '';
    let err = '';
    const code = await main(['check-config', ...args], {
      out: (t) => {
        out += t;
      },
      err: (t) => {
        err += t;
      },
      env: {},
    });
    return { code, out, err };
  };

  it('takes a file or a directory of either format', async () => {
    expect(await run(join(HERE, 'valid', 'nested.yaml'))).toMatchObject({ code: EXIT.OK, out: /1 domain, 12 rules/ });
    expect(await run(join(HERE, 'runtime', 'config'))).toMatchObject({ code: EXIT.OK, out: /3 domains, 7 rules/ });
    expect((await run(join(HERE, 'merge'))).code).toBe(EXIT.CONFIG);
    expect(await run('--merge-domain-config', join(HERE, 'merge'))).toMatchObject({ code: EXIT.OK, out: /1 domain/ });
    const bad = await run(join(HERE, 'invalid', 'bad-unit.yaml'));
    expect(bad.code).toBe(EXIT.CONFIG);
    expect(bad.err).toMatch(/bad-unit\.yaml:5:13 descriptors\[0\]\.rate_limit\.unit: invalid rate limit unit "foo"/);
  });
});
