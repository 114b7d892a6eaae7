/**
 * A synchronous call's result or error as a promise (never a synchronous throw): the promise form of a
 * synchronous store's operation (the memory and SQLite stores, the SQLite overrides).
 */
export function promised<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error);
  }
}
