// A flood of fresh keys against keys at their limit, on the memory store. The attacker controls the keys
// and their number; the operator's policies include one that keeps a key longer than the victims' own.
// Before least-consumed eviction, the keys closest to expiry went first: the victims, who came back with
// a fresh quota; then a flood of keys each a little more consumed than the victims pushed them out anyway
// (issue 26). Now a key let go leaves what it owes in its policy's summary, and a key the store does not
// hold starts from there. Scaled from the full-size attacks (maxKeys 100,000, 2,000,000 keys; 500,000
// keys of 4 calls) to run in seconds; bench/key-flood.ts and bench/eviction-flood.ts run the full size.
import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  memoryStore,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from '../../src/index.js';
import { manualClock } from '../../src/testing/index.js';

const MAX_KEYS = 10_000;
const VICTIMS = 100;
const MINUTE = 60_000;
const HOUR = 3_600_000;

/** Each victim policy admits 5 at once and recovers nothing within the test's few simulated seconds. */
const VICTIM_POLICIES: [string, Policy][] = [
  ['fixed window', fixedWindow({ limit: 5, windowMs: MINUTE })],
  ['sliding window', slidingWindow({ limit: 5, windowMs: MINUTE })],
  ['bucketed window', slidingWindow({ limit: 5, windowMs: MINUTE, precisionMs: 1000 })],
  ['sliding log', slidingLog({ limit: 5, windowMs: MINUTE })],
  ['GCRA', gcra({ limit: 5, periodMs: MINUTE })],
  ['token bucket, continuous', tokenBucket({ capacity: 5, refillAmount: 5, refillIntervalMs: MINUTE })],
  [
    'token bucket, interval',
    tokenBucket({ capacity: 5, refillAmount: 5, refillIntervalMs: MINUTE, refill: 'interval' }),
  ],
  ['leaky bucket', leakyBucket({ capacity: 5, leakPerSecond: 5 / 60 })],
];

interface Attack {
  victimPolicy: Policy;
  floodKeys: number;
  whenFull: 'evict' | 'refuse';
  /** The flood's calls each spend this much of a fresh key's quota of 10. */
  floodCost?: number;
}

/** Victims at their limit, then the flood, then 10 calls per victim: what the victims and the flood got. */
function attack({ victimPolicy, floodKeys, whenFull, floodCost = 1 }: Attack) {
  const clock = manualClock();
  // The limit fits in the same clock window for every algorithm: start on a minute boundary.
  clock.set(Math.ceil(clock.nowMs() / MINUTE) * MINUTE);
  const store = memoryStore({ maxKeys: MAX_KEYS, whenFull });
  const victims = createLimiter({ store, clock, prefix: 'victim', policies: [victimPolicy] });
  const flood = createLimiter({
    store,
    clock,
    prefix: 'flood',
    failure: 'open',
    policies: [fixedWindow({ limit: 10, windowMs: HOUR })],
  });
  let victimAdmitted = 0;
  for (let v = 0; v < VICTIMS; v++) {
    for (let i = 0; i < 5; i++) if (victims.limitSync(`victim-${v}`).allowed) victimAdmitted++;
  }
  let degraded = 0;
  let largest = 0;
  let floodAdmitted = 0;
  for (let i = 0; i < floodKeys; i++) {
    const decision = flood.limitSync(`fresh-${i}`, { cost: floodCost });
    if (decision.reason === 'degraded') degraded++;
    else if (decision.allowed) floodAdmitted++;
    if (store.size > largest) largest = store.size;
    if ((i & 1023) === 0) clock.advance(1);
  }
  let more = 0;
  for (let v = 0; v < VICTIMS; v++) {
    for (let i = 0; i < 10; i++) if (victims.limitSync(`victim-${v}`).allowed) more++;
  }
  return { store, victimAdmitted, more, degraded, largest, floodAdmitted };
}

