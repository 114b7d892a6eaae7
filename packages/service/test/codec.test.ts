import { loadSync } from '@grpc/proto-loader';
import fc from 'fast-check';
import { gcra } from 'floodgate';
import { describe, expect, it } from 'vitest';
import type { DescriptorOutcome } from '../src/engine.js';
import { DecodeError, decodeRateLimitRequest, Writer } from '../src/grpc/codec.js';
import { encodeRateLimitResponse } from '../src/grpc/rate-limit.js';
import { RateLimitHeaders } from '../src/headers.js';
import { PROTO_DIR } from './helpers.js';

// The hand-written codec against a generic one generated from the same .proto files.
const definition = loadSync(['envoy/service/ratelimit/v3/rls.proto'], {
  includeDirs: [PROTO_DIR],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
});
const method = (
  definition['envoy.service.ratelimit.v3.RateLimitService'] as unknown as Record<
    string,
    { requestSerialize(m: unknown): Buffer; responseDeserialize(b: Buffer): Record<string, unknown> }
  >
).ShouldRateLimit as {
  requestSerialize(m: unknown): Buffer;
  responseDeserialize(b: Buffer): Record<string, unknown>;
};

const text = fc.string({ unit: 'binary', maxLength: 40 });
const descriptorArb = fc.record({
  entries: fc.array(fc.record({ key: text, value: text }), { maxLength: 4 }),
  limit: fc.option(
    fc.record({
      requests_per_unit: fc.integer({ min: 0, max: 2 ** 32 - 1 }),
      // RateLimitUnit stops at YEAR; 7 (RateLimitResponse's WEEK) still travels as a number.
      unit: fc.constantFrom<string | number>('UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 7),
    }),
    { nil: null },
  ),
  hits_addend: fc.option(fc.record({ value: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }) }), { nil: null }),
});
const UNIT_NUMBERS: Record<string, number> = {
  UNKNOWN: 0,
  SECOND: 1,
  MINUTE: 2,
  HOUR: 3,
  DAY: 4,
  MONTH: 5,
  YEAR: 6,
  7: 7,
};

