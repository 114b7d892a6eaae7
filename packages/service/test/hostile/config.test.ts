// Attacks on the config a service loads: names an object inherits, prototype keys, deep nesting, alias
// expansion, files too large and too many rules. Each must end in a ConfigError whose issue names the
// path, the value and the bound, with its line, and cost little; none may touch Object.prototype.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type CliIo, EXIT, main } from '../../src/cli.js';
import {
  ConfigError,
  type ConfigIssue,
  loadConfigFile,
  MAX_CONFIG_BYTES,
  MAX_ISSUES,
  MAX_RULES,
  MAX_YAML_ALIAS_COUNT,
  MAX_YAML_DEPTH,
  parseConfig,
} from '../../src/config.js';
import { compileRules, matchDescriptor } from '../../src/rules.js';
import { DecisionStats } from '../../src/stats.js';

function issues(text: string): ConfigIssue[] {
  try {
    parseConfig(text, 'hostile.yaml');
  } catch (error) {
    if (error instanceof ConfigError) return [...error.issues];
    throw error;
  }
  throw new Error('expected the config to be rejected');
}

/** Every own property name of Object.prototype, with its descriptor's kind, to compare before and after. */
function prototypeShape(): string[] {
  return Object.getOwnPropertyNames(Object.prototype).map((name) => {
    const d = Object.getOwnPropertyDescriptor(Object.prototype, name);
    return `${name}:${typeof d?.value}:${typeof d?.get}`;
  });
}

const INHERITED = [
  '__proto__',
  'constructor',
  'toString',
  'hasOwnProperty',
  'valueOf',
  'isPrototypeOf',
  '__defineGetter__',
  'propertyIsEnumerable',
  'toLocaleString',
];

const rule = (body: string) => `domains:
  - domain: api
    descriptors:
      - key: user
${body}`;

describe('hostile config: names an object inherits', () => {
  it.each(INHERITED)('refuses rate_limit unit %s as a unit, naming it', (unit) => {
    const found = issues(rule(`        rate_limit: { unit: ${JSON.stringify(unit)}, requests_per_unit: 5 }\n`));
    expect(found).toEqual([
      {
        path: 'domains[0].descriptors[0].rate_limit.unit',
        line: 5,
        column: expect.any(Number),
        message: `must be one of second, minute, hour, day, week, month, year, got ${JSON.stringify(unit)}`,
      },
    ]);
  });

  it.each(INHERITED)('refuses algorithm %s, naming it', (algorithm) => {
    const found = issues(
      rule(`        policies: [{ algorithm: ${JSON.stringify(algorithm)}, limit: 1, periodMs: 1000 }]\n`),
    );
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ path: 'domains[0].descriptors[0].policies[0].algorithm', line: 5 });
    expect(found[0]?.message).toContain(`got ${JSON.stringify(algorithm)}`);
  });

  it.each(INHERITED)('refuses a reference to the named policy %s when none is defined', (name) => {
    const found = issues(rule(`        policies: [${JSON.stringify(name)}]\n`));
    expect(found).toEqual([
      {
        path: 'domains[0].descriptors[0].policies[0]',
        line: 5,
        column: expect.any(Number),
        message: `no named policy ${JSON.stringify(name)} (define it under top-level \`policies\`)`,
      },
    ]);
  });
});

