import { isFloodgateError, type MemoryStore } from 'floodgate';
import { describe, expect, it } from 'vitest';
import { openStore, STORE_URL_FORMS, StoreUrlError } from '../src/store-url.js';

describe('memory store URL', () => {
  it('reads maxKeys and whenFull', async () => {
    const opened = await openStore('memory:?maxKeys=5000&whenFull=refuse');
    expect(opened.store).toMatchObject({ name: 'memory', maxKeys: 5000, whenFull: 'refuse' });
    expect(opened.description).toBe('memory (maxKeys 5000, whenFull refuse)');
    const plain = await openStore('memory');
    expect(plain.store).toMatchObject({ maxKeys: 1_000_000, whenFull: 'evict' });
    expect(plain.description).toBe('memory');
    expect((await openStore('memory:?whenFull=evict')).store as MemoryStore).toMatchObject({ whenFull: 'evict' });
    expect(STORE_URL_FORMS.join('\n')).toMatch(/whenFull=refuse/);
  });

  it.each([
    ['memory:?maxKeys=0', /maxKeys must be a positive integer, got "0"/],
    ['memory:?maxKeys=1.5', /maxKeys must be a positive integer, got "1.5"/],
    ['memory:?maxKeys=', /maxKeys must be a positive integer, got ""/],
    ['memory:?whenFull=drop', /whenFull must be evict or refuse, got "drop"/],
    ['memory:?whenFull=', /whenFull must be evict or refuse, got ""/],
    ['memory:?maxkeys=10', /unknown parameter "maxkeys" \(known: maxKeys, whenFull\)/],
  ])('refuses %s, naming the parameter and the value', async (url, message) => {
    const error = await openStore(url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUrlError);
    expect(isFloodgateError(error)).toBe(false);
    expect((error as Error).message).toMatch(message);
  });
});
