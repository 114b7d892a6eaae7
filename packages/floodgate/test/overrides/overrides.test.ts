import { afterAll, describe, expect, it } from 'vitest';
import { createLimiter, fixedWindow, gcra, isFloodgateError, memoryStore } from '../../src/index.js';
import {
  createOverrides,
  MAX_OVERRIDE_ID_LENGTH,
  type OverrideBackend,
  type Overrides,
  withOverrides,
} from '../../src/overrides/index.js';
import { manualClock } from '../../src/testing/index.js';
import { HOSTILE_KEYS } from '../stores/redis/hostile-keys.js';
import { heldBackends } from './backends.js';

const held = await heldBackends();
afterAll(async () => {
  for (const h of held) await h.close();
});

async function rejects(promise: Promise<unknown>, code: string, option: string): Promise<void> {
  try {
    await promise;
  } catch (error) {
    expect(isFloodgateError(error) && [error.code, error.option]).toEqual([code, option]);
    return;
  }
  throw new Error(`expected ${code} on ${option}`);
}

/** A backend that counts the calls reaching it. */
function counted(backend: OverrideBackend): OverrideBackend & { reads: number; versions: number } {
  const c = {
    ...backend,
    reads: 0,
    versions: 0,
    read: (ids: readonly string[]) => {
      c.reads++;
      return backend.read(ids);
    },
    version: () => {
      c.versions++;
      return backend.version();
    },
  };
  return c;
}

