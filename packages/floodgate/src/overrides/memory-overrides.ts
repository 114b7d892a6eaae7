import { compareIds, type OverrideBackend } from './backend.js';

/**
 * Overrides kept in this process (tests, a single process, the memory store). A fleet shares overrides
 * through a network store instead.
 */
export function memoryOverrides(): OverrideBackend {
  const records = new Map<string, { record: string; expiresAtMs: number | undefined }>();
  let version = 0;
  return {
    name: 'memory',
    read: (ids) => Promise.resolve(ids.map((id) => records.get(id)?.record)),
    write(id, record, expiresAtMs) {
      records.set(id, { record, expiresAtMs });
      version++;
      return Promise.resolve();
    },
    remove(id) {
      const had = records.delete(id);
      if (had) version++;
      return Promise.resolve(had);
    },
    page(after, limit, startsWith) {
      const ids = [...records.keys()]
        .filter((id) => id.startsWith(startsWith) && (after === '' || compareIds(id, after) > 0))
        .sort(compareIds);
      return Promise.resolve(
        ids.slice(0, limit).map((id) => ({ id, record: (records.get(id) as { record: string }).record })),
      );
    },
    version: () => Promise.resolve(String(version)),
    prune(nowMs, limit) {
      let removed = 0;
      for (const [id, { expiresAtMs }] of records) {
        if (removed >= limit) break;
        if (expiresAtMs !== undefined && expiresAtMs <= nowMs) {
          records.delete(id);
          removed++;
        }
      }
      if (removed > 0) version++;
      return Promise.resolve(removed);
    },
  };
}
