import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type CliIo, EXIT, main } from '../src/cli.js';
import { ConfigError, type ConfigIssue, parseConfig } from '../src/config.js';
import { type CompiledDomain, compileRules, matchDescriptor } from '../src/rules.js';
import { DecisionStats } from '../src/stats.js';

function issues(text: string): ConfigIssue[] {
  try {
    parseConfig(text, 'test.yaml');
  } catch (error) {
    if (error instanceof ConfigError) return [...error.issues];
    throw error;
  }
  throw new Error('expected the config to be rejected');
}

describe('config', () => {
  it('reads domains, nested rules, named and inline policies, shadow, shared and unlimited', () => {
    const config = parseConfig(`
prefix: edge
shadow: false
policies:
  per-ip: { algorithm: gcra, limit: 10, periodMs: 1000 }
domains:
  - domain: api
    shadow: true
    descriptors:
      - key: remote_address
        policies: [per-ip]
      - key: path
        value: /api/*
        shared: true
        shadow: false
        descriptors:
          - key: user
            policies:
              - { algorithm: sliding-window, name: per-user, limit: 5, windowMs: 60000 }
      - key: status
        value: 200
        unlimited: true
  - domain: envoy
    descriptors:
      - key: generic_key
        rate_limit: { unit: minute, requests_per_unit: 60 }
`);
    expect(config.prefix).toBe('edge');
    expect(config.domains.map((d) => d.domain)).toEqual(['api', 'envoy']);
    const [ip, path, status] = config.domains[0]?.descriptors ?? [];
    expect(ip?.policies[0]).toMatchObject({ algorithm: 'gcra', name: 'per-ip', limit: 10, periodMs: 1000 });
    expect(ip?.shadow).toBeUndefined();
    expect(ip?.line).toBe(10);
    expect(path).toMatchObject({ value: '/api/*', shared: true, shadow: false });
    expect(path?.descriptors[0]?.policies[0]).toMatchObject({ algorithm: 'sliding-window', name: 'per-user' });
    // YAML reads 200 as a number; descriptor values are strings on the wire.
    expect(status).toMatchObject({ value: '200', unlimited: true, policies: [] });
    expect(config.domains[1]?.descriptors[0]?.policies[0]).toMatchObject({
      algorithm: 'fixed-window',
      limit: 60,
      windowMs: 60_000,
      align: 'clock',
    });
  });

  it('reads a bucketed sliding window (precisionMs, in ms like windowMs) and names a bad precision at its line', () => {
    const config = parseConfig(`
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: sliding-window, name: per-minute, limit: 600, windowMs: 60000, precisionMs: 1000 }
`);
    expect(config.domains[0]?.descriptors[0]?.policies[0]).toEqual({
      algorithm: 'sliding-window',
      name: 'per-minute',
      blockMs: 0,
      limit: 600,
      windowMs: 60_000,
      precisionMs: 1000,
    });
    expect(
      issues(`
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - algorithm: sliding-window
            limit: 600
            windowMs: 60000
            precisionMs: 7000
`),
    ).toEqual([
      {
        path: 'domains[0].descriptors[0].policies[0].precisionMs',
        line: 10,
        column: 26,
        message: 'must divide domains[0].descriptors[0].policies[0].windowMs 60000 into whole buckets, got 7000',
      },
    ]);
  });

  it('keeps the source text of a descriptor value or key YAML would read as a number or boolean', () => {
    const written = ['007', '1.10', '1e3', '0x1F', '0o17', '.5', '+12', 'true', 'False', '.inf', '-.Inf', '.NaN'];
    const config = parseConfig(`
domains:
  - domain: api
    descriptors:
${written
  .map(
    (v) => `      - key: account
        value: ${v}
        unlimited: true`,
  )
  .join('\n')}
      - key: 404
        value: &code 010
        descriptors:
          - key: 1.50
            value: *code
            unlimited: true
      - key: quoted
        value: "007"
        unlimited: true
`);
    const rules = config.domains[0]?.descriptors ?? [];
    expect(rules.slice(0, written.length).map((d) => d.value)).toEqual(written);
    const nested = rules[written.length];
    expect([nested?.key, nested?.value]).toEqual(['404', '010']);
    expect([nested?.descriptors[0]?.key, nested?.descriptors[0]?.value]).toEqual(['1.50', '010']);
    expect(rules[written.length + 1]?.value).toBe('007');
  });

  it('matches a descriptor value as Envoy sends it, digit for digit', () => {
    const config = parseConfig(`
domains:
  - domain: api
    descriptors:
      - key: account
        policies: [{ algorithm: gcra, name: any-account, limit: 1, periodMs: 1000 }]
      - key: account
        value: 007
        policies: [{ algorithm: gcra, name: agent, limit: 1, periodMs: 1000 }]
`);
    const domain = compileRules(config, new DecisionStats()).get('api') as CompiledDomain;
    const policy = (value: string) => matchDescriptor(domain, [{ key: 'account', value }])?.rule.policies[0]?.name;
    expect(policy('007')).toBe('agent');
    expect(policy('7')).toBe('any-account');
  });

  it('names the line of a descriptor value that is not text', () => {
    const found = issues(`
domains:
  - domain: api
    descriptors:
      - key: account
        value: [1, 2]
        unlimited: true
`);
    expect(found).toMatchObject([{ path: 'domains[0].descriptors[0].value', line: 6 }]);
    expect(found[0]?.message).toMatch(/must be a string/);
  });

  it('names the path and the line of a bad policy field', () => {
    const found = issues(`domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies:
          - algorithm: gcra
            limit: -5
            periodMs: 1000
`);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ path: 'domains[0].descriptors[0].policies[0].limit', line: 7 });
    expect(found[0]?.message).toMatch(/finite number from 1/);
  });

  it("names a concurrency limit's maxQueue out of range at its path", () => {
    const found = issues(`domains:
  - domain: api
    descriptors:
      - key: job
        concurrency: { limit: 2, leaseMs: 1000, maxQueue: 10001 }
`);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ path: 'domains[0].descriptors[0].concurrency.maxQueue' });
    expect(found[0]?.message).toMatch(/from 0 to 10000/);
    const config = parseConfig(`domains:
  - domain: api
    descriptors:
      - key: job
        concurrency: { limit: 2, leaseMs: 1000, maxQueue: 7 }
`);
    expect(config.domains[0]?.descriptors[0]?.concurrency?.maxQueue).toBe(7);
  });

  it('names an unknown field at its key, and lists the expected ones', () => {
    const found = issues(`domains:
  - domain: api
    descriptors:
      - key: a
        polices: []
`);
    expect(found[0]).toMatchObject({ path: 'domains[0].descriptors[0].polices', line: 5, column: 9 });
    expect(found[0]?.message).toMatch(/unknown field `polices` \(expected one of: key, value, policies/);
  });

  it('reports every problem at once, each with its own line', () => {
    const found = issues(`domains:
  - domain: api
    descriptors:
      - key: a
        policies: [nope]
      - value: x
      - key: b
        value: "a*b"
      - key: c
        shared: yes
  - domain: api
`);
    expect(found.map((i) => [i.path, i.line])).toEqual([
      ['domains[0].descriptors[0].policies[0]', 5],
      ['domains[0].descriptors[1]', 6],
      ['domains[0].descriptors[2].value', 8],
      ['domains[0].descriptors[3].shared', 10],
      ['domains[1].domain', 11],
    ]);
    expect(found[0]?.message).toMatch(/no named policy "nope"/);
    expect(found[2]?.message).toMatch(/wildcard `\*` may only end the value/);
    expect(found[4]?.message).toMatch(/already defined at domains\[0\]/);
  });

  it('reports YAML syntax errors with their line', () => {
    const found = issues('domains:\n  - domain: api\n    descriptors: [\n');
    expect(found[0]?.line).toBeGreaterThan(0);
    expect(found[0]?.message).toMatch(/^YAML: /);
  });

  it('rejects duplicate keys, duplicate rules, an empty file and a name reused by another algorithm', () => {
    expect(issues('domains: []\ndomains: []\n')[0]?.message).toMatch(/YAML: .*unique/i);
    expect(issues('')[0]?.message).toMatch(/empty/);
    expect(
      issues(`domains:
  - domain: api
    descriptors:
      - key: a
      - key: a
`)[0],
    ).toMatchObject({ path: 'domains[0].descriptors[1]', line: 5 });
    const clash = issues(`domains:
  - domain: api
    descriptors:
      - key: a
        policies: [{ algorithm: gcra, name: shared-name, limit: 1, periodMs: 1000 }]
      - key: b
        policies: [{ algorithm: fixed-window, name: shared-name, limit: 1, windowMs: 1000 }]
`);
    expect(clash[0]).toMatchObject({ path: 'domains[0].descriptors[1].policies[0]', line: 7 });
    expect(clash[0]?.message).toMatch(/keeps one algorithm/);
  });

  it('reads Envoy rate_limit blocks and names their own fields in errors', () => {
    const found = issues(`domains:
  - domain: envoy
    descriptors:
      - key: k
        rate_limit: { unit: fortnight, requests_per_unit: 1 }
      - key: j
        rate_limit: { unit: second, requests_per_unit: 0 }
`);
    expect(found.map((i) => i.path)).toEqual([
      'domains[0].descriptors[0].rate_limit.unit',
      'domains[0].descriptors[1].rate_limit.requests_per_unit',
    ]);
  });

  it('limits nesting depth', () => {
    let yaml = 'domains:\n  - domain: deep\n';
    let indent = '    ';
    for (let i = 0; i < 20; i++) {
      yaml += `${indent}descriptors:\n${indent}  - key: k${i}\n`;
      indent += '    ';
    }
    expect(issues(yaml)[0]?.message).toMatch(/at most 16 levels/);
  });
});

