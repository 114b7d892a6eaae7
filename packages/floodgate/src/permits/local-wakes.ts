import type { PermitUnwatch } from './store.js';

/**
 * The listeners of each key's wakes within this process: what a permit store without a notification
 * connection (memory; SQLite among the stores of one process on a file) offers as `watch`.
 */
export class LocalWakes {
  readonly #listeners = new Map<string, Set<(ticket: number) => void>>();

  /** Adds `listener` to the key's listeners; the function that takes it out. */
  watch(key: string, listener: (ticket: number) => void): PermitUnwatch {
    const listeners = this.#listeners;
    let set = listeners.get(key);
    if (set === undefined) {
      set = new Set();
      listeners.set(key, set);
    }
    const held = set;
    const entry = (ticket: number) => listener(ticket);
    held.add(entry);
    return () => {
      held.delete(entry);
      if (held.size === 0 && listeners.get(key) === held) listeners.delete(key);
    };
  }

  /**
   * Tells the key's listeners of the wake `ticket` (none when 0) after the operation returned, never from
   * inside it, as a message would arrive; returns `reply`.
   */
  tell<R extends { wake?: number }>(key: string, reply: R): R {
    const ticket = reply.wake ?? 0;
    const set = ticket > 0 ? this.#listeners.get(key) : undefined;
    if (set !== undefined) {
      queueMicrotask(() => {
        for (const listener of [...set]) listener(ticket);
      });
    }
    return reply;
  }
}
