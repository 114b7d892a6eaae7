import { describe, expect, it } from 'vitest';
import { PrefixTrie } from '../src/prefix-trie.js';

/** A small seeded generator, so a failure replays. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function word(next: () => number, alphabet: string, max: number): string {
  let s = '';
  const n = Math.floor(next() * (max + 1));
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(next() * alphabet.length)];
  return s;
}

describe('PrefixTrie', () => {
  // Alphabets of 3 letters (deep chains, few children) and of 40 (nodes past the scanned size, searched by halving).
  for (const alphabet of ['abc', 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN']) {
    it(`matches a brute-force scan over random keys and values (alphabet of ${alphabet.length})`, () => {
      for (const seed of [1, 2, 3, 4, 5]) {
        const next = random(seed);
        const trie = new PrefixTrie<number>();
        const keys = new Map<string, number>();
        for (let round = 0; round < 4; round++) {
          // Keys are added between walks: the walking layout must follow.
          for (let i = 0; i < 60; i++) {
            const key = word(next, alphabet, 6);
            keys.set(key, i + round * 100);
            trie.set(key, i + round * 100);
          }
          for (let i = 0; i < 300; i++) {
            const value = word(next, alphabet, 9);
            const expected = [...keys].filter(([k]) => value.startsWith(k)).sort((a, b) => a[0].length - b[0].length);
            const seen: number[] = [];
            trie.prefixesOf(value, (v) => seen.push(v));
            expect(seen, `seed ${seed}, value ${value}`).toEqual(expected.map(([, v]) => v));
            expect(trie.longest(value)).toBe(expected.at(-1)?.[1]);
            expect(trie.get(value)).toBe(keys.get(value));
            expect(trie.has(value)).toBe(keys.has(value));
          }
        }
      }
    });
  }

  it('a key may hold undefined, and the empty key matches every value', () => {
    const trie = new PrefixTrie<string | undefined>();
    trie.set('', 'any');
    trie.set('ab', undefined);
    expect(trie.longest('zzz')).toBe('any');
    expect(trie.has('ab')).toBe(true);
    const seen: (string | undefined)[] = [];
    trie.prefixesOf('abc', (v) => seen.push(v));
    expect(seen).toEqual(['any', undefined]);
  });
});
