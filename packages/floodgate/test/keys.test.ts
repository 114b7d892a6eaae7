import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeKey, HASH_KEYS_LONGER_THAN, storageKey } from '../src/stores/index.js';

describe('key encoding', () => {
  it('is injective: distinct keys never share storage', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 240 }),
        fc.string({ unit: 'binary', maxLength: 240 }),
        (a, b) => {
          if (a !== b) expect(encodeKey(a)).not.toBe(encodeKey(b));
        },
      ),
      { numRuns: 3000 },
    );
    const tricky = [
      '{',
      '}',
      '%',
      '%7B',
      '%7D',
      '#',
      '%23',
      '\0',
      '%00',
      '\ud800',
      '%uD800',
      '\udc00\ud800',
      '😀',
      'a:b',
      'a}:b',
    ];
    expect(new Set(tricky.map(encodeKey)).size).toBe(tricky.length);
  });

  it('never lets a key out of its braces and always yields well-formed text', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (key) => {
        const encoded = encodeKey(key);
        expect(encoded).not.toMatch(/[{}\0]/);
        expect(encoded.isWellFormed()).toBe(true);
        expect(encoded.length).toBeLessThanOrEqual(HASH_KEYS_LONGER_THAN);
        const full = storageKey('api', encoded, 'gcra-1-per-1000ms');
        expect(full.indexOf('{')).toBe(4);
        expect(full.indexOf('}')).toBe(full.lastIndexOf('}'));
      }),
      { numRuns: 3000 },
    );
  });

  it('keeps plain keys readable and hashes long ones', () => {
    expect(encodeKey('user:42')).toBe('user:42');
    expect(encodeKey('a{b}')).toBe('a%7Bb%7D');
    const long = encodeKey('x'.repeat(10_000));
    expect(long).toMatch(/^#[A-Za-z0-9_-]{43}$/);
    expect(long).not.toBe(encodeKey(`${'x'.repeat(9_999)}y`));
  });
});
