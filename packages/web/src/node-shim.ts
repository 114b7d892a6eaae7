/**
 * Stands in for `node:crypto` and `node:assert/strict` in the page's bundle. The library imports them
 * only for code the page never calls; if it ever does, this says so instead of failing obscurely.
 */
function unavailable(name: string): never {
  throw new Error(`${name} is not available in the browser build of the floodgate page`);
}

export const createHash = (): never => unavailable('node:crypto createHash');
export const deepStrictEqual = (): never => unavailable('node:assert deepStrictEqual');
export const strictEqual = (): never => unavailable('node:assert strictEqual');