describe('hostile config: __proto__ and constructor keys', () => {
  it('names a __proto__ key of a policy at its own path and line, and pollutes nothing', () => {
    const before = prototypeShape();
    const found = issues(
      rule(`        policies:
          - algorithm: gcra
            limit: 1
            periodMs: 1000
            __proto__: { polluted: true, limit: 1000000 }
`),
    );
    expect(found).toEqual([
      {
        path: 'domains[0].descriptors[0].policies[0].__proto__',
        line: 9,
        column: 13,
        message: 'is not an option of a gcra policy (options: name, blockMs, limit, periodMs, burst)',
      },
    ]);
    expect(prototypeShape()).toEqual(before);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('names __proto__ and constructor keys at every level: root, domain, rule, Envoy block, named policy', () => {
    const before = prototypeShape();
    const found = issues(`__proto__: { polluted: true }
policies:
  strict:
    algorithm: gcra
    limit: 1
    periodMs: 1000
    constructor: { prototype: { polluted: true } }
domains:
  - domain: api
    __proto__: { shadow: true }
    descriptors:
      - key: user
        constructor: { polluted: true }
        rate_limit: { unit: second, requests_per_unit: 1, __proto__: { polluted: true } }
      - key: ip
        policies: [strict]
`);
    expect(found.map((i) => [i.path, i.line])).toEqual([
      ['__proto__', 1],
      ['policies.strict.constructor', 7],
      ['domains[0].__proto__', 10],
      ['domains[0].descriptors[0].constructor', 13],
      ['domains[0].descriptors[0].rate_limit.__proto__', 14],
      // The named policy's problem is reported where it is defined, once: not again at the rule using it.
    ]);
    expect(found[0]?.message).toBe(
      'unknown field `__proto__` (expected one of: version, prefix, shadow, policies, domains)',
    );
    expect(prototypeShape()).toEqual(before);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).shadow).toBeUndefined();
  });

  it('reads a descriptor key or value named __proto__ or constructor as plain text', () => {
    const config = parseConfig(`domains:
  - domain: api
    descriptors:
      - key: __proto__
        value: constructor
        policies: [{ algorithm: fixed-window, limit: 1, windowMs: 60000 }]
      - key: toString
        value: "__proto__*"
        policies: [{ algorithm: fixed-window, limit: 2, windowMs: 60000 }]
`);
    const domain = compileRules(config, new DecisionStats()).get('api');
    if (domain === undefined) throw new Error('no domain');
    expect(matchDescriptor(domain, [{ key: '__proto__', value: 'constructor' }])?.rule.label).toBe(
      '__proto__=constructor',
    );
    expect(matchDescriptor(domain, [{ key: '__proto__', value: 'toString' }])).toBeUndefined();
    expect(matchDescriptor(domain, [{ key: 'toString', value: '__proto__x' }])?.rule.label).toBe('toString=__proto__*');
    expect(matchDescriptor(domain, [{ key: 'constructor', value: 'x' }])).toBeUndefined();
  });
});

