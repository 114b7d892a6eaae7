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

  it('reads summaryCells', async () => {
    const opened = await openStore('memory:?maxKeys=100&summaryCells=1024');
    expect(opened.store).toMatchObject({ name: 'memory', maxKeys: 100, summaryCells: 1024 });
    expect(opened.description).toBe('memory (maxKeys 100, summaryCells 1024)');
    expect((await openStore('memory')).store).toMatchObject({ summaryCells: 65_536 });
    expect((await openStore(`memory:?summaryCells=${2 ** 24}`)).store).toMatchObject({ summaryCells: 2 ** 24 });
    expect(STORE_URL_FORMS.join('\n')).toMatch(/summaryCells=/);
  });

  it.each([
    ['memory:?maxKeys=0', /maxKeys must be a positive integer, got "0"/],
    ['memory:?maxKeys=1.5', /maxKeys must be a positive integer, got "1.5"/],
    ['memory:?maxKeys=', /maxKeys must be a positive integer, got ""/],
    ['memory:?whenFull=drop', /whenFull must be evict or refuse, got "drop"/],
    ['memory:?whenFull=', /whenFull must be evict or refuse, got ""/],
    ['memory:?maxkeys=10', /unknown parameter "maxkeys" \(known: maxKeys, whenFull, summaryCells\)/],
    ['memory:?summaryCells=0', /summaryCells must be a positive integer, got "0"/],
    ['memory:?summaryCells=-1', /summaryCells must be a positive integer, got "-1"/],
    ['memory:?summaryCells=2.5', /summaryCells must be a positive integer, got "2.5"/],
    ['memory:?summaryCells=', /summaryCells must be a positive integer, got ""/],
    ['memory:?summaryCells=many', /summaryCells must be a positive integer, got "many"/],
    [`memory:?summaryCells=${2 ** 24 + 1}`, /summaryCells must be an integer from 1 to 16777216, got 16777217/],
    ['memory:?summaryCells=1e300', /summaryCells must be a positive integer, got "1e300"/],
  ])('refuses %s, naming the parameter and the value', async (url, message) => {
    const error = await openStore(url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUrlError);
    expect(isFloodgateError(error)).toBe(false);
    expect((error as Error).message).toMatch(message);
  });
});
