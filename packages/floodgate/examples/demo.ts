// A burst of 8 calls at the same instant against each algorithm, then the same 8 calls one second
// later: what each admits, what it denies, and how long it tells a denied caller to wait.
import {
  createLimiter,
  fixedWindow,
  gcra,
  leakyBucket,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from 'floodgate';
import { manualClock } from 'floodgate/testing';

const policies: Policy[] = [
  gcra({ limit: 5, periodMs: 5000 }),
  tokenBucket({ capacity: 5, refillAmount: 1, refillIntervalMs: 1000 }),
  tokenBucket({ capacity: 5, refillAmount: 1, refillIntervalMs: 1000, refill: 'interval' }),
  leakyBucket({ capacity: 5, leakPerSecond: 1 }),
  leakyBucket({ capacity: 5, leakPerSecond: 1, mode: 'queue' }),
  fixedWindow({ limit: 5, windowMs: 5000 }),
  slidingWindow({ limit: 5, windowMs: 5000 }),
  slidingLog({ limit: 5, windowMs: 5000, blockMs: 3000 }),
];

const clock = manualClock({ startMs: Date.UTC(2030, 0, 1) });
console.log('8 calls at t=0 s, then 8 more at t=1 s (✓ admitted, ✗ denied; +n s: wait n s)\n');
const limiters = policies.map((policy) => createLimiter({ policies: [policy], clock }));
const rows = policies.map((policy) => [policy.name.padEnd(54)]);
for (const at of [0, 1000]) {
  clock.set(Date.UTC(2030, 0, 1) + at);
  limiters.forEach((limiter, i) => {
    const marks: string[] = [];
    for (let call = 0; call < 8; call++) {
      const d = limiter.limitSync('client-1');
      marks.push(
        d.allowed ? (d.delayMs ? `✓+${d.delayMs / 1000}s` : '✓') : `✗${d.reason === 'blocked' ? '(blocked)' : ''}`,
      );
    }
    const last = limiter.checkSync('client-1');
    rows[i]?.push(`${marks.join(' ').padEnd(40)} retry in ${last.retryAfterMs / 1000}s`);
  });
}
for (const row of rows) console.log(`${row[0]}\n    t=0s  ${row[1]}\n    t=1s  ${row[2]}`);
