import { describe, expect, it } from 'vitest';
import { StreamTable } from '../src/grpc/stream-table.js';

/** A seeded generator (mulberry32), so that a failure replays. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Checks every id up to `last` against the model, and the listed values. */
function same(table: StreamTable<string>, model: Map<number, string>, last: number): void {
  expect(table.size).toBe(model.size);
  const wrong: number[] = [];
  for (let id = 1; id <= last + 2; id += 2) if (table.get(id) !== model.get(id)) wrong.push(id);
  expect(wrong).toEqual([]);
  expect(table.list().sort()).toEqual([...model.values()].sort());
  expect(table.capacity).toBeGreaterThanOrEqual(2 * table.size);
}

describe('StreamTable', () => {
  it('answers as a Map does through random adds and deletes, wrap-around and collisions included', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const next = random(seed);
      const table = new StreamTable<string>();
      const model = new Map<number, string>();
      let last = 1;
      for (let step = 0; step < 2000; step++) {
        // Ids rise by uneven steps, so that live ids wrap around the table and share home slots.
        if (model.size < 40 && next() < 0.55) {
          last += 2 * (1 + Math.floor(next() * 40));
          table.add(last, `s${last}`);
          model.set(last, `s${last}`);
        } else if (model.size > 0) {
          const ids = [...model.keys()];
          const id = ids[Math.floor(next() * ids.length)] as number;
          table.delete(id);
          model.delete(id);
        }
        // An id that is not held, deleted: nothing changes.
        table.delete(last + 2);
        if (step % 97 === 0) same(table, model, last);
      }
      same(table, model, last);
    }
  });

  it('keeps its arrays while streams open and close, and gives back what it grew to when empty', () => {
    const table = new StreamTable<number>();
    // A connection that never opens a stream holds no arrays.
    expect(table.capacity).toBe(0);
    expect(table.get(1)).toBeUndefined();
    table.delete(1);
    table.add(1, 1);
    const start = table.capacity;
    expect(start).toBeGreaterThan(0);
    // A connection with up to 6 streams open at once, over 100,000 calls.
    for (let id = 3; id < 200_000; id += 2) {
      table.add(id, id);
      if (id > 10) table.delete(id - 10);
    }
    expect(table.capacity).toBe(start);
    expect(table.size).toBe(5);
    for (let id = 200_001; id < 202_001; id += 2) table.add(id, id);
    expect(table.capacity).toBeGreaterThanOrEqual(2 * table.size);
    table.compact();
    expect(table.capacity).toBeGreaterThan(start);
    for (const id of table.list()) table.delete(id);
    expect(table.size).toBe(0);
    table.compact();
    expect(table.capacity).toBe(start);
    expect(table.get(200_001)).toBeUndefined();
  });
});