describe('floodgate check-config', () => {
  function capture(): CliIo & { stdout: string; stderr: string } {
    const io = {
      stdout: '',
      stderr: '',
      env: {},
      out: (t: string) => {
        io.stdout += t;
      },
      err: (t: string) => {
        io.stderr += t;
      },
    };
    return io;
  }
  const dir = mkdtempSync(join(tmpdir(), 'floodgate-config-'));

  it('exits 0 and summarizes a valid file', async () => {
    const file = join(dir, 'ok.yaml');
    writeFileSync(
      file,
      'domains:\n  - domain: api\n    descriptors:\n      - key: a\n        policies: [{ algorithm: gcra, limit: 1, periodMs: 1000 }]\n',
    );
    const io = capture();
    expect(await main(['check-config', file], io)).toBe(EXIT.OK);
    expect(io.stdout).toContain('ok (1 domain, 1 rule)');
  });

  it('exits 3 and prints file:line:column path: message for an invalid file', async () => {
    const file = join(dir, 'bad.yaml');
    writeFileSync(
      file,
      'domains:\n  - domain: api\n    descriptors:\n      - key: a\n        policies: [{ algorithm: gcra, limit: 1 }]\n',
    );
    const io = capture();
    expect(await main(['check-config', file], io)).toBe(EXIT.CONFIG);
    expect(io.stderr).toContain(`${file}:5:`);
    expect(io.stderr).toContain('domains[0].descriptors[0].policies[0].periodMs');
  });

  it('exits 3 for a missing file and 2 for a bad command line', async () => {
    const io = capture();
    expect(await main(['check-config', join(dir, 'missing.yaml')], io)).toBe(EXIT.CONFIG);
    expect(io.stderr).toMatch(/cannot read the file/);
    expect(await main(['check-config'], io)).toBe(EXIT.USAGE);
    expect(await main(['serve', '--port', 'eighty'], io)).toBe(EXIT.USAGE);
    expect(await main(['serve', '--bogus'], io)).toBe(EXIT.USAGE);
    expect(await main(['launch'], io)).toBe(EXIT.USAGE);
    expect(io.stderr).toMatch(/unknown command "launch"/);
  });

  it('exits 2 for a settle secret too short or unreadable, and never prints it', async () => {
    const file = join(dir, 'secret');
    writeFileSync(file, 'too-short-secret\n');
    const io = capture();
    expect(await main(['serve', '--settle-secret-file', file, '--no-grpc', '--port', '0'], io)).toBe(EXIT.USAGE);
    expect(io.stderr).toMatch(/settle secret must be 32 to 1024 characters.*got 16/);
    expect(io.stderr).not.toContain('too-short-secret');
    const env = capture();
    env.env = { FLOODGATE_SETTLE_SECRET: 'x'.repeat(1025) };
    expect(await main(['serve', '--no-grpc', '--port', '0'], env)).toBe(EXIT.USAGE);
    expect(await main(['serve', '--settle-secret-file', join(dir, 'missing'), '--no-grpc', '--port', '0'], io)).toBe(
      EXIT.USAGE,
    );
    expect(io.stderr).toMatch(/--settle-secret-file cannot be read/);
  });

  it('prints help and version', async () => {
    const io = capture();
    expect(await main(['--help'], io)).toBe(EXIT.OK);
    expect(io.stdout).toMatch(/Exit codes: 0 ok/);
    expect(await main(['--version'], io)).toBe(EXIT.OK);
    expect(io.stdout).toMatch(/\d+\.\d+\.\d+\n$/);
  });
});