for (const h of held) {
  describe(`overrides on ${h.name}`, () => {
    const clock = manualClock({ startMs: 1_700_000_000_000 });
    const fresh = (): Overrides => createOverrides({ backend: h.open(), clock, refreshMs: 500 });
    const tenPerMinute = gcra({ limit: 10, periodMs: 60_000 });

    it('sets, gets, replaces and deletes an override; an expired one is gone', async () => {
      const o = fresh();
      const target = { scope: 'tenant', id: `acme-${h.name}` } as const;
      expect(await o.get(target)).toBeUndefined();
      const stored = await o.set(target, { policies: [tenPerMinute], note: 'ticket 42' });
      expect(stored).toEqual({
        ...target,
        policies: [tenPerMinute],
        note: 'ticket 42',
        updatedAt: clock.nowUs() / 1000,
      });
      expect(await o.get(target)).toEqual(stored);
      expect(JSON.parse(JSON.stringify(await o.get(target)))).toEqual(stored);
      const expiring = await o.set(target, { policies: tenPerMinute, expiresAt: clock.nowUs() / 1000 + 1000 });
      expect((await o.get(target))?.expiresAt).toBe(expiring.expiresAt);
      clock.advance(1000);
      expect(await o.get(target)).toBeUndefined();
      await o.set(target, { policies: tenPerMinute });
      expect(await o.delete(target)).toBe(true);
      expect(await o.delete(target)).toBe(false);
      expect(await o.get(target)).toBeUndefined();
    });

    it('keeps hostile ids apart, as data; refuses ids past the bound', async () => {
      const o = fresh();
      const ids = HOSTILE_KEYS.filter((k) => k.length <= MAX_OVERRIDE_ID_LENGTH);
      for (const [i, id] of ids.entries()) {
        await o.set({ scope: 'key', id }, { policies: gcra({ limit: i + 1, periodMs: 1000 }) });
      }
      for (const [i, id] of ids.entries()) {
        const got = await o.get({ scope: 'key', id });
        expect([got?.id, got?.policies[0]?.algorithm === 'gcra' && got.policies[0].limit]).toEqual([id, i + 1]);
      }
      await rejects(
        o.set({ scope: 'key', id: 'x'.repeat(MAX_OVERRIDE_ID_LENGTH + 1) }, { policies: tenPerMinute }),
        'ERR_INVALID_KEY',
        'target.id',
      );
      await rejects(o.get({ scope: 'key', id: '' }), 'ERR_INVALID_KEY', 'target.id');
      await rejects(o.get({ scope: 'user' as 'key', id: 'a' }), 'ERR_INVALID_OPTION', 'target.scope');
      for (const id of ids) await o.delete({ scope: 'key', id });
    });

    it('validates what an override sets, before the store is called', async () => {
      const o = fresh();
      const t = { scope: 'plan', id: 'free' } as const;
      const now = clock.nowUs() / 1000;
      await rejects(o.set(t, { policies: [] }), 'ERR_INVALID_POLICY', 'override.policies');
      await rejects(
        o.set(t, { policies: { algorithm: 'gcra', limit: -1, periodMs: 1 } }),
        'ERR_INVALID_POLICY',
        'override.policies.limit',
      );
      await rejects(o.set(t, { policies: Array(17).fill(tenPerMinute) }), 'ERR_INVALID_POLICY', 'override.policies');
      await rejects(
        o.set(t, { policies: [tenPerMinute, tenPerMinute] }),
        'ERR_INVALID_POLICY',
        'override.policies[1].name',
      );
      await rejects(o.set(t, { policies: tenPerMinute, expiresAt: now }), 'ERR_INVALID_OPTION', 'override.expiresAt');
      await rejects(o.set(t, { policies: tenPerMinute, expiresAt: 1.5 }), 'ERR_INVALID_OPTION', 'override.expiresAt');
      await rejects(o.set(t, { policies: tenPerMinute, note: 'n'.repeat(257) }), 'ERR_INVALID_OPTION', 'override.note');
      await rejects(o.set(t, { policies: tenPerMinute, extra: 1 } as never), 'ERR_INVALID_OPTION', 'override.extra');
      await rejects(o.list({ limit: 1001 }), 'ERR_INVALID_OPTION', 'limit');
      await rejects(o.list({ limit: 0 }), 'ERR_INVALID_OPTION', 'limit');
      await rejects(o.list({ cursor: 'c'.repeat(513) }), 'ERR_INVALID_OPTION', 'cursor');
      expect(await o.get(t)).toBeUndefined();
    });

    it('lists in bounded pages with a cursor, by scope, leaving expired ones out', async () => {
      const o = fresh();
      const tag = `list-${h.name}-`;
      const ids = Array.from({ length: 25 }, (_, i) => `${tag}${String(i).padStart(2, '0')}`);
      for (const id of ids) await o.set({ scope: 'plan', id }, { policies: tenPerMinute });
      await o.set(
        { scope: 'plan', id: `${tag}zz-expiring` },
        { policies: tenPerMinute, expiresAt: clock.nowUs() / 1000 + 10 },
      );
      await o.set({ scope: 'tenant', id: `${tag}t` }, { policies: tenPerMinute });
      clock.advance(10);
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await o.list({ scope: 'plan', limit: 10, ...(cursor === undefined ? {} : { cursor }) });
        expect(page.overrides.length).toBeLessThanOrEqual(10);
        seen.push(...page.overrides.map((x) => x.id));
        cursor = page.cursor;
        pages++;
      } while (cursor !== undefined);
      expect(seen.filter((id) => id.startsWith(tag))).toEqual(ids);
      expect(pages).toBeGreaterThanOrEqual(3);
      const tenants = await o.list({ scope: 'tenant', limit: 1000 });
      expect(tenants.overrides.map((x) => x.scope)).not.toContain('plan');
      for (const id of ids) await o.delete({ scope: 'plan', id });
      await o.delete({ scope: 'tenant', id: `${tag}t` });
    });

    it('a change made by another process takes effect once the cache reads the counter (refreshMs)', async () => {
      const writer = fresh();
      const reader = createOverrides({ backend: h.open(), clock, refreshMs: 500 });
      const key = `fleet-${h.name}`;
      expect(await reader.lookup({ key })).toBeUndefined();
      await writer.set({ scope: 'key', id: key }, { policies: tenPerMinute });
      clock.advance(499);
      expect(await reader.lookup({ key })).toBeUndefined();
      clock.advance(1);
      expect((await reader.lookup({ key }))?.policies).toEqual([tenPerMinute]);
      await writer.delete({ scope: 'key', id: key });
      clock.advance(500);
      expect(await reader.lookup({ key })).toBeUndefined();
    });

    it('a flood of lookups for keys without overrides stays within the cache bound, one read per call', async () => {
      const backend = counted(h.open());
      const o = createOverrides({ backend, clock, cacheSize: 100, refreshMs: 60_000, ttlMs: 60_000 });
      await o.set({ scope: 'tenant', id: 'flood' }, { policies: tenPerMinute });
      const before = backend.reads;
      for (let i = 0; i < 2000; i++) {
        const found = await o.lookup({ key: `attacker-${i}`, tenant: 'flood', plan: 'free' });
        expect(found?.id).toBe('flood');
      }
      expect(o.stats.entries).toBeLessThanOrEqual(100);
      // One read per call for its missing targets together, never one per target.
      expect(backend.reads - before).toBe(2000);
      // The same keys again: the hot ones (the tenant) are served from the cache.
      const reads = backend.reads;
      for (let i = 0; i < 50; i++) await o.lookup({ key: `attacker-${1999 - (i % 40)}`, tenant: 'flood' });
      expect(backend.reads).toBe(reads);
      await o.delete({ scope: 'tenant', id: 'flood' });
    });

    it('applies the most specific override through a limiter: key, then tenant, then plan', async () => {
      const o = fresh();
      const base = fixedWindow({ limit: 2, windowMs: 60_000, name: 'api' });
      const limiter = createLimiter({ store: memoryStore(), policies: base, clock });
      const limited = withOverrides(limiter, o);
      const k = `spec-${h.name}`;
      await o.set({ scope: 'plan', id: 'pro' }, { policies: fixedWindow({ limit: 5, windowMs: 60_000 }) });
      await o.set({ scope: 'tenant', id: 'acme' }, { policies: fixedWindow({ limit: 7, windowMs: 60_000 }) });
      await o.set({ scope: 'key', id: k }, { policies: fixedWindow({ limit: 9, windowMs: 60_000 }) });
      expect((await limited.check(k, { plan: 'pro' })).limit).toBe(9);
      expect((await limited.check('other', { plan: 'pro', tenant: 'acme' })).limit).toBe(7);
      expect((await limited.check('other', { plan: 'pro' })).limit).toBe(5);
      expect((await limited.check('other')).limit).toBe(2);
      const d = await limited.limit('other', { plan: 'pro' });
      expect(d.policy).toBe('api');
      for (const t of [
        { scope: 'plan', id: 'pro' },
        { scope: 'tenant', id: 'acme' },
        { scope: 'key', id: k },
      ] as const) {
        await o.delete(t);
      }
    });
  });
}