describe('gRPC codec', () => {
  it('decodes any RateLimitRequest exactly as the generic codec encodes it', () => {
    fc.assert(
      fc.property(
        text,
        fc.array(descriptorArb, { maxLength: 5 }),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        (domain, descriptors, hits) => {
          const bytes = method.requestSerialize({ domain, descriptors, hits_addend: hits });
          const decoded = decodeRateLimitRequest(bytes);
          expect(decoded.domain).toBe(domain);
          expect(decoded.hitsAddend).toBe(hits);
          expect(decoded.descriptors).toEqual(
            descriptors.map((d) => ({
              entries: d.entries,
              hasLimit: d.limit !== null,
              requestsPerUnit: d.limit?.requests_per_unit ?? 0,
              unit: UNIT_NUMBERS[d.limit?.unit ?? 'UNKNOWN'],
              hitsAddend: d.hits_addend === null ? undefined : d.hits_addend.value,
            })),
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('skips unknown fields of every wire type and refuses malformed input', () => {
    // domain "a", then field 9 varint, field 10 fixed64, field 11 bytes, field 12 fixed32, then hits_addend 7.
    const bytes = Buffer.from([
      0x0a, 0x01, 0x61, 0x48, 0x96, 0x01, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5a, 0x02, 0x00, 0x00, 0x65, 1, 2, 3, 4, 0x18,
      0x07,
    ]);
    expect(decodeRateLimitRequest(bytes)).toEqual({ domain: 'a', descriptors: [], hitsAddend: 7 });
    expect(() => decodeRateLimitRequest(Buffer.from([0x0a, 0x05, 0x61]))).toThrow(DecodeError);
    expect(() => decodeRateLimitRequest(Buffer.from([0x18, 0x80]))).toThrow(/truncated varint/);
    expect(() => decodeRateLimitRequest(Buffer.from([0x0e]))).toThrow(/invalid wire type 6/);
  });

  /** A length-delimited field: tag, length, bytes. */
  const len = (field: number, ...parts: (Buffer | number[])[]) => {
    const body = Buffer.concat(parts.map((p) => Buffer.from(p)));
    return Buffer.concat([Buffer.from([field * 8 + 2, body.length]), body]);
  };
  const str = (field: number, value: string) => len(field, Buffer.from(value));

  it('bounds every nested field by the end of its submessage', () => {
    // Entry(len 3) { key = "k" } followed, outside the entry, by bytes that would be its value.
    const overrun = Buffer.concat([
      str(1, 'api'),
      len(2, [0x0a, 0x04], str(1, 'k'), str(2, 'vvv')), // the entry claims 4 bytes: key (3) + one of value
    ]);
    expect(() => decodeRateLimitRequest(overrun)).toThrow(DecodeError);
    // A string whose length runs past the entry, still inside the descriptor.
    const entry = Buffer.from([0x0a, 0x03, 0x0a, 0x05, 0x61]);
    expect(() => decodeRateLimitRequest(Buffer.concat([len(2, entry, str(7, 'xyz'))]))).toThrow(DecodeError);
    // A varint that runs past the limit override, and one past the hits_addend wrapper.
    expect(() => decodeRateLimitRequest(len(2, [0x12, 0x01, 0x08, 0x05]))).toThrow(/truncated varint/);
    expect(() => decodeRateLimitRequest(len(2, [0x1a, 0x02, 0x08, 0x85, 0x01]))).toThrow(/truncated varint/);
    // A descriptor that runs past its own length.
    expect(() => decodeRateLimitRequest(Buffer.concat([Buffer.from([0x12, 0x02, 0x0a, 0x04]), str(1, 'k')]))).toThrow(
      DecodeError,
    );
    // Well-formed nesting still reads.
    const good = Buffer.concat([str(1, 'api'), len(2, len(1, str(1, 'k'), str(2, 'v')), len(3, [0x08, 0x02]))]);
    expect(decodeRateLimitRequest(good)).toEqual({
      domain: 'api',
      descriptors: [
        { entries: [{ key: 'k', value: 'v' }], hasLimit: false, requestsPerUnit: 0, unit: 0, hitsAddend: 2 },
      ],
      hitsAddend: 0,
    });
  });

  it('rejects field number 0, at the top and nested', () => {
    expect(() => decodeRateLimitRequest(Buffer.from([0x00, 0x05, 0x0a, 0x01, 0x61]))).toThrow(/field number 0/);
    expect(() => decodeRateLimitRequest(Buffer.from([0x02, 0x00]))).toThrow(/field number 0/);
    expect(() => decodeRateLimitRequest(len(2, len(1, [0x00, 0x01])))).toThrow(/field number 0/);
  });

  it('skips unknown groups, nested ones included, and rejects unmatched group tags', () => {
    // domain "a", group of field 9 { varint field 1, group of field 2 { fixed32 field 3 } }, hits_addend 7
    const group = Buffer.from([0x4b, 0x08, 0x01, 0x13, 0x1d, 1, 2, 3, 4, 0x14, 0x4c]);
    expect(decodeRateLimitRequest(Buffer.concat([str(1, 'a'), group, Buffer.from([0x18, 0x07])]))).toEqual({
      domain: 'a',
      descriptors: [],
      hitsAddend: 7,
    });
    // Inside an entry.
    const entry = len(1, str(1, 'k'), [0x2b, 0x2c], str(2, 'v'));
    expect(decodeRateLimitRequest(len(2, entry)).descriptors[0]?.entries).toEqual([{ key: 'k', value: 'v' }]);
    expect(() => decodeRateLimitRequest(Buffer.from([0x4b, 0x08, 0x01]))).toThrow(/without an end-group tag/);
    expect(() => decodeRateLimitRequest(Buffer.from([0x4c]))).toThrow(/without a start-group/);
    expect(() => decodeRateLimitRequest(Buffer.from([0x4b, 0x54]))).toThrow(/end-group tag of field 10 inside/);
    // A group may not close outside the submessage it opened in.
    expect(() => decodeRateLimitRequest(Buffer.concat([len(2, [0x4b]), Buffer.from([0x4c])]))).toThrow(DecodeError);
    expect(() => decodeRateLimitRequest(Buffer.alloc(400, 0x4b))).toThrow(/nested more than 100/);
  });

  it('encodes responses the generic codec reads back, long headers and all', () => {
    const policy = gcra({ limit: 100, periodMs: 60_000, name: 'p'.repeat(60) });
    const policies = Array.from({ length: 30 }, (_, i) =>
      gcra({ limit: 100 + i, periodMs: 60_000, name: `policy-${i}` }),
    );
    const outcome = (allowed: boolean, ps: readonly (typeof policy)[]): DescriptorOutcome => ({
      code: allowed ? 'OK' : 'OVER_LIMIT',
      matched: true,
      rule: 'r',
      shadow: false,
      unlimited: false,
      policies: ps,
      decision: {
        allowed,
        limit: 100,
        remaining: allowed ? 42 : 0,
        retryAfterMs: allowed ? 0 : 1500,
        resetAfterMs: 61_234,
        policy: (ps[0] as typeof policy).name,
        policies: ps.map((p) => ({
          policy: p.name,
          allowed,
          limit: 100,
          remaining: allowed ? 42 : 0,
          retryAfterMs: allowed ? 0 : 1500,
          resetAfterMs: 61_234,
        })),
      },
    });
    const outcomes = [
      outcome(true, [policy]),
      { ...outcome(true, [policy]), decision: undefined, policies: undefined, matched: false, rule: undefined },
      outcome(false, policies),
      { ...outcome(true, [policy]), decision: undefined, policies: undefined, unlimited: true },
      {
        ...outcome(false, [policy]),
        envoy: { requestsPerUnit: 7, unit: 7, windowMs: 604_800_000, name: 'weekly' },
        envoyResetMs: 86_400_001,
      },
    ];
    const w = new Writer(16);
    encodeRateLimitResponse(w, outcomes, new RateLimitHeaders('ietf'));
    const decoded = method.responseDeserialize(w.bytes());
    expect(decoded.overall_code).toBe('OVER_LIMIT');
    // Resets in whole seconds, rounded up (61.234 s is 62): Envoy's X-RateLimit-Reset never comes early.
    expect(decoded.statuses).toEqual([
      {
        code: 'OK',
        current_limit: { name: 'p'.repeat(60), requests_per_unit: 100, unit: 'MINUTE' },
        limit_remaining: 42,
        duration_until_reset: { seconds: 62, nanos: 0 },
        quota: null,
      },
      { code: 'OK', current_limit: null, limit_remaining: 0, duration_until_reset: null, quota: null },
      {
        code: 'OVER_LIMIT',
        current_limit: { name: 'policy-0', requests_per_unit: 100, unit: 'MINUTE' },
        limit_remaining: 0,
        duration_until_reset: { seconds: 62, nanos: 0 },
        quota: null,
      },
      { code: 'OK', current_limit: null, limit_remaining: 4294967295, duration_until_reset: null, quota: null },
      {
        code: 'OVER_LIMIT',
        current_limit: { name: 'weekly', requests_per_unit: 7, unit: 'WEEK' },
        limit_remaining: 0,
        duration_until_reset: { seconds: 86_401, nanos: 0 },
        quota: null,
      },
    ]);
    const headers = decoded.response_headers_to_add as { key: string; value: string }[];
    expect(headers.map((h) => h.key)).toEqual(['RateLimit-Policy', 'RateLimit', 'Retry-After']);
    // The denied descriptor binds: its 30 policies first, then the other descriptors' one.
    expect(headers[1]?.value.split(', ')).toHaveLength(31);
    expect(headers[1]?.value.startsWith('"policy-0";r=0;t=2')).toBe(true);
    expect(headers[2]?.value).toBe('2');
  });
});