describe('hostile: a flood of fresh keys against keys at their limit (memory store)', () => {
  it(`fixed window: 100 victims, then ${20 * MAX_KEYS} fresh keys under an hour's policy: 0 more admissions`, () => {
    const { store, victimAdmitted, more, largest, floodAdmitted } = attack({
      victimPolicy: fixedWindow({ limit: 5, windowMs: MINUTE }),
      floodKeys: 20 * MAX_KEYS,
      whenFull: 'evict',
    });
    expect(victimAdmitted).toBe(500);
    // Each eviction takes a victim only if all five sampled keys are victims: (100/10,000)^5 = 1e-10,
    // so the 190,000 evictions leave every victim in place but for a chance of 2e-5.
    expect(more).toBe(0);
    expect(largest).toBe(MAX_KEYS);
    // Every flood key stored took the place of another once the store was full.
    expect(store.forcedEvictions).toBe(floodAdmitted - (MAX_KEYS - VICTIMS));
    expect(store.refusedKeys).toBe(0);
  });

  for (const [name, victimPolicy] of VICTIM_POLICIES.slice(1)) {
    it(`${name}: the victims get 0 more after ${5 * MAX_KEYS} fresh keys`, () => {
      const { more, victimAdmitted, largest } = attack({ victimPolicy, floodKeys: 5 * MAX_KEYS, whenFull: 'evict' });
      expect(victimAdmitted).toBe(500);
      expect(more).toBe(0);
      expect(largest).toBe(MAX_KEYS);
    });
  }

  it("whenFull 'refuse': the flood is answered per the failure policy, the victims stay exact", () => {
    const floodKeys = 20 * MAX_KEYS;
    const { store, more, degraded, largest } = attack({
      victimPolicy: fixedWindow({ limit: 5, windowMs: MINUTE }),
      floodKeys,
      whenFull: 'refuse',
    });
    expect(more).toBe(0);
    // Room for 9,900 fresh keys; every later one is refused and answered by failure: 'open'.
    expect(degraded).toBe(floodKeys - (MAX_KEYS - VICTIMS));
    expect(store).toMatchObject({ refusedKeys: degraded, forcedEvictions: 0, size: MAX_KEYS });
    expect(largest).toBe(MAX_KEYS);
  });

  it("whenFull 'refuse' also holds when the flood's keys are spent to their limit (cost = limit)", () => {
    // Keys as consumed as the victims cannot be told from them by eviction; refusal keeps every victim.
    const { more, degraded } = attack({
      victimPolicy: fixedWindow({ limit: 5, windowMs: MINUTE }),
      floodKeys: 5 * MAX_KEYS,
      whenFull: 'refuse',
      floodCost: 10,
    });
    expect(more).toBe(0);
    expect(degraded).toBe(5 * MAX_KEYS - (MAX_KEYS - VICTIMS));
  });
});

/**
 * Issue 26's attack, cost-1 calls only: victims partly spent, then a flood of keys each a little more
 * spent than they are (so a rule that forgets the least consumed key pushes out the victims), then each
 * victim calls 10 more times in the same window. Returns what the victims got, and the store.
 */
function partlySpent(victimUsed: number, floodCalls: number, floodKeys: number) {
  const clock = manualClock();
  clock.set(Math.ceil(clock.nowMs() / (10 * MINUTE)) * 10 * MINUTE);
  const store = memoryStore({ maxKeys: MAX_KEYS });
  const limiter = createLimiter({ store, clock, policies: [fixedWindow({ limit: 5, windowMs: 10 * MINUTE })] });
  for (let v = 0; v < VICTIMS; v++) for (let i = 0; i < victimUsed; i++) limiter.limitSync(`victim-${v}`);
  let largest = 0;
  for (let i = 0; i < floodKeys; i++) {
    for (let c = 0; c < floodCalls; c++) limiter.limitSync(`flood-${i}`);
    if (store.size > largest) largest = store.size;
    if ((i & 1023) === 0) clock.advance(1);
  }
  let more = 0;
  for (let v = 0; v < VICTIMS; v++) for (let i = 0; i < 10; i++) if (limiter.limitSync(`victim-${v}`).allowed) more++;
  return { store, more, largest };
}

describe('hostile: a flood of keys a little more spent than partly spent victims (issue 26)', () => {
  it('victims at 3 of 5, then 5 × maxKeys keys of 4 calls each: the victims get 200 more, what exact allows', () => {
    const { store, more, largest } = partlySpent(3, 4, 5 * MAX_KEYS);
    // Least-consumed eviction gave 500 (every victim pushed out, back with a fresh quota).
    expect(more).toBe(200);
    expect(largest).toBe(MAX_KEYS);
    expect(store.forcedEvictions).toBeGreaterThan(MAX_KEYS);
    // The summary is one policy's: 65,536 cells of 4 doubles, however many keys went through it.
    expect(store.summaryBytes).toBe(65_536 * 4 * 8);
  });

  it('victims at their limit, then keys spent to the same limit: the victims get 0 more', () => {
    const { more, largest } = partlySpent(5, 5, 5 * MAX_KEYS);
    // Least-consumed eviction (ties to the nearest expiry) gave 500: +5 each.
    expect(more).toBe(0);
    expect(largest).toBe(MAX_KEYS);
  });
});
