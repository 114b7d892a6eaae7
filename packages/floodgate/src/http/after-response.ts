import { isThenable, type MaybePromise } from './options.js';
import { type Shared, warnOnce } from './warnings.js';

/**
 * The outcome's `settle` of an admitted request whose charge is decided after its response (a refund, a
 * settle): runs once, and not at all for a response cut short (no status), since hanging up must not make
 * a request cheaper. `read` asks the options' hook about the final status, `act` charges what it says; a
 * hook that throws or rejects goes to `failed`, and the request stays charged as it was.
 */
export function afterResponse<T>(
  read: (statusCode: number) => MaybePromise<T>,
  act: (answer: T) => Promise<void> | undefined,
  failed: (error: unknown) => void,
): (statusCode: number | undefined) => Promise<void> {
  let settled = false;
  return (statusCode) => {
    if (settled) return Promise.resolve();
    settled = true;
    if (statusCode === undefined) return Promise.resolve();
    try {
      const answer = read(statusCode);
      if (!isThenable(answer)) return act(answer) ?? Promise.resolve();
      return answer.then(act, failed);
    } catch (error) {
      failed(error);
      return Promise.resolve();
    }
  };
}

/** Warns once per middleware that the charge after a response failed; `text` says what stays charged. */
export function settleFailed(shared: Shared, text: string): (error: unknown) => void {
  return (error) => {
    warnOnce(shared, 'FLOODGATE_SETTLE_FAILED', `${text}: ${error instanceof Error ? error.message : String(error)}`);
  };
}
