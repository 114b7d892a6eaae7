import type { CallOptions, Limiter } from '../limiter/limiter.js';
import type { Decision } from '../model/decision.js';

/**
 * How the shared tables and the randomized comparison make their calls, so that they reach every path
 * of a store: with or without an options object, through the promise or the sync methods.
 */
export interface CallStyle {
  /**
   * A call that needs no options (cost 1, no reservation, the limiter's policies) is made without an
   * options object, `limit(key)`: the calls a store's fast path decides. Otherwise every call passes
   * one, `limit(key, { cost: 1 })`, which no fast path sees.
   */
  readonly bare: boolean;
  /** The sync methods (`limitSync`, `checkSync`, `statusSync`, `resetSync`): a store that decides synchronously. */
  readonly sync: boolean;
}

/** Every call with an options object, through the promise methods: the general path. */
export const GENERAL_CALLS: CallStyle = { bare: false, sync: false };

/** A limiter's calls, made in one {@link CallStyle}. */
export interface Caller {
  limit(key: string, options: CallOptions): Promise<Decision>;
  check(key: string, options: CallOptions): Promise<Decision>;
  status(key: string): Promise<Decision>;
  reset(key: string): Promise<void>;
}

/** Whether a call's options are all defaults, so a bare call means the same. */
function defaults(options: CallOptions): boolean {
  for (const [field, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (field === 'cost' && value === 1) continue;
    if (field === 'maxDelayMs' && value === 0) continue;
    return false;
  }
  return true;
}

/** The calls of `limiter` in `style`; the sync methods' errors become rejections, as the promise methods' are. */
export function callerOf(limiter: Limiter, style: CallStyle): Caller {
  const bare = (options: CallOptions) => style.bare && defaults(options);
  if (style.sync) {
    return {
      limit: async (key, options) => (bare(options) ? limiter.limitSync(key) : limiter.limitSync(key, options)),
      check: async (key, options) => (bare(options) ? limiter.checkSync(key) : limiter.checkSync(key, options)),
      status: async (key) => limiter.statusSync(key),
      reset: async (key) => limiter.resetSync(key),
    };
  }
  return {
    limit: (key, options) => (bare(options) ? limiter.limit(key) : limiter.limit(key, options)),
    check: (key, options) => (bare(options) ? limiter.check(key) : limiter.check(key, options)),
    status: (key) => limiter.status(key),
    reset: (key) => limiter.reset(key),
  };
}

/** A short name of a call style, for test names. */
export function styleName(style: CallStyle): string {
  return `${style.sync ? 'sync' : 'promise'} methods, ${style.bare ? 'no options object where none is needed' : 'an options object on every call'}`;
}
