import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config.js';
import { type CompiledDomain, compileRules, type DescriptorEntry, matchDescriptor } from '../src/rules.js';
import { DecisionStats } from '../src/stats.js';

const config = parseConfig(`
domains:
  - domain: api
    descriptors:
      - key: path
        policies: [{ algorithm: gcra, name: any-path, limit: 1, periodMs: 1000 }]
      - key: path
        value: /api/*
        policies: [{ algorithm: gcra, name: api, limit: 1, periodMs: 1000 }]
      - key: path
        value: /api/admin/*
        shared: true
        policies: [{ algorithm: gcra, name: admin, limit: 1, periodMs: 1000 }]
      - key: path
        value: /api/login
        descriptors:
          - key: user
            policies: [{ algorithm: gcra, name: login, limit: 1, periodMs: 1000 }]
`);
const domain = compileRules(config, new DecisionStats()).get('api') as CompiledDomain;

function match(...pairs: [string, string][]) {
  const entries: DescriptorEntry[] = pairs.map(([key, value]) => ({ key, value }));
  const m = matchDescriptor(domain, entries);
  return m === undefined ? undefined : { rule: m.rule.label, policy: m.rule.policies[0]?.name, key: m.key };
}

describe('descriptor matching', () => {
  it('prefers an exact value, then the longest prefix, then any value', () => {
    expect(match(['path', '/api/login'])).toMatchObject({ rule: 'path=/api/login', policy: undefined });
    expect(match(['path', '/api/admin/users'])).toMatchObject({ rule: 'path=/api/admin/*', policy: 'admin' });
    expect(match(['path', '/api/items'])).toMatchObject({ rule: 'path=/api/*', policy: 'api' });
    expect(match(['path', '/static/x.css'])).toMatchObject({ rule: 'path', policy: 'any-path' });
  });

  it('walks nested rules entry by entry and gives up when an entry matches nothing', () => {
    expect(match(['path', '/api/login'], ['user', 'ada'])).toMatchObject({
      rule: 'path=/api/login > user',
      policy: 'login',
    });
    expect(match(['path', '/api/login'], ['team', 'x'])).toBeUndefined();
    expect(match(['path', '/api/items'], ['user', 'ada'])).toBeUndefined();
    expect(match(['method', 'GET'])).toBeUndefined();
  });

  it('keys each value apart, except under a shared wildcard', () => {
    expect(match(['path', '/api/a'])?.key).not.toBe(match(['path', '/api/b'])?.key);
    expect(match(['path', '/api/admin/a'])?.key).toBe(match(['path', '/api/admin/b'])?.key);
  });

  it('escapes keys so that no two descriptors share one by accident', () => {
    const a = match(['path', '/api/x|user=y']);
    const b = match(['path', '/api/x'], ['user', 'y']);
    expect(a?.key).toBe('api|path=/api/x\\|user\\=y');
    expect(b).toBeUndefined();
    const c = match(['path', '/api/login'], ['user', 'a=b']);
    const d = match(['path', '/api/login'], ['user', 'a\\=b']);
    expect(c?.key).not.toBe(d?.key);
    // A value that looks like the shared marker never collides with it.
    expect(match(['path', '/api/admin/*'])?.key).toBe('api|path=\\*/api/admin/*');
    expect(match(['path', '/api/\\*/api/admin/*'])?.key).not.toBe(match(['path', '/api/admin/*'])?.key);
  });
});
