import express from 'express';
import { describe, expect, it } from 'vitest';
import { rateLimit as expressRateLimit } from '../../src/http/express.js';
import { rateLimit as honoRateLimit } from '../../src/http/hono.js';
import { rateLimit as nodeRateLimit } from '../../src/http/node.js';
import { createLimiter, FloodgateError, fixedWindow, type LimiterOptions } from '../../src/index.js';
import { closestOption } from '../../src/options-check.js';

/** The error a call throws (synchronously), or a failure when it does not. */
function thrown(call: () => unknown): FloodgateError {
  try {
    call();
  } catch (error) {
    if (error instanceof FloodgateError) return error;
    throw error;
  }
  throw new Error('expected an error');
}

const policies = fixedWindow({ limit: 10, windowMs: 60_000 });

describe('unknown limiter options', () => {
  it('refuses a misspelt option, naming it and the one it likely means', () => {
    const error = thrown(() => createLimiter({ policies, timeout: 5 } as LimiterOptions));
    expect([error.code, error.option, error.unknownOption]).toEqual(['ERR_INVALID_OPTION', 'timeout', true]);
    expect(error.message).toBe('timeout is not an option of createLimiter (did you mean timeoutMs?)');
  });

  it.each([
    ['polices', 'policies'],
    ['prefx', 'prefix'],
    ['breakr', 'breaker'],
    ['failures', 'failure'],
    ['blocked', 'blockedCache'],
    ['Store', 'store'],
  ])('%s: did you mean %s?', (typo, meant) => {
    expect(thrown(() => createLimiter({ policies, [typo]: 1 } as LimiterOptions)).message).toBe(
      `${typo} is not an option of createLimiter (did you mean ${meant}?)`,
    );
  });

  it('lists the options when no name is close', () => {
    expect(thrown(() => createLimiter({ policies, zzz: 1 } as LimiterOptions)).message).toBe(
      'zzz is not an option of createLimiter (options: store, policies, prefix, clock, timeoutMs, failure, breaker, blockedCache, settleWithinMs, settleSecret, settleOnce, permits)',
    );
    expect(closestOption('q', ['store', 'prefix'])).toBeUndefined();
  });

  it('accepts every documented option, and one given as undefined', () => {
    expect(() => createLimiter({ policies, timeoutMs: 10, blockedCache: true, breaker: false })).not.toThrow();
    expect(() => createLimiter({ policies, timeout: undefined } as LimiterOptions)).not.toThrow();
  });

  it("answers express-rate-limit's window and limit with the policy to write", () => {
    const error = thrown(() => createLimiter({ windowMs: 60_000, limit: 10 } as LimiterOptions));
    expect([error.code, error.option]).toEqual(['ERR_INVALID_OPTION', 'windowMs']);
    expect(error.message).toBe(
      'windowMs is not an option of createLimiter (a window is a policy: policies: fixedWindow({ limit, windowMs }))',
    );
  });
});

describe("express-rate-limit's habits in rateLimit", () => {
  const adapters = [
    ['express', (options: object) => expressRateLimit(options as never)],
    ['node', (options: object) => nodeRateLimit(options as never)],
    ['hono', (options: object) => honoRateLimit(options as never)],
  ] as const;

  it.each(adapters)('%s: rateLimit({ windowMs, limit }) hints at fixedWindow', (_name, rateLimit) => {
    const error = thrown(() => rateLimit({ windowMs: 15 * 60_000, limit: 100 }));
    expect([error.code, error.option, error.unknownOption]).toEqual(['ERR_INVALID_OPTION', 'windowMs', true]);
    expect(error.message).toBe(
      'windowMs is not an option of rateLimit (a window is a policy: policies: fixedWindow({ limit, windowMs }))',
    );
  });

  it.each([
    [
      { max: 100 },
      'max is not an option of rateLimit (a limit is a policy: policies: fixedWindow({ limit: max, windowMs }))',
    ],
    [
      { limit: 100 },
      'limit is not an option of rateLimit (a limit is a policy: policies: fixedWindow({ limit, windowMs }))',
    ],
    [
      { policies, keyGenerator: () => 'k' },
      'keyGenerator is not an option of rateLimit (the key is key: (request) => string)',
    ],
    [
      { policies, standardHeaders: true },
      "standardHeaders is not an option of rateLimit (the header format is headers: 'ietf' (or 'draft-7', 'draft-6'))",
    ],
    [
      { policies, legacyHeaders: false },
      "legacyHeaders is not an option of rateLimit (the header format is headers: 'legacy')",
    ],
  ])('%o', (options, message) => {
    expect(thrown(() => expressRateLimit(options as never)).message).toBe(message);
  });

  it('still builds the middleware the hint describes', () => {
    const app = express();
    expect(() =>
      app.use(expressRateLimit({ policies: fixedWindow({ limit: 100, windowMs: 15 * 60_000 }) })),
    ).not.toThrow();
  });
});
