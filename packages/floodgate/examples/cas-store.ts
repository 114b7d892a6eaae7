import { decide, type Evaluation, emptyEvaluation, inspect, type State } from 'floodgate/model';
import { encodeKey, type Store, type StoreResult } from 'floodgate/store';

/** What the database offers: a versioned read, and a write that succeeds only if the version is unchanged. */
export interface VersionedKv {
  /** The value under `key` and its version (0 when absent). */
  get(key: string): Promise<{ value: string | undefined; version: number }>;
  /**
   * Writes `value` (deletes with `undefined`) if the key is still at `version`, to expire at `expiresAtMs`;
   * false when another writer came first.
   */
  compareAndSet(key: string, version: number, value: string | undefined, expiresAtMs: number): Promise<boolean>;
}

/** One record per user key: each policy's state (`<name>:<kind>`) and when it is untouched again (µs). */
type Row = Record<string, { s: State; until: number }>;

/**
 * A store on any database with a compare-and-swap: read the key's record, run the model on it, write it
 * back only if nobody wrote in between, else decide again on what the other writer left. One record
 * holds every policy of a user key, so one write commits a whole call, all-or-nothing.
 */
export function casStore(kv: VersionedKv, name = 'cas'): Store {
  async function update<T>(
    prefix: string,
    userKey: string,
    change: (row: Row) => { result: T; write: boolean },
  ): Promise<T> {
    const key = `${prefix}:{${encodeKey(userKey)}}`;
    for (;;) {
      const { value, version } = await kv.get(key);
      const row: Row = value === undefined ? {} : JSON.parse(value);
      const { result, write } = change(row);
      if (!write) return result;
      // The record lives until its last policy is untouched again; an empty one is deleted.
      const entries = Object.values(row);
      const untilUs = Math.max(0, ...entries.map((e) => e.until));
      const text = entries.length === 0 ? undefined : JSON.stringify(row);
      if (await kv.compareAndSet(key, version, text, Math.ceil(untilUs / 1000))) return result;
    }
  }

  return {
    name,
    // No clock of its own: the limiter passes the caller's in every request (`nowUs`).
    hasOwnClock: false,
    decide: (request) =>
      update(request.prefix, request.key, (row) => {
        const nowUs = request.nowUs as number;
        const ids = request.policies.map((c) => `${c.name}:${c.kind}`);
        // A state past its `until` decides exactly like none.
        const states = ids.map((id) => {
          const entry = row[id];
          return entry !== undefined && entry.until > nowUs ? entry.s : undefined;
        });
        const evaluations: Evaluation[] = request.policies.map(() => emptyEvaluation());
        const allowed = decide(request.policies, states, nowUs, request.cost, request, evaluations);
        const result: StoreResult = { allowed, evaluations };
        let write = false;
        request.policies.forEach((c, i) => {
          const next = evaluations[i]?.next;
          if (next === undefined) return;
          const s = [...next]; // the model's next states live in reused buffers
          row[ids[i] as string] = { s, until: nowUs + inspect(c, s, nowUs).resetAfterUs };
          write = true;
        });
        return { result, write };
      }),
    reset: (prefix, key, policies) =>
      update(prefix, key, (row) => {
        for (const c of policies) delete row[`${c.name}:${c.kind}`];
        return { result: undefined, write: true };
      }),
  };
}