describe('hostile config: nesting, aliases and size', () => {
  it.each([
    ['flow lists', (n: number) => `domains: ${'['.repeat(n)}${']'.repeat(n)}\n`, 1],
    ['flow mappings', (n: number) => `domains: ${'{a: '.repeat(n)}1${'}'.repeat(n)}\n`, 1],
    ['compact block lists', (n: number) => `domains:\n  ${'- '.repeat(n)}x\n`, 2],
    ['explicit keys', (n: number) => `domains:\n  ${'? '.repeat(n)}x\n`, 2],
  ])('refuses %s nested 20,000 deep at the limit, naming it and the line', (_name, make, line) => {
    const started = performance.now();
    const found = issues(make(20_000));
    expect(found).toEqual([
      {
        path: '',
        line,
        column: expect.any(Number),
        message: `YAML nests mappings and lists more than ${MAX_YAML_DEPTH} levels deep (the most a config accepts)`,
      },
    ]);
    // The parser stops at the limit: the cost is that of 64 levels, not 20,000 (a generous bound).
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('refuses block mappings indented past the limit', () => {
    let text = 'domains:\n';
    for (let i = 0; i < 200; i++) text += `${' '.repeat(i + 1)}k${i}:\n`;
    expect(issues(text)[0]?.message).toContain(`more than ${MAX_YAML_DEPTH} levels deep`);
  });

  it('accepts descriptors nested as deep as the descriptor limit allows (37 YAML levels)', () => {
    let text = 'domains:\n  - domain: deep\n';
    let indent = '    ';
    for (let i = 0; i < 16; i++) {
      text += `${indent}descriptors:\n${indent}  - key: k${i}\n${indent}    policies: [{ algorithm: gcra, limit: 1, periodMs: 1000 }]\n`;
      indent += '    ';
    }
    const config = parseConfig(text);
    const domain = compileRules(config, new DecisionStats()).get('deep');
    expect(domain?.rules).toHaveLength(16);
  });

  it('refuses aliases that expand exponentially ("billion laughs"), naming the bound and the first alias', () => {
    const found = issues(`a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
domains: [*f]
`);
    expect(found).toEqual([
      {
        path: '',
        line: 2,
        column: 8,
        message: `YAML aliases (*name) expand to more than ${MAX_YAML_ALIAS_COUNT} nodes; share a policy among many rules with a named policy (top-level \`policies\`) instead`,
      },
    ]);
  });

  it('stops a rule that contains itself at the descriptor depth limit', () => {
    const found = issues(`domains:
  - domain: api
    descriptors:
      - &r { key: k, policies: [{ algorithm: gcra, limit: 1, periodMs: 1000 }], descriptors: [*r, *r] }
`);
    // Two copies per level would be 2^16 rules; each branch stops at level 16, and checking stops at
    // the 50th problem.
    expect(found).toHaveLength(MAX_ISSUES);
    expect(found[0]?.message).toBe('descriptors nest at most 16 levels deep');
    expect(found[0]?.line).toBe(4);
  });

  it(`refuses more than ${MAX_RULES} rules, counting an aliased list each time it is used`, () => {
    let text =
      'policies:\n  p: { algorithm: gcra, limit: 1, periodMs: 1000 }\ndomains:\n  - domain: d0\n    descriptors: &rules\n';
    for (let i = 0; i < 1000; i++) text += `      - { key: u, value: "v${i}", policies: [p] }\n`;
    // 51 domains of 1,000 rules from a file of 1,053 lines.
    for (let i = 1; i <= 50; i++) text += `  - { domain: d${i}, descriptors: *rules }\n`;
    const found = issues(text);
    expect(found).toEqual([
      {
        path: 'domains[50].descriptors[0]',
        line: 1055,
        column: 33,
        message: `a config has at most ${MAX_RULES} descriptor rules (aliases count each time they are used)`,
      },
    ]);
  });

  it('stops checking at the 50th problem and says so', () => {
    let text = 'domains:\n  - domain: api\n    descriptors:\n';
    for (let i = 0; i < 1000; i++) text += `      - { key: k${i}, bogus: ${i} }\n`;
    let error: unknown;
    try {
      parseConfig(text, 'many.yaml');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const config = error as ConfigError;
    expect(config.issues).toHaveLength(MAX_ISSUES);
    expect(config.issues[49]).toMatchObject({ path: 'domains[0].descriptors[49].bogus', line: 53 });
    expect(config.message).toMatch(/^invalid config \(50 problems, checking stopped there\):/);
  });

  describe('files', () => {
    const dir = mkdtempSync(join(tmpdir(), 'floodgate-hostile-config-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it(`refuses a file over ${MAX_CONFIG_BYTES} bytes before reading it`, () => {
      const file = join(dir, 'large.yaml');
      writeFileSync(file, `# ${'x'.repeat(MAX_CONFIG_BYTES)}\n`);
      expect(() => loadConfigFile(file)).toThrow(ConfigError);
      try {
        loadConfigFile(file);
      } catch (error) {
        expect((error as ConfigError).issues).toEqual([
          {
            path: '',
            line: 0,
            column: 0,
            message: `the config is ${MAX_CONFIG_BYTES + 3} bytes; a config has at most ${MAX_CONFIG_BYTES} bytes (2 MiB)`,
          },
        ]);
        expect((error as ConfigError).file).toBe(file);
      }
    });

    it('refuses inline text over the bound, counting UTF-8 bytes', () => {
      // 700,000 three-byte characters: 2,100,000 bytes in 700,000 characters.
      const text = `# ${'€'.repeat(700_000)}\ndomains: []\n`;
      expect(issues(text)).toEqual([
        {
          path: '',
          line: 0,
          column: 0,
          message: `the config is ${Buffer.byteLength(text)} bytes; a config has at most ${MAX_CONFIG_BYTES} bytes (2 MiB)`,
        },
      ]);
    });

    it('check-config exits 3 on a deep file, with file:line and the bound', async () => {
      const file = join(dir, 'deep.yaml');
      writeFileSync(file, `domains:\n  - domain: api\n    descriptors: ${'['.repeat(20_000)}${']'.repeat(20_000)}\n`);
      let stderr = '';
      const io: CliIo = { out: () => {}, err: (t) => (stderr += t), env: {} };
      expect(await main(['check-config', file], io)).toBe(EXIT.CONFIG);
      expect(stderr).toContain(`${file}:3:`);
      expect(stderr).toContain(`more than ${MAX_YAML_DEPTH} levels deep`);
      expect(stderr).not.toContain('call stack');
    });
  });

  it('checks 5,000 rules and finds a prefix rule among 2,500 by lookup (the full size is measured by bench/config.ts)', () => {
    const make = (n: number) => {
      let text =
        'policies:\n  per-user: { algorithm: gcra, limit: 10, periodMs: 60000 }\ndomains:\n  - domain: api\n    descriptors:\n';
      for (let i = 0; i < n; i++) text += `      - key: user\n        value: "u${i}"\n        policies: [per-user]\n`;
      for (let i = 0; i < n; i++) text += `      - { key: path, value: "/p${i}/*", policies: [per-user] }\n`;
      return text;
    };
    const started = performance.now();
    const config = parseConfig(make(2500));
    const domain = compileRules(config, new DecisionStats()).get('api');
    if (domain === undefined) throw new Error('no domain');
    expect(domain.rules).toHaveLength(5000);
    // Prefix rules are indexed: the longest prefix is found among 2,500 without trying each.
    expect(matchDescriptor(domain, [{ key: 'path', value: '/p1234/x' }])?.rule.label).toBe('path=/p1234/*');
    expect(matchDescriptor(domain, [{ key: 'path', value: '/p12345/x' }])).toBeUndefined();
    // Generous: a few hundred ms on an idle machine.
    expect(performance.now() - started).toBeLessThan(20_000);
  });
});
