import { isFloodgateError, type MemoryStore, type MemoryStoreOptions, memoryPermitStore, memoryStore } from 'floodgate';
import { memoryOverrides } from 'floodgate/overrides';
import { type OpenedStore, redact, StoreUrlError } from './stores/opened.js';

export { type OpenedStore, redact, StoreUrlError } from './stores/opened.js';

/** Store URL schemes, in the form the CLI documents. */
export const STORE_URL_FORMS: readonly string[] = [
  'memory (the default; memory:?maxKeys=1000000&whenFull=evict&summaryCells=65536, or whenFull=refuse)',
  'redis://[user:password@]host:port[/db]  (rediss:// for TLS)',
  'redis+cluster://[user:password@]host:port,host:port[,…]  (rediss+cluster:// for TLS)',
  'postgres://user:password@host:port/db[?table=name&schema=name&unlogged=true]  (postgresql:// too)',
  'sqlite:<path>[?table=name]  (sqlite::memory: for a private in-memory database)',
];

/**
 * Opens the store a URL names. Only the store's own client library is loaded, on demand.
 *
 * @example
 * ```ts
 * const { store, close } = await openStore('redis://127.0.0.1:6379');
 * ```
 */
export async function openStore(url: string | undefined): Promise<OpenedStore> {
  const text = (url ?? 'memory').trim();
  if (text === 'memory' || text.startsWith('memory:')) return openMemory(text);
  const scheme = text.slice(0, Math.max(0, text.indexOf(':'))).toLowerCase();
  switch (scheme) {
    case 'redis':
    case 'rediss':
    case 'redis+cluster':
    case 'rediss+cluster': {
      const { openRedis } = await import('./stores/redis.js');
      return openRedis(text, scheme);
    }
    case 'sqlite': {
      const { openSqlite } = await import('./stores/sqlite.js');
      return openSqlite(text);
    }
    case 'postgres':
    case 'postgresql': {
      const { openPostgres } = await import('./stores/postgres.js');
      return openPostgres(text);
    }
    default:
      throw new StoreUrlError(
        `unknown store URL ${JSON.stringify(redact(text))}; expected one of:\n  ${STORE_URL_FORMS.join('\n  ')}`,
      );
  }
}

function openMemory(text: string): OpenedStore {
  const options: MemoryStoreOptions = {};
  const query = text.indexOf('?');
  if (query !== -1) {
    const params = new URLSearchParams(text.slice(query + 1));
    for (const [name, value] of params) {
      if (name === 'maxKeys') {
        const n = Number(value);
        if (!Number.isSafeInteger(n) || n < 1)
          throw new StoreUrlError(`memory store: maxKeys must be a positive integer, got ${JSON.stringify(value)}`);
        options.maxKeys = n;
      } else if (name === 'whenFull') {
        if (value !== 'evict' && value !== 'refuse')
          throw new StoreUrlError(`memory store: whenFull must be evict or refuse, got ${JSON.stringify(value)}`);
        options.whenFull = value;
      } else if (name === 'summaryCells') {
        const n = Number(value);
        if (!Number.isSafeInteger(n) || n < 1)
          throw new StoreUrlError(
            `memory store: summaryCells must be a positive integer, got ${JSON.stringify(value)}`,
          );
        options.summaryCells = n;
      } else {
        throw new StoreUrlError(
          `memory store: unknown parameter ${JSON.stringify(name)} (known: maxKeys, whenFull, summaryCells)`,
        );
      }
    }
  }
  const store = newMemoryStore(options);
  const shown = [
    ...(options.maxKeys === undefined ? [] : [`maxKeys ${options.maxKeys}`]),
    ...(options.whenFull === undefined ? [] : [`whenFull ${options.whenFull}`]),
    ...(options.summaryCells === undefined ? [] : [`summaryCells ${options.summaryCells}`]),
  ];
  return {
    store,
    overrides: memoryOverrides(),
    permits: memoryPermitStore(),
    description: shown.length === 0 ? 'memory' : `memory (${shown.join(', ')})`,
    close: async () => {},
  };
}

/** `memoryStore(options)`, its refusal of an option (one past its bounds) as a store URL error. */
function newMemoryStore(options: MemoryStoreOptions): MemoryStore {
  try {
    return memoryStore(options);
  } catch (error) {
    if (isFloodgateError(error) && error.code === 'ERR_INVALID_OPTION') {
      throw new StoreUrlError(`memory store: ${error.message}`);
    }
    throw error;
  }
}
